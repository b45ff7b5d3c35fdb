// `catraca <command>`: the admin CLI. Exit codes: 0 ok, 1 failure, 2 usage error.
// With --json every command prints exactly one JSON object on stdout; messages go to stderr.
import { resolve } from 'node:path';
import { pathToFileURL } from 'node:url';
import { VERSION } from '../version.ts';
import { creditsGrant } from './commands/credits.ts';
import { keyCreate, keyList, keyRevoke } from './commands/key.ts';
import { ledgerCheckCommand } from './commands/ledger.ts';
import { operatorCreate, operatorDisable, operatorList, operatorReset } from './commands/operator.ts';
import { deploymentAdd, deploymentList, deploymentRemove } from './commands/deployment.ts';
import { aliasAdd, aliasList, aliasRemove, modelList, modelSet } from './commands/model.ts';
import { usageReplay } from './commands/usage.ts';
import { nfseCancel, nfseList, nfseRetry } from './commands/nfse.ts';
import { tenantCreate, tenantList, tenantMembers, tenantReactivate, tenantSuspend } from './commands/tenant.ts';
import { CliError, createContext, UsageError, type CliContext } from './context.ts';

const AMOUNTS = `Amounts (--amount, --limit, prices) are BRL with at most 6 decimals and ONE decimal separator,
a dot or a comma ("12.34", "12,34", "0.000012"). Thousands separators are refused ("1.000,00",
"1,000.00", "1 000"), and so is a separator followed by exactly three digits unless the amount is
below 1: "1.500" is 1500 in pt-BR and 1.5 in en-US, so write 1500 or 1.5 / 1.5000 ("0.825" is
fine). Balances and prices are printed with a dot, exact.`;

const CONNECTION = `Connection: DATABASE_URL / NATS_URL when set; otherwise the stack started with \`npm start\` in
this checkout (.catraca/stack.json).
Exit codes: 0 success, 1 failure, 2 usage error.`;

type Command = (ctx: CliContext, args: string[]) => Promise<number | void>;

interface CommandDef {
  run: Command;
  /** The synopsis lines shown in `catraca --help` and first in `catraca <command> --help`. */
  synopsis: string;
  /** What `catraca <command> --help` adds below the synopsis. */
  help: string;
}

const COMMANDS: Record<string, CommandDef> = {
  'tenant create': {
    run: tenantCreate,
    synopsis: `tenant create --name NAME                                  → {id, name}`,
    help: `Creates a tenant (an account with a prepaid BRL balance, initially 0).`,
  },
  'tenant list': {
    run: tenantList,
    synopsis: `tenant list                                                → {tenants: [{id, name, balance, held, active_keys, created_at}]}`,
    help: `Lists every tenant with its balance, the part of it held by requests in flight, and its number of live keys.`,
  },
  'tenant suspend': {
    run: tenantSuspend,
    synopsis: `tenant suspend --id ID --reason TEXT                       → {id, suspended: true}`,
    help: `Stops admitting requests of every key of the tenant on every front door (403 tenant_suspended);
its balance, keys and portal stay. Metering suspends a tenant by itself after a shortfall (a
settlement that could not debit in full): look at it, then reactivate.`,
  },
  'tenant reactivate': {
    run: tenantReactivate,
    synopsis: `tenant reactivate --id ID                                  → {id, reactivated: true, was}`,
    help: `Lifts a suspension; prints the reason it had.`,
  },
  'tenant members': {
    run: tenantMembers,
    synopsis: `tenant members --id ID                                     → {tenant, members: [{id, email, role, verified, created_at}]}`,
    help: `Lists the portal logins of a tenant and their roles (owner, admin, billing, developer). Members
are invited and removed in the portal (Members page); a tenant always keeps an owner.`,
  },
  'key create': {
    run: keyCreate,
    synopsis: `key create --tenant ID --label L [--models '*'|a/b,c/d]
           [--limit BRL] [--limit-reset daily|weekly|monthly]
           [--rate-limit N/INTERVAL  e.g. 60/60s, 100/1m]
           [--expires 30d|12h|2w|2026-12-31|2026-12-31T23:59:59Z]
           [--max-concurrent N] [--tpm N] [--end-user-limit BRL] [--data-country BR]
                                                           → {id, key, label, models, expires_at, data_country}`,
    help: `Creates an API key for a tenant and prints it once; only its SHA-256 is stored. The same
rules as the portal's form (src/billing/key-rules.ts):
  --label       1 to 100 characters, what the key is for
  --models      allowlist of model ids (default '*': every model in the catalog)
  --limit       BRL in whole centavos the key may spend (in total, or per --limit-reset window, UTC)
  --rate-limit  requests per interval, counted across every front door (s, m, h, d)
  --expires     the key stops working after this: a duration from now (m, h, d, w) or an ISO
                date (00:00 UTC that day) or date-time with its zone; at most 10 years away
  --max-concurrent  requests in flight at once, across every front door (429 beyond)
  --tpm             tokens per minute, counted at admission as OpenAI does: the prompt estimate plus
                    max_tokens (429 with retry-after beyond)
  --end-user-limit  BRL each end user (the request's user field) may spend per UTC day (402 beyond)
  --data-country    the key's requests go only to deployments in this country (ISO 3166-1 alpha-2,
                    see model deployment add --country), fall back only among them, and are refused
                    (403 data_residency_unavailable) when none is available: never sent abroad

${AMOUNTS}`,
  },
  'key list': {
    run: keyList,
    synopsis: `key list --tenant ID                                       → {tenant, keys: [{id, label, hint, models, limit, …}]}`,
    help: `Lists a tenant's keys: id, label, hint (never the key itself), models, limit and reset, rate
limit, expiry, revoked, usage, created and last used.`,
  },
  'key revoke': {
    run: keyRevoke,
    synopsis: `key revoke --id KEY_ID                                     → {id, revoked: true}`,
    help: `Revokes a key in the database and tells every front door on NATS to drop it at once.`,
  },
  'credits grant': {
    run: creditsGrant,
    synopsis: `credits grant --tenant ID --amount 12.34 [--note TEXT]
              [--external-id ID  (grant at most once per id)] → {tenant, balance}`,
    help: `Credits a tenant's balance (a ledger row with source "grant").

${AMOUNTS}`,
  },
  'model set': {
    run: modelSet,
    synopsis: `model set --id vendor/name --pool POOL [--protocol sim|openai|anthropic|azure|bedrock|gemini] [--kind chat|embedding]
          [--vertex-project P --region R  (Vertex AI, with --protocol gemini)]
          [--upstream-model M] [--base-url URL] [--api-key-env VAR]
          --input-price BRL_PER_1M_TOKENS --output-price BRL_PER_1M_TOKENS
          [--cached-input-price BRL|none] [--cache-write-price BRL|none] [--cache-write-1h-price BRL|none]
          | --usd-input-price USD --usd-output-price USD [--markup 1.30] [--usd-cached-input-price USD]
            [--usd-cache-write-price USD] [--usd-cache-write-1h-price USD]  (BRL = USD × PTAX × markup)
          [--batch-input-price BRL|none] [--batch-output-price BRL|none] [--batch-cached-input-price BRL|none]
          [--batch-cache-write-price BRL|none] [--batch-cache-write-1h-price BRL|none] [--batch vendor|queue|none]
          [--max-output-tokens N] --context-length N (required for a new model)
          [--modalities text,image,audio,file] [--image-tokens N|none]
          [--extra-params top_k,min_p] [--legacy-completions true|false] [--reasoning true|false] [--weight N]
                                                           → {id, pool, protocol, kind, upstream_model, …}`,
    help: `Creates or updates a catalog entry (options not given keep their values) and tells front doors
and workers to reload the catalog.
--kind                 chat (default: chat completions, messages, responses, legacy completions) or
                       embedding (/v1/embeddings only)
--cached-input-price   BRL per 1M input tokens read from the vendor's prompt cache (OpenAI cached_tokens,
                       Anthropic cache_read_input_tokens); none: the input price
--cache-write-price    BRL per 1M input tokens written to the prompt cache (Anthropic's 5-minute writes)
--cache-write-1h-price BRL per 1M input tokens written to the prompt cache for one hour (Anthropic)
                       A request is held at the dearest of the input prices: a cache write costs more.
--batch-input-price, --batch-output-price, --batch-cached-input-price, --batch-cache-write-price,
--batch-cache-write-1h-price
                       BRL per 1M tokens a line of a batch (/v1/batches) is held and billed at; none: the
                       online price applies (docs/batch.md)
--batch                how batch lines run on this (primary) deployment: queue (default: catraca runs them
                       through its own queue), vendor (the deployment's own batch API — OpenAI's Batch API —
                       where the vendor's batch discount is; each line held first), none (batch lines naming
                       the model are error lines, batch_not_supported); docs/batch.md
--reasoning            true for a model that reasons: OpenRouter's \`reasoning\` maps to its reasoning effort
                       (OpenAI-compatible) or thinking budget (Anthropic)
--weight               1 to 1000: this (primary) deployment's share among the model's deployments
--legacy-completions   true when the vendor has its own /completions endpoint (legacy completions are
                       forwarded to it; otherwise translated into one user message)
--api-key-env takes the NAME of an environment variable that holds the upstream key, never the key.

${AMOUNTS}`,
  },
  'model list': {
    run: modelList,
    synopsis: `model list                                                 → {models: [{id, pool, protocol, input_price, …}]}`,
    help: `Lists the catalog: pool, protocol, upstream model, BRL prices per 1M tokens, limits.`,
  },
  'model alias add': {
    run: aliasAdd,
    synopsis: `model alias add --alias NAME --model vendor/name            → {alias, model}`,
    help: `Lets clients name a catalog model by another name on every route (e.g. the model names agents
send by default, such as Claude Code's claude-sonnet-…). The key's allowlist applies to the model
it names. An alias cannot be the id of a catalog model.`,
  },
  'model alias list': {
    run: aliasList,
    synopsis: `model alias list                                           → {aliases: [{alias, model}]}`,
    help: `Lists the aliases and the models they name.`,
  },
  'model alias remove': {
    run: aliasRemove,
    synopsis: `model alias remove --alias NAME                            → {alias, removed: true}`,
    help: `Removes an alias; requests naming it get 404 model_not_found from then on.`,
  },
  'model deployment add': {
    run: deploymentAdd,
    synopsis: `model deployment add --model ID --base-url URL [--api-key-env VAR] [--upstream-model M]
          [--protocol sim|openai|anthropic|azure|bedrock|gemini] [--vertex-project P] [--region R] [--country CC]
          [--weight N] [--name SLUG]
          [--input-price BRL] [--output-price BRL] [--cached-input-price BRL] [--cache-write-price BRL] [--cache-write-1h-price BRL]  → {id, model, name, base_url, …}
          | [--usd-input-price USD --usd-output-price USD] [--markup 1.30] [--usd-cached-input-price USD] [--usd-cache-write-price USD] [--usd-cache-write-1h-price USD]
          [--batch-input-price BRL] [--batch-output-price BRL] [--batch-cached-input-price BRL] [--batch-cache-write-price BRL] [--batch-cache-write-1h-price BRL]
          [--batch vendor|queue|none]`,
    help: `Adds a place the model is served from besides its own row (the "primary" deployment that
\`model set\` defines): another organisation's key, or another host of the same weights. Workers
choose among healthy deployments by weight; one that answers 429 or 5xx, times out or cannot be
reached cools down (honouring retry-after) and the request moves to the next before its first
byte; after 5 failures in a row its circuit opens for 30 s. Requests may prefer deployments by
name (OpenRouter's provider.order, only, ignore, sort). Prices default to the model's; a request
is held at the dearest deployment's prices and debited at the one that answered. Batch prices
default to the model's batch prices, then to this deployment's online prices. --batch vendor sends
the model's batches to this deployment's own batch API (OpenAI's Batch API; the first vendor
deployment, primary first, takes them); queue (default) and none as for model set (docs/batch.md).
\`model deployment list\` shows each deployment's batch mode (BATCH).
  --name        slug for provider preferences (default: the base URL's host)
  --weight      1 to 1000 (default 1)
Warns when the workers of the model's pool cannot read --api-key-env.

${AMOUNTS}`,
  },
  'model deployment list': {
    run: deploymentList,
    synopsis: `model deployment list --model ID                           → {model, deployments: [{id, name, …}]}`,
    help: `Lists a model's deployments, its own (primary) first.`,
  },
  'model deployment remove': {
    run: deploymentRemove,
    synopsis: `model deployment remove --id DEPLOYMENT_ID                  → {id, model, removed: true}`,
    help: `Removes a deployment (not the primary one: that is the model's own row).`,
  },
  'ledger check': {
    run: ledgerCheckCommand,
    synopsis: `ledger check [--tenant ID]                                 → {ok, tenants_checked, mismatches}`,
    help: `Proves every balance equals credits − debits, held equals the open holds, and no request is
debited twice. Exit 1 when anything does not match.`,
  },
  'usage replay': {
    run: usageReplay,
    synopsis: `usage replay --since TIME                                  → {replayed, first_seq, last_seq, first_at, last_at, log_starts_at, covered}`,
    help: `After restoring the ledger from a backup: puts every usage message metering settled since TIME
(an ISO date-time with its zone, e.g. the base backup's START TIME) back on the USAGE stream, from
the USAGE_LOG stream (kept USAGE_LOG_RETENTION_DAYS). Metering settles each request once by its
id: those the restored ledger already holds are no-ops, the rest are debited as they were. Run it
with metering running against the restored database and the front doors still stopped. Exit 1
when USAGE_LOG does not reach back to TIME (covered: false). Needs NATS only (NATS_URL).`,
  },
  'nfse list': {
    run: nfseList,
    synopsis: `nfse list [--tenant ID] [--state S] [--missing] [--limit N] → {invoices: [{id, state, number, access_key, error, …}]}`,
    help: `Lists the notas fiscais (NFS-e, docs/nfse.md), newest first: state (pending, issued, rejected;
cancellation: done, refused, outside_window, partial_refund), number, access key, Sefin's last
error. --missing is the reconciliation: every credited top-up without an issued note, with the
reason ({topups: [{charge_id, tenant_id, amount, paid_at, invoice_id, reason}]}).`,
  },
  'nfse retry': {
    run: nfseRetry,
    synopsis: `nfse retry --id INVOICE_ID                                 → {id, retry: issue|cancel}`,
    help: `After fixing what Sefin rejected (the settings, the tenant's profile): issues the note again, a new
DPS with the same number from the current settings and profile; or sends a refused cancellation
again. A note waiting for Sefin is tried now. The portal's issuer does it within seconds.`,
  },
  'nfse cancel': {
    run: nfseCancel,
    synopsis: `nfse cancel --id INVOICE_ID --reason TEXT                  → {id, cancel: requested}`,
    help: `Cancels an issued note with the national cancellation event (reason: 15 to 255 characters),
within NFSE_CANCEL_DAYS of issue; later the note shows what the operator must do instead.`,
  },
  'operator create': {
    run: operatorCreate,
    synopsis: `operator create --email E [--password-stdin]               → {id, email, password, totp_secret, otpauth_url, recovery_codes}`,
    help: `Creates an account of the operator's console (src/console/; the first one can only be made here)
and prints, once, what it needs to sign in: a generated password (or the one read from stdin with
--password-stdin), the TOTP secret as an otpauth URL and a QR code for an authenticator app, and
ten recovery codes. Only hashes of the password and the codes are stored.`,
  },
  'operator list': {
    run: operatorList,
    synopsis: `operator list                                              → {operators: [{id, email, created_at, created_by, disabled}]}`,
    help: `Lists the console's operators.`,
  },
  'operator disable': {
    run: operatorDisable,
    synopsis: `operator disable --email E                                 → {id, email, disabled: true}`,
    help: `Disables an operator: they can no longer sign in, and their sessions end.`,
  },
  'operator reset': {
    run: operatorReset,
    synopsis: `operator reset --email E [--password-stdin]                → (as operator create)`,
    help: `Gives an operator who lost their password, authenticator or recovery codes new ones (printed
once, as by operator create), enables them again and ends their sessions.`,
  },
  status: {
    run: runStatusCommand,
    synopsis: `status [--watch] [--service gateway|worker|metering|portal] (health of a running stack)`,
    help: `NATS and PostgreSQL health; the usage backlog (metering's pending and unacknowledged USAGE
messages); open holds and leases (count, sum); per pool the workers, jobs in flight, capacity and
jobs waiting in front doors; one row per running instance, from NATS ($SRV.STATS): in flight,
jobs, errors, latency, memory. Exit 1 when NATS cannot be reached, no instance answers, or
PostgreSQL does not answer. No escape codes unless stdout is a terminal.
  --watch     refresh every second until Ctrl-C
  --service   only that service
  --wait-ms   how long to collect answers (default 1000)`,
  },
  'pix pay': {
    // Development only: pays a charge at the portal's built-in Pix simulator (src/cli/pix.ts).
    run: async (ctx, args) => (await import('./pix.ts')).pixPay(ctx, args),
    synopsis: `pix pay --txid TXID [--valor 12.34]                         (dev: pay a charge at the Pix simulator)`,
    help: `Development only: pays a charge at the built-in Pix simulator of the running portal, which then
calls the portal's webhook like a real PSP. A recurring top-up's charge (Pix Automático) settles
its scheduled attempt at once, as on its due date (no --valor).`,
  },
  'fx pin': {
    run: async (ctx, args) => (await import('./fx.ts')).fxPin(ctx, args),
    synopsis: `fx pin --rate BRL_PER_USD | --clear                          (pin the dollar's rate of USD-priced models)`,
    help: `Pins the rate USD-priced models are sold at (BRL = USD × rate × markup, docs/billing.md) instead
of the day's PTAX, recomputes their prices and tells the front doors; --clear goes back to the
PTAX (the console takes the last published one within a minute).`,
  },
  'pix recurring run': {
    run: async (ctx, args) => (await import('./pix.ts')).pixRecurringRun(ctx, args),
    synopsis: `pix recurring run                                           (schedule the recurring top-ups' charges now)`,
    help: `Asks the portal to run now the pass it runs periodically: asks the PSP about recurrences and
their open charges, then schedules the charge of every authorized recurrence whose period is
due (2–10 days ahead; the amount that brings the projected balance to the target, capped at the
maximum, at least R$ 1,00, none when the balance stays above the target; docs/billing.md).`,
  },
};

/** Every command's synopsis, as `catraca --help` lists them (and docs/operations.md, checked by src/docs.test.ts). */
export const SYNOPSES = Object.values(COMMANDS)
  .map((c) => '  ' + c.synopsis.split('\n').join('\n  '))
  .join('\n');

export const USAGE = `catraca ${VERSION} — admin CLI of the catraca gateway

Usage: catraca <command> [options] [--json]
       catraca <command> --help      catraca --version

${SYNOPSES}

${AMOUNTS}
--api-key-env takes the NAME of an environment variable that holds the upstream key, never the key.

${CONNECTION}
`;

function commandHelp(name: string): string {
  const c = COMMANDS[name];
  return `Usage: catraca ${c.synopsis.split('\n').join('\n' + ' '.repeat('Usage: catraca '.length))}\n\n${c.help}\n\nEvery command takes --json (exactly one JSON object on stdout) and --help.\n${CONNECTION}\n`;
}

/** `catraca status` (src/cli/status.ts) parses its own options and talks only to NATS. */
async function runStatusCommand(ctx: CliContext, args: string[]): Promise<number | void> {
  const natsUrl = ctx.natsUrl();
  if (!natsUrl) throw new CliError('status: no NATS to ask: start the stack with `npm start` in this checkout, or set NATS_URL');
  // PostgreSQL is optional here: without one, holds and leases are not shown
  let databaseUrl: string | null = null;
  try {
    databaseUrl = ctx.databaseUrl();
  } catch {}
  // loaded on demand: the other commands need none of its modules (pg pool, JetStream, stack helpers)
  const { runStatus } = await import('./status.ts');
  return runStatus({ natsUrl, databaseUrl, json: ctx.json, args: args.filter((a) => a !== '--json') });
}

export interface RunOptions {
  cwd?: string;
  env?: Record<string, string | undefined>;
  stdout?: (s: string) => void;
  stderr?: (s: string) => void;
}

/** Runs one command line; returns the exit code (never calls process.exit). */
export async function run(argv: string[], opts: RunOptions = {}): Promise<number> {
  const stderr = opts.stderr ?? ((s: string) => process.stderr.write(s));
  const stdout = opts.stdout ?? ((s: string) => process.stdout.write(s));
  const json = argv.includes('--json');
  const positionals: string[] = [];
  for (const a of argv) {
    if (a.startsWith('-')) break;
    positionals.push(a);
  }
  if (argv.length === 0 || argv[0] === '--help' || argv[0] === '-h' || argv[0] === 'help') {
    stdout(USAGE);
    return argv.length === 0 ? 2 : 0;
  }
  if (argv[0] === '--version' || argv[0] === '-v' || argv[0] === 'version') {
    stdout(json ? JSON.stringify({ version: VERSION }) + '\n' : `${VERSION}\n`);
    return 0;
  }
  // the longest command the first words name: `model alias add`, `model set`, `status`
  const name = [3, 2, 1].map((n) => positionals.slice(0, n).join(' ')).find((n) => n && COMMANDS[n]) ?? positionals[0];
  const command = name ? COMMANDS[name] : undefined;
  if (!command) {
    stderr(`catraca: unknown command ${JSON.stringify(positionals.slice(0, 2).join(' ') || argv[0])}\n\n${USAGE}`);
    return 2;
  }
  const rest = argv.slice(name.split(' ').length);
  if (rest.includes('--help') || rest.includes('-h')) {
    stdout(commandHelp(name));
    return 0;
  }
  const ctx = createContext({ json, cwd: opts.cwd, env: opts.env, stdout, stderr });
  try {
    const code = await command.run(ctx, rest);
    return typeof code === 'number' ? code : 0;
  } catch (err) {
    if (err instanceof CliError) {
      stderr(`catraca: ${err.message}\n`);
      if (err instanceof UsageError) stderr(`Run \`catraca ${name} --help\` for usage.\n`);
      return err.exitCode;
    }
    const e = err as Error & { code?: string };
    stderr(`catraca: ${name} failed: ${e.message}${e.code ? ` (${e.code})` : ''}\n`);
    return 1;
  }
}

export async function main(argv = process.argv.slice(2)): Promise<void> {
  const code = await run(argv);
  // Let stdout drain before leaving; pools and NATS connections are closed by the commands.
  process.exitCode = code;
}

// Run directly (`node dist/src/cli/main.js …`, as the image may): behave as bin/catraca.js.
if (process.argv[1] && pathToFileURL(resolve(process.argv[1])).href === import.meta.url) {
  await main();
}
