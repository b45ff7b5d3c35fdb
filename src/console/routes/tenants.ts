import { randomBytes } from 'node:crypto';
import { Hono } from 'hono';
import type { NatsConnection } from 'nats';
import type pg from 'pg';
import { type AmountInputError, parseAmountInput } from '../../billing/amount-input.ts';
import { subjects } from '../../bus/subjects.ts';
import { listKeys } from '../../db/keys.ts';
import { withTransaction } from '../../db/pool.ts';
import { createLogger } from '../../log.ts';
import { amount } from '../../web/format.ts';
import { type Form, one, redirect } from '../../web/http.ts';
import { audit } from '../audit.ts';
import { broadcast } from '../bus.ts';
import { type CCtx, type ConsoleEnv, operatorOf } from '../http.ts';
import type { ConsoleKey, T } from '../i18n/index.ts';
import { listCharges } from '../pix.ts';
import type { ConsoleRenderer } from '../render.ts';
import { listMembers } from '../../db/members.ts';
import { getTenantDetail, listTenants, statement } from '../tenants.ts';
import { tenantPage, tenantsPage } from '../views/tenants.ts';

// Tenants: the searchable list; a tenant's page (statement, keys, members, Pix charges); grants,
// adjustments, suspension and key revocation, each audited, each told to the front doors as the
// CLI does (tenants.changed, keys.invalidated).

const log = createLogger('console');
const ID = '{[A-Za-z0-9_-]{1,64}}';
/** The most a grant or an adjustment moves from the console; more goes through the CLI. */
export const MAX_CONSOLE_AMOUNT_MICROS = 100_000_000_000n;
const DONE = ['grant', 'adjust', 'duplicate', 'suspend', 'reactivate', 'already_suspended', 'revoke', 'already_revoked'] as const;

export interface TenantRoutesDeps {
  db: pg.Pool;
  nc: NatsConnection | null;
}

const nonce = () => randomBytes(16).toString('base64url');
const page = (c: CCtx) => Math.min(Math.max(Number.parseInt(c.var.url.searchParams.get('page') ?? '1', 10) || 1, 1), 10_000);

export function amountError(t: T, e: AmountInputError): string {
  return t(`amount.${e}` as ConsoleKey);
}

/** An amount field of a money form: micro-reais, positive, at most MAX_CONSOLE_AMOUNT_MICROS; else the message. */
export function formAmount(t: T, text: string): { ok: true; micros: bigint } | { ok: false; error: string } {
  const parsed = parseAmountInput(text, { maxDecimals: 6 });
  if (!parsed.ok) return { ok: false, error: amountError(t, parsed.error) };
  if (parsed.micros <= 0n) return { ok: false, error: t('amount.zero') };
  if (parsed.micros > MAX_CONSOLE_AMOUNT_MICROS) return { ok: false, error: t('amount.over_max', { max: amount('pt-BR', MAX_CONSOLE_AMOUNT_MICROS) }) };
  return { ok: true, micros: parsed.micros };
}

export function tenantRoutes(d: TenantRoutesDeps, r: ConsoleRenderer): Hono<ConsoleEnv> {
  const { db } = d;
  const app = new Hono<ConsoleEnv>();
  const show = (c: CCtx, id: string, status = 200, o: { error?: string; form?: Record<string, string> } = {}) => showTenant(c, db, r, id, status, o);

  app.get('/tenants', async (c) => {
    const q = (c.var.url.searchParams.get('q') ?? '').slice(0, 200);
    const list = await listTenants(db, q, page(c));
    const left = c.var.url.searchParams.get('codes_left');
    const flash = left !== null && /^\d{1,2}$/.test(left) ? c.var.t('login.recovery_used', { n: left }) : null;
    return r.page(c, 200, c.var.t('tenants.title'), (vc) => tenantsPage(vc, { q, rows: list.rows, page: page(c), hasMore: list.hasMore }), { flash });
  });
  app.get(`/tenants/:id${ID}`, (c) => show(c, c.req.param('id')));

  app.post(`/tenants/:id${ID}/grant`, async (c) => {
    const id = c.req.param('id');
    const { t, form, ip } = c.var;
    const keep = { grant_amount: one(form, 'amount'), grant_note: one(form, 'note'), grant_reason: one(form, 'reason') };
    const checked = checkMoneyForm(t, form);
    if (!checked.ok) return show(c, id, 400, { error: checked.error, form: keep });
    const { rows } = await db.query('select status, balance from catraca_console_grant($1, $2, $3, $4, $5, $6, $7)', [
      operatorOf(c).operator.id,
      ip,
      id,
      checked.micros,
      one(form, 'note').slice(0, 200),
      checked.reason,
      checked.nonce,
    ]);
    const status = rows[0].status as string;
    if (status === 'unknown_tenant') return r.notFound(c);
    if (status === 'unknown_operator') return show(c, id, 403, { error: t('error.forbidden') });
    log.info('console grant', { operator: operatorOf(c).operator.id, tenant: id, amount_micros: String(checked.micros), status });
    return redirect(c, `/tenants/${id}?done=${status === 'duplicate' ? 'duplicate' : 'grant'}`);
  });

  app.post(`/tenants/:id${ID}/adjust`, (c) => adjust(c, d, show));
  app.post(`/tenants/:id${ID}/suspend`, (c) => setSuspended(c, d, show, true));
  app.post(`/tenants/:id${ID}/reactivate`, (c) => setSuspended(c, d, show, false));
  app.post(`/tenants/:id${ID}/keys/:key${ID}/revoke`, (c) => revoke(c, d, r));
  return app;
}

type Show = (c: CCtx, id: string, status?: number, o?: { error?: string; form?: Record<string, string> }) => Promise<Response>;

async function showTenant(c: CCtx, db: pg.Pool, r: ConsoleRenderer, id: string, status: number, o: { error?: string; form?: Record<string, string> }) {
  const tenant = await getTenantDetail(db, id);
  if (!tenant) return r.notFound(c);
  const p = page(c);
  const [keys, members, charges, st] = await Promise.all([listKeys(db, id), listMembers(db, id), listCharges(db, { tenantId: id }, 20), statement(db, id, p)]);
  const done = c.var.url.searchParams.get('done');
  const flash = done && (DONE as readonly string[]).includes(done) ? c.var.t(`done.${done as (typeof DONE)[number]}`) : null;
  const warn = c.var.url.searchParams.has('nats') ? c.var.t('done.not_broadcast') : null;
  const requestId = c.var.url.searchParams.get('request') ?? undefined;
  return r.page(
    c,
    status,
    tenant.name,
    (vc) =>
      tenantPage(vc, {
        tenant,
        keys,
        members,
        charges: charges.rows,
        statement: st.rows,
        page: p,
        hasMore: st.hasMore,
        nonces: { grant: nonce(), adjust: nonce() },
        requestId: requestId && /^[A-Za-z0-9_.:-]{1,100}$/.test(requestId) ? requestId : undefined,
        form: o.form,
      }),
    { flash, error: o.error ?? warn },
  );
}

/** The fields every money form has: amount, mandatory reason, the form's nonce. */
function checkMoneyForm(t: T, form: Form): { ok: true; micros: bigint; reason: string; nonce: string } | { ok: false; error: string } {
  const a = formAmount(t, one(form, 'amount'));
  if (!a.ok) return a;
  const reason = one(form, 'reason').trim().slice(0, 500);
  if (!reason) return { ok: false, error: t('common.reason_required') };
  const n = one(form, 'nonce');
  if (!/^[A-Za-z0-9_-]{22}$/.test(n)) return { ok: false, error: t('error.stale_form') };
  return { ok: true, micros: a.micros, reason, nonce: n };
}

async function adjust(c: CCtx, d: TenantRoutesDeps, show: Show): Promise<Response> {
  const id = c.req.param('id')!;
  const { t, form, ip } = c.var;
  const kind = one(form, 'kind');
  const requestId = one(form, 'request_id').trim();
  const keep = {
    adjust_kind: kind,
    adjust_amount: one(form, 'amount'),
    adjust_request: requestId,
    adjust_note: one(form, 'note'),
    adjust_reason: one(form, 'reason'),
  };
  const checked = checkMoneyForm(t, form);
  if (!checked.ok) return show(c, id, 400, { error: checked.error, form: keep });
  if (kind !== 'credit' && kind !== 'debit') return show(c, id, 400, { error: t('adjust.bad_kind'), form: keep });
  if (requestId && !/^[A-Za-z0-9_.:-]{1,100}$/.test(requestId)) return show(c, id, 400, { error: t('adjust.bad_request'), form: keep });
  const { rows } = await d.db.query('select status, balance from catraca_console_adjust($1, $2, $3, $4, $5, $6, $7, $8, $9)', [
    operatorOf(c).operator.id,
    ip,
    id,
    kind,
    checked.micros,
    requestId || null,
    one(form, 'note').slice(0, 200),
    checked.reason,
    checked.nonce,
  ]);
  const { status, balance } = rows[0] as { status: string; balance: bigint };
  log.info('console adjustment', { operator: operatorOf(c).operator.id, tenant: id, kind, amount_micros: String(checked.micros), status });
  switch (status) {
    case 'credited':
    case 'debited':
      return redirect(c, `/tenants/${id}?done=adjust`);
    case 'duplicate':
      return redirect(c, `/tenants/${id}?done=duplicate`);
    case 'unknown_tenant':
      return show(c, id, 404);
    case 'unknown_request':
      return show(c, id, 400, { error: t('adjust.unknown_request', { request: requestId }), form: keep });
    case 'exceeds_request':
      return show(c, id, 400, { error: t('adjust.exceeds_request', { request: requestId }), form: keep });
    case 'insufficient':
      return show(c, id, 409, { error: t('adjust.insufficient', { balance: amount(c.var.lang, balance) }), form: keep });
    default:
      return show(c, id, 403, { error: t('error.forbidden'), form: keep });
  }
}

/**
 * Suspends a tenant (its keys stop at the front doors) or reactivates it: with a reason, under a
 * lock on the tenant's row, audited in the change's transaction; the front doors are told.
 */
async function setSuspended(c: CCtx, d: TenantRoutesDeps, show: Show, suspend: boolean): Promise<Response> {
  const id = c.req.param('id')!;
  const { t, form, ip } = c.var;
  const reason = one(form, 'reason').trim().slice(0, 500);
  if (!reason) return show(c, id, 400, { error: t('common.reason_required') });
  const operatorId = operatorOf(c).operator.id;
  const action = suspend ? 'suspend' : 'reactivate';
  const outcome = await withTransaction(d.db, async (tx) => {
    const { rows } = await tx.query('select suspended_at, suspended_reason from tenants where id = $1 for update', [id]);
    if (!rows[0]) return 'unknown';
    if (Boolean(rows[0].suspended_at) === suspend) return 'unchanged';
    const { rows: after } = await tx.query(
      `update tenants set suspended_at = ${suspend ? 'now()' : 'null'}, suspended_reason = $2 where id = $1 returning suspended_at`,
      [id, suspend ? reason : null],
    );
    await audit(tx, {
      operatorId,
      action,
      ip,
      tenantId: id,
      reason,
      before: suspend ? { suspended_at: null } : { suspended_at: rows[0].suspended_at, reason: rows[0].suspended_reason },
      after: suspend ? { suspended_at: after[0].suspended_at, reason } : { suspended_at: null },
    });
    return 'changed';
  });
  if (outcome === 'unknown') return show(c, id, 404);
  if (outcome === 'unchanged') return suspend ? redirect(c, `/tenants/${id}?done=already_suspended`) : show(c, id, 409, { error: t('suspend.not_suspended') });
  log.info(suspend ? 'console: tenant suspended' : 'console: tenant reactivated', { operator: operatorId, tenant: id });
  const told = await broadcast(d.nc, subjects.tenantChanged, { tenant_id: id });
  return redirect(c, `/tenants/${id}?done=${action}${told ? '' : '&nats=0'}`);
}

async function revoke(c: CCtx, d: TenantRoutesDeps, r: ConsoleRenderer): Promise<Response> {
  const id = c.req.param('id')!;
  const keyId = c.req.param('key')!;
  const operatorId = operatorOf(c).operator.id;
  // the key must be this tenant's: another tenant's key id under this tenant's path is a 404.
  // Revocation, key.revoked and the audit row in one transaction (catraca_console_revoke_key).
  const { rows } = await d.db.query('select status from catraca_console_revoke_key($1, $2, $3, $4)', [operatorId, c.var.ip, id, keyId]);
  const outcome = rows[0].status as 'revoked' | 'already' | 'unknown' | 'unknown_operator';
  if (outcome === 'unknown' || outcome === 'unknown_operator') return r.notFound(c);
  if (outcome === 'already') return redirect(c, `/tenants/${id}?done=already_revoked`);
  log.info('console: key revoked', { operator: operatorId, tenant: id, key_id: keyId });
  const told = await broadcast(d.nc, subjects.keyInvalidated, { key_id: keyId });
  return redirect(c, `/tenants/${id}?done=revoke${told ? '' : '&nats=0'}`);
}
