import { readFileSync } from 'node:fs';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { Hono } from 'hono';
import type pg from 'pg';
import QRCode from 'qrcode';
import { ledgerCheck } from '../../billing/ledger-check.ts';
import { createLogger } from '../../log.ts';
import { json, one, redirect, send } from '../../web/http.ts';
import { AUDIT_ACTIONS, AUDIT_PAGE_SIZE, audit, type AuditFilter, listAudit } from '../audit.ts';
import { createOperator, disableOperator, listOperators } from '../auth.ts';
import { csv } from '../csv.ts';
import { type CCtx, type ConsoleEnv, operatorOf } from '../http.ts';
import { chargeStates, listCharges, PIX_STATES, type PixState, reconcilerStatus } from '../pix.ts';
import type { ConsoleRenderer } from '../render.ts';
import { auditPage, ledgerCheckPage, operatorSetupPage, operatorsPage, pixPage } from '../views/system.ts';

// Pix charges and the reconciler, `catraca ledger check` on demand, the audit log (page and CSV),
// operators (list, create with a one-time setup, disable); the static files and the health check.

const log = createLogger('console');
const HERE = dirname(fileURLToPath(import.meta.url));
// the portal's stylesheet (the same look), and the console's few rules of its own
const STATIC: Record<string, { type: string; body: Uint8Array<ArrayBuffer> }> = {
  '/static/portal.css': { type: 'text/css; charset=utf-8', body: readFileSync(join(HERE, '..', '..', 'portal', 'static', 'portal.css')) },
  '/static/console.css': { type: 'text/css; charset=utf-8', body: readFileSync(join(HERE, '..', 'static', 'console.css')) },
};

export function publicRoutes(): Hono<ConsoleEnv> {
  const app = new Hono<ConsoleEnv>();
  for (const [path, file] of Object.entries(STATIC)) app.get(path, (c) => send(c, 200, file.type, file.body, { 'cache-control': 'public, max-age=300' }));
  app.all('/healthz', (c) => json(c, 200, { ok: true }));
  return app;
}

const pageOf = (c: CCtx) => Math.min(Math.max(Number.parseInt(c.var.url.searchParams.get('page') ?? '1', 10) || 1, 1), 10_000);

function auditFilter(c: CCtx): AuditFilter {
  const q = c.var.url.searchParams;
  const action = q.get('action') ?? '';
  const tenant = (q.get('tenant') ?? '').trim().slice(0, 100);
  return { action: (AUDIT_ACTIONS as readonly string[]).includes(action) ? action : undefined, tenantId: tenant || undefined };
}

export function systemRoutes(db: pg.Pool, r: ConsoleRenderer): Hono<ConsoleEnv> {
  const app = new Hono<ConsoleEnv>();
  app.get('/', (c) => redirect(c, '/tenants'));

  app.get('/pix', async (c) => {
    const s = c.var.url.searchParams.get('state');
    const state = (PIX_STATES as readonly string[]).includes(s ?? '') ? (s as PixState) : null;
    const p = pageOf(c);
    const [summary, charges, reconciler] = await Promise.all([
      chargeStates(db),
      listCharges(db, { state: state ?? undefined }, 100, (p - 1) * 100),
      reconcilerStatus(db),
    ]);
    return r.page(c, 200, c.var.t('pix.title'), (vc) => pixPage(vc, { state, summary, charges: charges.rows, page: p, hasMore: charges.hasMore, reconciler }));
  });

  app.get('/ledger-check', (c) => r.page(c, 200, c.var.t('check.title'), (vc) => ledgerCheckPage(vc, null)));
  app.post('/ledger-check', async (c) => {
    const result = await ledgerCheck(db);
    await audit(db, {
      operatorId: operatorOf(c).operator.id,
      action: 'ledger_check',
      ip: c.var.ip,
      after: { ok: result.ok, tenants_checked: result.tenants_checked, mismatches: result.mismatches.length },
    });
    if (!result.ok) log.error('ledger check from the console found mismatches', { mismatches: result.mismatches.length });
    return r.page(c, 200, c.var.t('check.title'), (vc) => ledgerCheckPage(vc, result));
  });

  app.get('/audit', async (c) => {
    const f = auditFilter(c);
    const p = pageOf(c);
    const rows = await listAudit(db, f, AUDIT_PAGE_SIZE + 1, (p - 1) * AUDIT_PAGE_SIZE);
    return r.page(c, 200, c.var.t('audit.title'), (vc) =>
      auditPage(vc, {
        rows: rows.slice(0, AUDIT_PAGE_SIZE),
        action: f.action ?? null,
        tenantId: f.tenantId ?? null,
        page: p,
        hasMore: rows.length > AUDIT_PAGE_SIZE,
      }),
    );
  });
  app.get('/audit.csv', async (c) => {
    const rows = await listAudit(db, auditFilter(c), 100_000);
    const body = csv(
      ['id', 'at', 'operator_id', 'operator', 'action', 'ip', 'tenant_id', 'target', 'reason', 'before', 'after'],
      rows.map((x) => [x.id, x.at, x.operator_id, x.operator, x.action, x.ip, x.tenant_id, x.target, x.reason, x.before, x.after]),
    );
    return send(c, 200, 'text/csv; charset=utf-8', body, { 'content-disposition': 'attachment; filename="catraca-audit.csv"' });
  });

  operatorRoutes(app, db, r);
  return app;
}

function operatorRoutes(app: Hono<ConsoleEnv>, db: pg.Pool, r: ConsoleRenderer): void {
  const list = async (c: CCtx, status = 200, o: { error?: string; flash?: string } = {}) => {
    const operators = await listOperators(db);
    return r.page(c, status, c.var.t('operators.title'), (vc) => operatorsPage(vc, { operators, me: operatorOf(c).operator.id }), o);
  };
  app.get('/operators', (c) => list(c, 200, { flash: c.var.url.searchParams.has('disabled') ? c.var.t('operators.disabled_ok') : undefined }));
  app.post('/operators', async (c) => {
    const me = operatorOf(c).operator.id;
    // audited (operator_create) in the creation's transaction
    const res = await createOperator(db, { email: one(c.var.form, 'email'), createdBy: me, ip: c.var.ip });
    if (!res.ok) return list(c, res.error === 'taken' ? 409 : 400, { error: c.var.t(`operators.${res.error}`) });
    log.info('console: operator created', { by: me, operator: res.setup.operator.id });
    const qr = await QRCode.toDataURL(res.setup.otpauthUrl, { margin: 1, width: 220 });
    return r.page(c, 200, c.var.t('operators.title'), (vc) => operatorSetupPage(vc, res.setup, qr));
  });
  app.post('/operators/:id{[A-Za-z0-9_-]{1,64}}/disable', async (c) => {
    const me = operatorOf(c).operator.id;
    const id = c.req.param('id');
    if (id === me) return list(c, 400, { error: c.var.t('operators.not_self') });
    // disabled, sessions ended and audited in one transaction (catraca_console_disable_operator)
    if (!(await disableOperator(db, id, { operatorId: me, ip: c.var.ip }))) return r.notFound(c);
    return redirect(c, '/operators?disabled=1');
  });
}
