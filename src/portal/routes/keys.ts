import { Hono } from 'hono';
import { getCookie } from 'hono/cookie';
import type { NatsConnection } from 'nats';
import type pg from 'pg';
import { checkNewKey, type KeyRuleError } from '../../billing/key-rules.ts';
import { createApiKey, getKey, keyUsageWindows, listKeys, revokeKey } from '../../db/keys.ts';
import { listModels } from '../../db/models.ts';
import { createLogger } from '../../log.ts';
import { withTransaction } from '../../db/pool.ts';
import { keyRevokedEvent } from '../../notify/events.ts';
import { putFlash, takeFlash } from '../flash.ts';
import { type AppEnv, type CreatedKeyFlash, type Ctx, SESSION_COOKIE, tenantOf } from '../http.ts';
import { type Form, one, redirect } from '../../web/http.ts';
import type { Renderer } from '../render.ts';
import { afterRevocation } from '../revocation.ts';
import { may } from '../roles.ts';
import { can } from '../authorize.ts';
import { DATA_COUNTRIES, EXPIRY_CHOICES, keysPage, RATE_INTERVALS, revokeConfirmPage } from '../views/keys.ts';

// API keys: list, create (Post/Redirect/Get, the key shown once), revoke (broadcast on NATS so the
// front doors drop it at once). Owners and admins see every key of the tenant and who created it;
// a developer only the keys they created: another's key is a 404 to them, as if it did not exist.

const log = createLogger('portal');

export interface KeysDeps {
  db: pg.Pool;
  nc: NatsConnection | null;
}
type KeysExtra = { created?: CreatedKeyFlash | null; form?: Form; error?: string | null; flash?: string | null };

/** The keys the session's member may see and revoke: every key of the tenant, or only the ones they created. */
const creatorScope = (c: Ctx): string | undefined => (may(c.var.session!.user.role, 'keys.all') ? undefined : c.var.session!.user.id);

export function keysRoutes(d: KeysDeps, r: Renderer): Hono<AppEnv> {
  const { db } = d;
  const app = new Hono<AppEnv>();
  const view = (c: Ctx, status: number, extra: KeysExtra = {}) => keysView(c, db, r, status, extra);
  app.get('/keys', can('keys'), async (c) => {
    const flashId = c.var.url.searchParams.get('created');
    if (flashId === null) return view(c, 200);
    const session = c.var.session!;
    const created = await takeFlash<CreatedKeyFlash>(db, { sessionToken: getCookie(c, SESSION_COOKIE)!, sessionId: session.idHash, id: flashId });
    return created ? view(c, 200, { created }) : view(c, 200, { flash: c.var.t('keys.already_shown') });
  });
  app.post('/keys', can('keys'), (c) => createKey(c, db, view));
  app.get('/keys/:id{[A-Za-z0-9_-]{1,64}}/revoke', can('keys'), async (c) => {
    const k = await getKey(db, c.req.param('id'), tenantOf(c), creatorScope(c));
    if (!k || k.revoked_at) return r.notFound(c);
    return r.page(c, 200, c.var.t('keys.revoke'), (vc) => revokeConfirmPage(vc, k));
  });
  app.post('/keys/:id{[A-Za-z0-9_-]{1,64}}/revoke', can('keys'), async (c) => {
    const keyId = c.req.param('id');
    const tenantId = tenantOf(c);
    // key.revoked is made in the revocation's transaction: a crash after the commit cannot lose it
    const events = await withTransaction(db, async (tx) => ((await revokeKey(tx, keyId, tenantId, creatorScope(c))) ? await keyRevokedEvent(tx, keyId) : null));
    if (!events) return r.notFound(c);
    log.info('api key revoked', { tenant: tenantId, key_id: keyId, by: c.var.session!.user.id });
    await afterRevocation(d, [keyId], events, log);
    return view(c, 200, { flash: c.var.t('keys.revoked_ok') });
  });
  return app;
}

async function keysView(c: Ctx, db: pg.Pool, r: Renderer, status: number, extra: KeysExtra) {
  const scope = creatorScope(c);
  const keys = await listKeys(db, tenantOf(c), scope);
  const withUsage = await Promise.all(
    keys.map(async (k) => {
      const w = k.limit_reset ? await keyUsageWindows(db, k.id) : null;
      return { ...k, windowUsage: w ? w[k.limit_reset!] : 0n };
    }),
  );
  const models = await listModels(db);
  const creators = scope === undefined ? await memberEmails(db, tenantOf(c)) : null;
  return r.page(
    c,
    status,
    c.var.t('keys.title'),
    (vc) =>
      keysPage(vc, {
        keys: withUsage,
        models,
        created: extra.created,
        form: extra.form,
        creators,
        setsDataCountry: may(c.var.session!.user.role, 'keys.data_country'),
      }),
    {
      error: extra.error,
      flash: extra.flash,
    },
  );
}

/** The tenant's members: id → e-mail (a key's creator who is not there any more was removed or left). */
async function memberEmails(db: pg.Pool, tenantId: string): Promise<Map<string, string>> {
  const { rows } = await db.query('select id, email from portal_users where tenant_id = $1', [tenantId]);
  return new Map(rows.map((u) => [u.id as string, u.email as string]));
}

async function createKey(c: Ctx, db: pg.Pool, view: (c: Ctx, status: number, extra?: KeysExtra) => Promise<Response>) {
  const { t, form: f } = c.var;
  const tenantId = tenantOf(c);
  const picked = Array.isArray(f.models) ? f.models : f.models ? [f.models] : [];
  // The form offers a count and a unit, and a list of durations; the rule takes them as text.
  const rateText = one(f, 'rate_requests').trim();
  const unit = one(f, 'rate_interval') || 'm';
  if (rateText && !(/^\d{1,7}$/.test(rateText) && (RATE_INTERVALS as readonly string[]).includes(unit)))
    return view(c, 400, { form: f, error: t('keys.bad_rate_limit') });
  // a key's data country: any, or one of the offered; only owners and admins set one
  const dataCountry = one(f, 'data_country');
  if (!(DATA_COUNTRIES as readonly string[]).includes(dataCountry)) return view(c, 400, { form: f, error: t('keys.bad_data_country') });
  if (dataCountry && !may(c.var.session!.user.role, 'keys.data_country')) return view(c, 403, { form: f, error: t('keys.data_country_forbidden') });
  const expiresText = one(f, 'expires');
  if (expiresText && !(EXPIRY_CHOICES as readonly string[]).includes(expiresText)) return view(c, 400, { form: f, error: t('keys.bad_expiry') });
  const checked = checkNewKey(
    {
      label: one(f, 'label'),
      models: one(f, 'scope') === 'some' ? picked : '*',
      limit: one(f, 'limit'),
      limitReset: one(f, 'limit_reset'),
      rateLimit: rateText ? `${Number(rateText)}/1${unit}` : undefined,
      expires: expiresText || undefined,
    },
    new Set((await listModels(db)).map((m) => m.id)),
  );
  if (!checked.ok) return view(c, 400, { form: f, error: keyRuleMessage(c, checked.error, one(f, 'limit')) });
  const { models, expiresAt, rateLimitRequests, rateLimitIntervalS } = checked.key;
  const created = await createApiKey(db, { tenantId, ...checked.key, createdBy: c.var.session!.user.id, dataCountry: dataCountry || null });
  log.info('api key created', {
    tenant: tenantId,
    key_id: created.record.id,
    by: c.var.session!.user.id,
    models: models ?? '*',
    expires_at: expiresAt,
    rate_limit: rateLimitRequests !== null ? `${rateLimitRequests}/${rateLimitIntervalS}s` : null,
    data_country: dataCountry || null,
  });
  // Post/Redirect/Get: the key goes into a one-time flash of this session (encrypted under the
  // session's cookie token) and the GET it redirects to shows it once and deletes it. A refresh
  // re-sends only that GET: no second key, and the key is not shown again. Never logged.
  const flashId = await putFlash(db, {
    sessionToken: getCookie(c, SESSION_COOKIE)!,
    sessionId: c.var.session!.idHash,
    value: { key: created.key, id: created.record.id, label: created.record.label } satisfies CreatedKeyFlash,
  });
  return redirect(c, `/keys?created=${flashId}`);
}

/** The form's message for a broken key rule (src/billing/key-rules.ts). */
function keyRuleMessage(c: Ctx, e: KeyRuleError, limitText: string): string {
  const t = c.var.t;
  switch (e.code) {
    case 'bad_label':
      return t('keys.bad_label');
    case 'no_models':
      return t('keys.no_models_picked');
    case 'bad_model_id':
    case 'unknown_model':
      return t('keys.unknown_model', { model: String(e.model ?? '').slice(0, 80) });
    case 'limit_thousands':
      return t('amount.no_thousands', { value: limitText.trim().slice(0, 40) });
    case 'bad_limit':
      return t('keys.bad_limit');
    case 'bad_limit_reset':
    case 'reset_without_limit':
      return t('keys.bad_limit_reset');
    case 'bad_rate_limit':
      return t('keys.bad_rate_limit');
    case 'bad_expiry':
      return t('keys.bad_expiry');
    case 'bad_max_concurrent':
    case 'bad_tpm':
    case 'bad_end_user_limit':
      return t('keys.bad_finer_limits');
  }
}
