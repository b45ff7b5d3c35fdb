// Who may do what in the portal (issue 20): a tenant's members each have one role, and every
// portal route declares the action it performs with `can(action)` (authorize.ts). `authorize` (after the session
// gate in app.ts) checks the signed-in member's role against PERMISSIONS on the server, before the
// route runs, and refuses a route that declared nothing: a route added without a permission is
// closed to everyone (and test/portal/route-roles.test.ts fails) rather than open. The roles
// themselves are a member row's (src/db/members.ts).

import { ROLES, type Role } from '../db/members.ts';

const EVERYONE = ROLES;
/**
 * The one table of permissions: action → the roles that may perform it.
 *   owner      everything, members and roles included
 *   admin      keys (all, and their data country), members (not owners), batch files and cancels
 *   billing    top-ups, statement, exports, notifications, notas fiscais
 *   developer  their own keys, usage, batch files and cancels
 * Every role sees usage and the batches page.
 */
export const PERMISSIONS = {
  /** the dashboard and the model price list */
  usage: EVERYONE,
  /** one's own account: its page, the e-mail verification link, leaving the tenant */
  account: EVERYONE,
  /** the keys page, creating a key, revoking a key one may see */
  keys: ['owner', 'admin', 'developer'],
  /** seeing and revoking every key of the tenant (without it: only the keys one created) */
  'keys.all': ['owner', 'admin'],
  /** setting a key's data country (its requests served only by deployments there) when creating it */
  'keys.data_country': ['owner', 'admin'],
  /** Pix top-ups */
  topup: ['owner', 'billing'],
  /** the statement (ledger) */
  statement: ['owner', 'billing'],
  /** CSV exports of the statement and usage */
  exports: ['owner', 'billing'],
  /** notification settings: webhooks, e-mail, thresholds */
  notifications: ['owner', 'billing'],
  /** notas fiscais: the billing profile ("Dados fiscais") and the notes with their XML and PDF ("Notas fiscais") */
  invoices: ['owner', 'billing'],
  /** the batches page ("Lotes"): the tenant's batches, their counts, status and spend */
  batches: EVERYONE,
  /** downloading a batch's input, output, error and results files: they hold the prompts and answers, so not billing */
  'batches.results': ['owner', 'admin', 'developer'],
  /** cancelling a batch still running (the API's cancel): the roles that may read its prompts and answers, so not billing */
  'batches.cancel': ['owner', 'admin', 'developer'],
  /** the members page: invite, change roles, remove — members who are not owners */
  members: ['owner', 'admin'],
  /** the same for owners: invite or promote an owner, demote or remove one */
  'members.owners': ['owner'],
} as const satisfies Record<string, readonly Role[]>;
export type Action = keyof typeof PERMISSIONS;
/** What a route declares: an action, or `public` (no session needed: sign-in pages, static files, the PSP's webhook). */
export type RoutePermission = Action | 'public';

export const may = (role: Role, action: Action): boolean => (PERMISSIONS[action] as readonly Role[]).includes(role);
