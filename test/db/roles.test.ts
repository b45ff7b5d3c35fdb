// Least privilege per process (issue 22): on the run's migrated database each process's PostgreSQL
// role runs its own queries — the real code of each path, not copies of its SQL — and is refused
// (42501, insufficient_privilege) what it must not do: a table of role × statement → allowed or
// refused. Every statement runs in a transaction that is rolled back, so the cases are independent.
// Then: the invariants that keep it so (no function executable by PUBLIC, the writers SECURITY
// DEFINER with a fixed search_path, every table granted to some role, the owner owns everything),
// the admin CLI as catraca_admin, a database migrated before the roles existed, and a connection
// that may not bootstrap the roles.
import { randomBytes } from 'node:crypto';
import { mkdtempSync, readdirSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import pg from 'pg';
import { afterAll, beforeAll, describe, expect, test } from 'vitest';
import { hashApiKey } from '../../src/auth/keys.ts';
import * as ledger from '../../src/billing/ledger.ts';
import { createApiKey, findKeyByHash, getKey, keyUsageWindows, listKeys, revokeKey } from '../../src/db/keys.ts';
import { migrateDatabase, MIGRATION_FILE, migrationChecksum } from '../../src/db/migrate.ts';
import {
  addDeployment,
  getAlias,
  getModel,
  listAliases,
  listDeployments,
  listModels,
  setAlias,
  updateDeploymentPrices,
  upsertModel,
} from '../../src/db/models.ts';
import { createPool } from '../../src/db/pool.ts';
import { derivedRolePasswords, derivedRoleUrl, LOGIN_ROLES, type LoginRole, OWNER_ROLE, roleName, scramMatches, scramVerifier } from '../../src/db/roles.ts';
import { createTenant, getTenant, tenantTotals } from '../../src/db/tenants.ts';
import { creditsBody, generationBody, keyBody } from '../../src/gateway/account.ts';
import { PixService } from '../../src/pix/service.ts';
import { deleteSettings, getOrCreateSecret, getSetting, setSetting } from '../../src/pix/settings.ts';
import type { PixCharge, PspAdapter } from '../../src/pix/types.ts';
import { createSession, destroySession, loadSession, logIn, signUp } from '../../src/portal/auth.ts';
import { cleanUp } from '../../src/portal/cleanup.ts';
import { putFlash, takeFlash } from '../../src/portal/flash.ts';
import { acceptInvitation, changeRole, invite, listInvitations, openInvitation, removeMember, revokeInvitation } from '../../src/portal/members.ts';
import { listMembers } from '../../src/db/members.ts';
import { batchFile, cancelPortalBatch, listBatches } from '../../src/portal/batches.ts';
import { exportQuery } from '../../src/portal/exports.ts';
import { dailySpend, ledgerPage, spendByEndUser, spendByKey, spendByModel } from '../../src/portal/usage.ts';
import { sweepExpiredResponses } from '../../src/db/responses.ts';
import { admitBatch, cancelBatch } from '../../src/batch/batches.ts';
import { deleteOldBatches, expireStuckBatches } from '../../src/batch/sweeper.ts';
import { deleteResponse, loadResponse, saveResponse } from '../../src/protocols/responses/store.ts';
import { run as runCli } from '../../src/cli/main.ts';
import * as notify from '../../src/notify/events.ts';
import * as notifySettings from '../../src/notify/settings.ts';
import * as deliveries from '../../src/notify/deliveries.ts';
import { ledgerCheck } from '../../src/billing/ledger-check.ts';
import { audit, listAudit } from '../../src/console/audit.ts';
import { createOperator, disableOperator, listOperators, operatorSessions } from '../../src/console/auth.ts';
import { loadCatalog, setVendorCost, vendorCostHistory } from '../../src/console/catalog.ts';
import { startVendorMode } from '../../src/batch/vendor.ts';
import { listAllBatches } from '../../src/console/batches.ts';
import { marginRows, shortfalls } from '../../src/console/money.ts';
import { chargeStates, listCharges, reconcilerStatus } from '../../src/console/pix.ts';
import { getTenantDetail, listTenants, statement } from '../../src/console/tenants.ts';
import { startStack as startNpmStack } from '../../src/stack/main.ts';
import { freePort } from '../../src/stack/services.ts';
import { type OwnDatabase, ownDatabaseUrl } from '../helpers/own-database.ts';
import { startStack as startTestStack } from '../helpers/stack.ts';

const ADMIN_URL = process.env.DATABASE_URL!;
const admin = createPool(ADMIN_URL, 2);
const pools = Object.fromEntries(LOGIN_ROLES.map((r) => [r, createPool(derivedRoleUrl(ADMIN_URL, r), 2)])) as Record<LoginRole, pg.Pool>;
const uniq = () => randomBytes(5).toString('hex');

afterAll(async () => {
  await Promise.all([admin, ...Object.values(pools)].map((p) => p.end()));
});

/** What the cases act on, made as the superuser. */
const f = {
  tenant: '',
  keyId: '',
  key: '',
  userEmail: '',
  userId: '',
  userTenant: '',
  requestId: '',
  responseId: '',
  txid: '',
  operatorId: '',
  depId: '',
};

/** A fake PSP: every charge exists and is paid with endToEndId E<txid>. */
// It knows only the charges it made: a reconciler pass here checks every tenant's open charges in
// the shared database, and must not find other test files' charges paid.
const made = new Set<string>();
const psp: PspAdapter = {
  name: 'fake',
  createCharge: async (a) => (made.add(a.txid), charge(a.txid, a.amountMicros, 'ATIVA')),
  getCharge: async (txid) => (made.has(txid) ? charge(txid, 20_000_000n, 'CONCLUIDA') : null),
  registerWebhook: async () => {},
  verifyWebhook: () => ({ ok: false, reason: 'bad_secret' }),
  refund: async (a) => ({ id: a.refundId, rtrId: null, amountMicros: a.amountMicros, status: 'DEVOLVIDO' }),
};
function charge(txid: string, amountMicros: bigint, status: PixCharge['status']): PixCharge {
  const pix = status === 'CONCLUIDA' ? [{ endToEndId: `E${txid}`, txid, valor: '20.00', amountMicros, horario: new Date().toISOString(), devolucoes: [] }] : [];
  return { txid, status, amountMicros, brCode: '000201', location: null, createdAt: new Date(), expiresInS: 3600, pix };
}

beforeAll(async () => {
  const t = await createTenant(admin, `roles-${uniq()}`);
  f.tenant = t.id;
  await ledger.credit(admin, { tenantId: t.id, amountMicros: 10_000_000n, source: 'grant', note: 'roles test' });
  const k = await createApiKey(admin, { tenantId: t.id, label: 'roles' });
  f.keyId = k.record.id;
  f.key = k.key;
  await upsertModel(admin, { id: 'roles/echo', pool: 'sim', upstream_model: 'echo', input_price: 1_000_000n, output_price: 2_000_000n });
  await setAlias(admin, 'roles-echo', 'roles/echo');
  // a settled request (for /v1/generation) and a stored response
  f.requestId = `req_roles_${uniq()}`;
  await ledger.settle(admin, settlement(f.requestId, 1000n));
  f.responseId = `resp_roles_${uniq()}`;
  await saveResponse(admin, storedResponse(f.responseId));
  // a portal user with a session, and an open charge
  f.userEmail = `roles.${uniq()}@example.com`;
  const signed = await signUp(admin, { email: f.userEmail, password: 'senha-forte-123', ip: '198.51.100.1' });
  if (!signed.ok) throw new Error(signed.error);
  f.userId = signed.user.id;
  f.userTenant = signed.user.tenant_id;
  // an operator of the console (created as the admin CLI creates it), a deployment it may reprice
  const op = await createOperator(admin, { email: `roles.op.${uniq()}@example.com`, createdBy: null });
  if (!op.ok) throw new Error(op.error);
  f.operatorId = op.setup.operator.id;
  f.depId = (
    await addDeployment(admin, `dep_roles_${uniq()}`, {
      model_id: 'roles/echo',
      name: `d${uniq()}`,
      protocol: 'sim',
      upstream_model: 'echo',
      base_url: 'http://127.0.0.1:1',
    })
  ).id;
  f.txid = randomBytes(16).toString('hex');
  await admin.query(
    `insert into pix_charges (txid, tenant_id, amount_micros, status, provider, br_code, expires_at) values ($1, $2, 20000000, 'ATIVA', 'fake', '000201', now() + interval '1 hour')`,
    [f.txid, signed.user.tenant_id],
  );
});

function settlement(requestId: string, cost: bigint): ledger.Settlement {
  return {
    requestId,
    tenantId: f.tenant,
    keyId: f.keyId,
    costMicros: cost,
    model: 'roles/echo',
    inputTokens: 1,
    outputTokens: 1,
    estimated: false,
    outcome: 'completed',
    at: new Date(),
  };
}

function storedResponse(id: string) {
  const usage = {
    input_tokens: 1,
    output_tokens: 1,
    total_tokens: 2,
    input_tokens_details: { cached_tokens: 0 },
    output_tokens_details: { reasoning_tokens: 0 },
  };
  return {
    tenantId: f.tenant,
    keyId: f.keyId,
    requestId: `req_${id}`,
    input: [],
    response: { id, object: 'response', created_at: Math.floor(Date.now() / 1000), model: 'roles/echo', status: 'completed', output: [], usage },
    params: {},
    retentionDays: 1,
  } as unknown as Parameters<typeof saveResponse>[1];
}

type Run = (db: pg.PoolClient) => Promise<unknown>;
const sql =
  (text: string, values: unknown[] = []): Run =>
  (db) =>
    db.query(text, values);

/** Each role's own paths: must be allowed. */
const ALLOWED: Record<LoginRole, Record<string, Run>> = {
  worker: {
    'catalog: models, aliases, deployments': async (db) => {
      await listModels(db);
      await listAliases(db);
      await listDeployments(db);
      await getModel(db, 'roles/echo');
      await getAlias(db, 'roles-echo');
    },
  },
  gateway: {
    'key lookup by hash': (db) => findKeyByHash(db, hashApiKey(f.key)),
    'catalog reads': async (db) => {
      await listModels(db);
      await listAliases(db);
      await listDeployments(db, 'roles/echo');
    },
    'vendor mode: a batch started at the vendor, remembered in vendor_batch_ids (migration 091)': async (db) => {
      // (the batch as POST /v1/batches leaves it, made in this rolled-back transaction)
      const id = `batch_roles_${uniq()}`;
      await db.query(
        `insert into batches (id, tenant_id, key_id, input_file_id, endpoint, completion_window, status, total, expires_at)
         values ($1, $2, $3, 'file-roles', '/v1/chat/completions', '24h', 'validating', 1, now() + interval '1 day')`,
        [id, f.tenant, f.keyId],
      );
      expect((await startVendorMode(db, id, 60))?.status).toBe('in_progress');
    },
    'batches: the caps on batches in flight, under a lock of the tenant': async (db) => {
      await db.query('begin');
      await admitBatch(db, f.tenant, 1, { maxBatches: 100, maxLines: 1000 });
      await db.query('rollback');
    },
    'admission: catraca_admit, its batch, its finer limits': async (db) => {
      const a = { tenantId: f.tenant, keyId: f.keyId, min: 1n, max: 10n, ttlMs: 60000 };
      expect((await ledger.admit(db, { requestId: `r_${uniq()}`, ...a })).status).toBe('ok');
      expect((await ledger.admitBatch(db, [{ requestId: `r_${uniq()}`, ...a }]))[0].status).toBe('ok');
      expect((await ledger.admitLimited(db, { requestId: `r_${uniq()}`, ...a, tokens: 10, endUser: 'u1' })).status).toBe('ok');
      expect((await ledger.admitVendorLine(db, { requestId: `r_${uniq()}`, tenantId: f.tenant, keyId: f.keyId, amount: 10n, ttlMs: 60000 })).status).toBe('ok');
    },
    'leases: open, close; release a hold': async (db) => {
      const lease = `lease_${uniq()}`;
      expect((await ledger.openLease(db, { leaseId: lease, tenantId: f.tenant, keyId: f.keyId, amount: 1000n, richness: 2, ttlMs: 60000 })).status).toBe('ok');
      expect(await ledger.closeLease(db, lease, 0n)).toBe(1000n);
      const id = `r_${uniq()}`;
      await ledger.admit(db, { requestId: id, tenantId: f.tenant, keyId: f.keyId, min: 1n, max: 10n, ttlMs: 60000 });
      await ledger.releaseHold(db, id);
    },
    '/v1/credits, /v1/key, /v1/generation': async (db) => {
      const key = (await findKeyByHash(db, hashApiKey(f.key)))!;
      const pool = db as unknown as pg.Pool; // they take a pool; a client answers the same queries
      expect((await creditsBody(pool, key)).data.balance).toBeGreaterThan(0);
      expect((await keyBody(pool, key)).data.key_hint).toBe(key.key_hint);
      expect((await generationBody(pool, key, f.requestId)).data.id).toBe(f.requestId);
    },
    'stored responses: save, load, delete': async (db) => {
      const id = `resp_${uniq()}`;
      await saveResponse(db, storedResponse(id));
      expect((await loadResponse(db, f.tenant, f.responseId))?.id).toBe(f.responseId);
      expect(await deleteResponse(db, f.tenant, id)).toBe(true);
    },
  },
  metering: {
    'settle, settle a batch': async (db) => {
      expect((await ledger.settle(db, settlement(`r_${uniq()}`, 10n))).status).toBe('settled');
      expect((await ledger.settleBatch(db, [settlement(`r_${uniq()}`, 10n), settlement(`r_${uniq()}`, 10n)])).map((r) => r.status)).toEqual([
        'settled',
        'settled',
      ]);
    },
    'sweep expired holds, count open ones': async (db) => {
      await ledger.sweepExpiredHolds(db);
      await ledger.openHolds(db);
    },
    'delete expired responses': (db) => sweepExpiredResponses(db),
    'batches: end those past their window, delete those past retention': async (db) => {
      // the sweeper takes a pool: this role's one connection stands for it
      const client = { query: (text: string, values?: unknown[]) => db.query(text, values), release: () => {} };
      const pool = { query: client.query, connect: async () => client } as unknown as pg.Pool;
      await expireStuckBatches(pool, { retentionDays: 30, ackWaitMs: 1000 });
      await deleteOldBatches(pool, 30);
    },
    'notifications: balance and key checks after a settlement, mark what it published': async (db) => {
      await notify.checkBalances(db, [f.tenant]);
      await notify.checkKeyLimits(db, [f.keyId]);
      await db.query('update notify_events set published_at = now() where id = any($1) and published_at is null', [['msg_none']]);
    },
    'notifications: the reconciling sweep, and where it stands': async (db) => {
      await notify.reconcileNotifications(db, 10);
      await db.query('select tenant_after, key_after from notify_reconcile');
    },
  },
  portal: {
    'sessions, flash, purges': async (db) => {
      const s = await createSession(db, f.userId);
      const session = (await loadSession(db, s.token))!;
      const id = await putFlash(db, { sessionToken: s.token, sessionId: session.idHash, value: { ok: 1 } });
      expect(await takeFlash(db, { sessionToken: s.token, sessionId: session.idHash, id })).toEqual({ ok: 1 });
      await destroySession(db, session.idHash);
      await cleanUp(db, { webhookRetentionDays: 90 });
    },
    'keys: create, list, read, revoke, usage windows': async (db) => {
      const tenant = (await getTenant(db, f.tenant))!;
      const k = await createApiKey(db, { tenantId: tenant.id, label: 'portal', limitMicros: 1000n, limitReset: 'daily', createdBy: f.userId });
      await listKeys(db, tenant.id);
      await getKey(db, k.record.id, tenant.id);
      expect(await revokeKey(db, k.record.id, tenant.id)).toBe(true);
      await keyUsageWindows(db, k.record.id);
      await listModels(db);
    },
    'tenant creation and totals, usage pages': async (db) => {
      await createTenant(db, 'portal-made');
      await tenantTotals(db, f.tenant);
      await dailySpend(db, f.tenant);
      await spendByModel(db, f.tenant);
      await spendByKey(db, f.tenant);
      await ledgerPage(db, f.tenant, 0);
    },
    'Lotes: the tenant’s batches with their spend, a batch’s files (migration 089)': async (db) => {
      expect((await listBatches(db, f.tenant, 1)).rows).toEqual([]);
      for (const kind of ['input', 'output', 'errors', 'results'] as const) expect(await batchFile(db, f.tenant, `batch_${'0'.repeat(24)}`, kind)).toBeNull();
    },
    'Lotes: cancelling a batch, the API’s cancel (migration 095)': async (db) => {
      expect(await cancelPortalBatch(db, f.tenant, `batch_${'0'.repeat(24)}`)).toBeNull();
      // the update itself runs (no such batch: a 404 after it), so its privilege is checked
      await expect(cancelBatch(db, { tenant_id: f.tenant }, `batch_${'0'.repeat(24)}`)).rejects.toMatchObject({ code: 'batch_not_found' });
    },
    // (members.ts runs its own transactions: on the portal's pool, committed, in the fixture's tenant)
    'members: invite, accept, list, change a role, remove; invitations revoked': async () => {
      const db = pools.portal;
      const owner = {
        id: f.userId,
        tenant_id: f.userTenant,
        email: f.userEmail,
        role: 'owner' as const,
        created_at: new Date(),
        email_verified_at: new Date(),
      };
      const sent = await invite(db, { tenantId: f.userTenant, invitedBy: owner, email: `roles.member.${uniq()}@example.com`, role: 'developer' });
      if (!sent.ok) throw new Error(sent.error);
      expect((await openInvitation(db, sent.token))?.email).toBe(sent.email);
      const accepted = await acceptInvitation(db, sent.token, 'senha-forte-123');
      if (!accepted.ok) throw new Error(accepted.error);
      expect((await listMembers(db, f.userTenant)).map((m) => m.id)).toContain(accepted.user.id);
      const other = await invite(db, { tenantId: f.userTenant, invitedBy: owner, email: `roles.pending.${uniq()}@example.com`, role: 'billing' });
      if (!other.ok) throw new Error(other.error);
      expect((await listInvitations(db, f.userTenant)).map((i) => i.id)).toContain(other.id);
      expect(await revokeInvitation(db, { tenantId: f.userTenant, actor: owner, id: other.id })).toBe('revoked');
      expect(await changeRole(db, { tenantId: f.userTenant, actorId: f.userId, targetId: accepted.user.id, role: 'billing' })).toBe('ok');
      expect((await removeMember(db, { tenantId: f.userTenant, actorId: f.userId, targetId: accepted.user.id, revokeKeys: true })).result).toBe('ok');
    },
    'usage of a period and the CSV exports (their statements, as the cursor runs them)': async (db) => {
      const period = { from: '2025-01-01', to: '2025-12-31' };
      await dailySpend(db, f.tenant, period);
      await spendByModel(db, f.tenant, period);
      await spendByKey(db, f.tenant, period);
      await spendByEndUser(db, f.tenant, period);
      for (const name of ['statement', 'usage'] as const) {
        const q = exportQuery(name, f.tenant, period);
        await db.query(q.sql, q.params);
      }
    },
    'notifications: settings, endpoints, log, replay': async (db) => {
      await notifySettings.saveSettings(db, f.tenant, { lowBalanceMicros: 1_000_000n, emailEvents: ['balance.low'] });
      await notifySettings.getSettings(db, f.tenant);
      const ep = (await notifySettings.createEndpoint(db, f.tenant, 'https://hooks.example.com/x', ['balance.low']))!;
      await notifySettings.listEndpoints(db, f.tenant);
      expect(await notifySettings.rotateSecret(db, f.tenant, ep.id)).toMatch(/^whsec_/);
      expect(await notifySettings.setEnabled(db, f.tenant, ep.id, false)).toBe(true);
      await notifySettings.deliveryLog(db, f.tenant);
      await notifySettings.replayDelivery(db, f.tenant, '1');
      expect(await notifySettings.deleteEndpoint(db, f.tenant, ep.id)).toBe(true);
    },
    'notifications: events of a top-up, a revocation, expiring keys; the notifier (fan-out, claims, attempts, relay, purge)': async (db) => {
      await notify.topUpEvent(db, f.txid);
      await notify.keyRevokedEvent(db, f.keyId);
      await notify.checkBalances(db, [f.tenant]);
      await notify.scanExpiringKeys(db, 10);
      const ep = (await notifySettings.createEndpoint(db, f.tenant, 'https://hooks.example.com/y', ['balance.low']))!;
      const { rows } = await admin.query(`insert into notify_events (id, tenant_id, type, data) values ($1, $2, 'balance.low', '{}') returning id`, [
        `msg_roles${uniq()}`,
        f.tenant,
      ]);
      expect(await deliveries.fanOut(db, rows[0].id)).toBeGreaterThanOrEqual(1);
      const [d] = await deliveries.claimDue(db, 100, 60000);
      await deliveries.attemptContext(db, d);
      await deliveries.recordAttempt(db, d, { status: 200, durationMs: 5, error: null, state: 'delivered' });
      await deliveries.recordAttempt(db, d, { status: 410, durationMs: 5, error: null, state: 'failed', disableEndpoint: 'roles' });
      await deliveries.unpublishedEvents(db, 0);
      await db.query('update notify_events set published_at = now() where id = $1', [rows[0].id]);
      await deliveries.purgeOld(db, 35);
      await db.query(deliveries.RECIPIENTS_SQL, [f.tenant]);
    },
    settings: async (db) => {
      const name = `roles_${uniq()}`;
      await setSetting(db, name, 'v');
      await getSetting(db, name);
      await getOrCreateSecret(db, `${name}_secret`);
      await deleteSettings(db, [name, `${name}_secret`]);
    },
  },
  admin: {
    'catalog upkeep and tenant reads': async (db) => {
      await upsertModel(db, { id: `roles/admin-${uniq()}`, pool: 'sim', upstream_model: 'echo', input_price: 1n, output_price: 1n });
      await ledger.openHolds(db);
      await db.query('select count(*) from ledger');
    },
    'grants: catraca_credit': (db) => ledger.credit(db, { tenantId: f.tenant, amountMicros: 1n, source: 'grant', note: 'admin' }),
    'notifications: after a grant, after a revocation': async (db) => {
      await notify.checkBalances(db, [f.tenant]);
      await notify.keyRevokedEvent(db, f.keyId);
    },
    'operators: list, audit what the CLI does': async (db) => {
      await db.query('select id, email, created_at, created_by, disabled_at from operators');
      await audit(db, { operatorId: null, action: 'operator_create', ip: 'cli', target: f.operatorId });
    },
  },
  console: {
    'sessions, sign-in throttle rows, audit log': async (db) => {
      const s = await operatorSessions.create(db, f.operatorId, '198.51.100.9');
      expect((await operatorSessions.load(db, s.token))?.subjectId).toBe(f.operatorId);
      await operatorSessions.destroyToken(db, s.token);
      await db.query(`insert into operator_login_failures (email, ip, kind) values ('x@example.com', '198.51.100.9', 'password')`);
      await db.query(`update operator_login_failures set kind = 'code' where email = 'x@example.com'`);
      await db.query(`delete from operator_login_failures where email = 'x@example.com'`);
      await db.query('update operators set totp_last_step = totp_last_step where id = $1', [f.operatorId]);
      await audit(db, { operatorId: f.operatorId, action: 'login', ip: '198.51.100.9' });
      await listAudit(db, {});
      await listOperators(db);
    },
    'tenant pages: list, detail, members, statement, keys, charges': async (db) => {
      await listTenants(db, '', 1);
      await getTenantDetail(db, f.tenant);
      await listMembers(db, f.tenant);
      await statement(db, f.tenant, 1);
      await listKeys(db, f.tenant);
      await listCharges(db, { tenantId: f.tenant });
      await chargeStates(db);
      await reconcilerStatus(db);
    },
    'grant and adjust through their functions; suspend, reactivate, revoke': async (db) => {
      const grant = await db.query('select * from catraca_console_grant($1, $2, $3, 1000000, null, $4, $5)', [
        f.operatorId,
        '198.51.100.9',
        f.tenant,
        'roles',
        uniq(),
      ]);
      expect(grant.rows[0].status).toBe('credited');
      const adjust = await db.query(`select * from catraca_console_adjust($1, $2, $3, 'debit', 1, null, null, $4, $5)`, [
        f.operatorId,
        '198.51.100.9',
        f.tenant,
        'roles',
        uniq(),
      ]);
      expect(adjust.rows[0].status).toBe('debited');
      await db.query('update tenants set suspended_at = now(), suspended_reason = $2 where id = $1', [f.tenant, 'roles']);
      await db.query('update tenants set suspended_at = null, suspended_reason = null where id = $1', [f.tenant]);
      const revoked = await db.query('select status from catraca_console_revoke_key($1, $2, $3, $4)', [f.operatorId, '198.51.100.9', f.tenant, f.keyId]);
      expect(['revoked', 'already']).toContain(revoked.rows[0].status);
    },
    'operators: create one, disable it through its function': async (db) => {
      // (the columns createOperator inserts; it runs its own transaction, this case is one already)
      const id = `opr_roles_${uniq()}`;
      await db.query(`insert into operators (id, email, password_hash, totp_secret, created_by) values ($1, $2, 'x', 'JBSWY3DPEHPK3PXP', $3)`, [
        id,
        `roles.made.${uniq()}@example.com`,
        f.operatorId,
      ]);
      await audit(db, { operatorId: f.operatorId, action: 'operator_create', ip: '198.51.100.9', target: id });
      expect(await disableOperator(db, id, { operatorId: f.operatorId, ip: '198.51.100.9' })).toBe(true);
    },
    'catalog: a model’s sale prices, deployments, vendor costs; margin and shortfalls': async (db) => {
      await db.query('select 1 from models where id = $1 for update', ['roles/echo']);
      const saved = await db.query(
        'update models set input_price = $2, output_price = $3, cached_input_price = null, updated_at = now() where id = $1 returning input_price',
        ['roles/echo', 1_000_000n, 2_000_000n],
      );
      expect(saved.rowCount).toBe(1);
      await updateDeploymentPrices(db, f.depId, { input_price: 1n, output_price: 1n, cached_input_price: null, weight: 2 });
      await setVendorCost(
        db,
        'roles/echo',
        {
          currency: 'USD',
          input_price: 1n,
          cached_input_price: null,
          cache_write_price: null,
          cache_write_1h_price: null,
          output_price: 1n,
          usd_brl_micros: 5_000_000n,
          batch_input_price: 1n,
          batch_cached_input_price: null,
          batch_cache_write_price: null,
          batch_cache_write_1h_price: null,
          batch_output_price: 1n,
        },
        f.operatorId,
      );
      await vendorCostHistory(db, 'roles/echo');
      await loadCatalog(db);
      await marginRows(db, { from: '2026-01-01', to: '2026-01-31' });
      await shortfalls(db);
      await listAllBatches(db, { status: 'completed' }, 1);
    },
    // (a read-only snapshot of its own: it needs the pool)
    'ledger check': () => ledgerCheck(pools.console),
  },
};

const T = () => f.tenant;
const K = () => f.keyId;
/** What each role must not do: refused with 42501. Values are built when the case runs (after the fixture). */
const REFUSED: Record<LoginRole, Record<string, () => [string, unknown[]?]>> = {
  worker: {
    'update tenants': () => ['update tenants set balance_micros = balance_micros + 1000000 where id = $1', [T()]],
    'read password hashes': () => ['select password_hash from portal_users'],
    'insert into ledger': () => [
      `insert into ledger (tenant_id, kind, amount_micros, balance_after_micros, source) values ($1, 'credit', 1000000, 1000000, 'grant')`,
      [T()],
    ],
    catraca_credit: () => [`select * from catraca_credit($1, 1000000, 'grant', null, null)`, [T()]],
    'copy … to program': () => [`copy (select 1) to program 'id'`],
    'read a file of the host': () => [`select pg_read_file('/etc/passwd')`],
    'read keys': () => ['select key_hash from api_keys'],
    'read invitations': () => ['select * from portal_invitations'],
    'read the ledger': () => ['select * from ledger'],
    'change a price': () => [`update models set input_price = 0 where id = 'roles/echo'`],
    catraca_admit: () => [`select * from catraca_admit('x', $1, $2, 1, 1, 1000)`, [T(), K()]],
    'create a table': () => ['create table roles_spy (id int)'],
    'create a temporary table': () => ['create temporary table roles_spy (id int)'],
    'become the owner': () => [`set role ${OWNER_ROLE}`],
  },
  gateway: {
    catraca_settle: () => [`select * from catraca_settle('x', $1, $2, 1, 'm', 1, 1, false, 'completed', now(), null, null)`, [T(), K()]],
    catraca_settle_batch: () => [`select * from catraca_settle_batch('[]'::jsonb)`],
    catraca_sweep_holds: () => ['select catraca_sweep_holds(10)'],
    catraca_credit: () => [`select * from catraca_credit($1, 1000000, 'grant', null, null)`, [T()]],
    catraca_pix_credit: () => [`select * from catraca_pix_credit($1, 'E1', now())`, [f.txid]],
    'update tenants': () => ['update tenants set balance_micros = balance_micros + 1 where id = $1', [T()]],
    'lift a key limit': () => ['update api_keys set limit_micros = null where id = $1', [K()]],
    'insert into ledger': () => [
      `insert into ledger (tenant_id, kind, amount_micros, balance_after_micros, source) values ($1, 'credit', 1, 1, 'grant')`,
      [T()],
    ],
    'delete holds': () => ['delete from holds'],
    'read password hashes': () => ['select password_hash from portal_users'],
    'read Pix charges': () => ['select * from pix_charges'],
    'read invitations': () => ['select * from portal_invitations'],
    'add a model': () => [`insert into models (id, pool, upstream_model, input_price, output_price) values ('x/y', 'sim', 'echo', 0, 0)`],
    'copy … to program': () => [`copy (select 1) to program 'id'`],
    'read webhook secrets': () => ['select secret from notify_endpoints'],
    catraca_notify_balance: () => ['select * from catraca_notify_balance($1)', [[T()]]],
    // vendor_batch_ids is written once per batch, never changed: the margin's record of vendor mode
    'forget a vendor-mode batch': () => ['delete from vendor_batch_ids'],
    'rewrite a vendor-mode batch': () => [`update vendor_batch_ids set batch_id = 'batch_forged'`],
  },
  metering: {
    catraca_credit: () => [`select * from catraca_credit($1, 1000000, 'grant', null, null)`, [T()]],
    catraca_pix_credit: () => [`select * from catraca_pix_credit($1, 'E1', now())`, [f.txid]],
    catraca_admit: () => [`select * from catraca_admit('x', $1, $2, 1, 1, 1000)`, [T(), K()]],
    'read users': () => ['select email from portal_users'],
    'read invitations': () => ['select * from portal_invitations'],
    'read keys': () => ['select key_hash from api_keys'],
    'update tenants': () => ['update tenants set balance_micros = balance_micros + 1 where id = $1', [T()]],
    'insert into ledger': () => [
      `insert into ledger (tenant_id, kind, amount_micros, balance_after_micros, source) values ($1, 'credit', 1, 1, 'grant')`,
      [T()],
    ],
    'copy … to program': () => [`copy (select 1) to program 'id'`],
    'read webhook secrets': () => ['select secret from notify_endpoints'],
    'read notification payloads': () => ['select data from notify_events'],
    'make a notification event': () => [`insert into notify_events (id, tenant_id, type, data) values ('msg_forged', $1, 'balance.low', '{}')`, [T()]],
    'reset a crossing': () => ['update notify_tenants set low_fired = false'],
  },
  portal: {
    'read operators': () => ['select email from operators'],
    'read the audit log': () => ['select * from console_audit'],
    catraca_settle: () => [`select * from catraca_settle('x', $1, $2, 1, 'm', 1, 1, false, 'completed', now(), null, null)`, [T(), K()]],
    catraca_settle_batch: () => [`select * from catraca_settle_batch('[]'::jsonb)`],
    catraca_sweep_holds: () => ['select catraca_sweep_holds(10)'],
    catraca_admit: () => [`select * from catraca_admit('x', $1, $2, 1, 1, 1000)`, [T(), K()]],
    'catraca_credit (a credit outside the Pix flow)': () => [`select * from catraca_credit($1, 1000000, 'pix', 'E-forged', null)`, [T()]],
    'update tenants': () => ['update tenants set balance_micros = balance_micros + 1 where id = $1', [T()]],
    'create a tenant with a balance': () => [`insert into tenants (id, name, balance_micros) values ('ten_forged', 'x', 1000000)`],
    'insert into ledger': () => [`insert into ledger (tenant_id, kind, amount_micros, balance_after_micros, source) values ($1, 'credit', 1, 1, 'pix')`, [T()]],
    'mark a charge paid by hand': () => [`update pix_charges set end_to_end_id = 'E-forged' where txid = $1`, [f.txid]],
    'change a charge amount': () => ['update pix_charges set amount_micros = 1 where txid = $1', [f.txid]],
    'lift a key limit': () => ['update api_keys set limit_micros = null where id = $1', [K()]],
    'add a model': () => [`insert into models (id, pool, upstream_model, input_price, output_price) values ('x/y', 'sim', 'echo', 0, 0)`],
    'read stored responses': () => ['select * from responses'],
    'copy … to program': () => [`copy (select 1) to program 'id'`],
    'make a notification event': () => [`insert into notify_events (id, tenant_id, type, data) values ('msg_forged', $1, 'topup.credited', '{}')`, [T()]],
    'change an event': () => [`update notify_events set data = '{}'`],
    'reset the depleted state': () => ['update notify_tenants set depleted_fired = false'],
    catraca_notify_keys: () => ['select * from catraca_notify_keys($1)', [[K()]]],
    // the Lotes page reads, and its cancel changes a batch's status alone (migration 095): not its
    // counts, files or vendor state; no file written, no file's key or upload read
    'change a batch’s counts': () => [`update batches set completed = total where tenant_id = $1`, [T()]],
    'change a batch’s files': () => [`update batches set output_file_id = null where tenant_id = $1`, [T()]],
    'claim a vendor-mode batch': () => [`update batches set vendor_next_at = now() where tenant_id = $1`, [T()]],
    'write a batch file': () => [
      `insert into batch_files (id, tenant_id, key_id, purpose, filename, bytes, lines, content, expires_at) values ('file-forged', $1, $2, 'batch_output', 'x', 0, 0, '', now())`,
      [T(), K()],
    ],
    'read which key uploaded a file': () => ['select key_id from batch_files'],
  },
  console: {
    'update the audit log': () => [`update console_audit set reason = 'rewritten'`],
    'delete the audit log': () => ['delete from console_audit'],
    'truncate the audit log': () => ['truncate console_audit'],
    'update tenants': () => ['update tenants set balance_micros = balance_micros + 1 where id = $1', [T()]],
    'insert into ledger': () => [
      `insert into ledger (tenant_id, kind, amount_micros, balance_after_micros, source) values ($1, 'credit', 1, 1, 'grant')`,
      [T()],
    ],
    catraca_credit: () => [`select * from catraca_credit($1, 1000000, 'grant', null, null)`, [T()]],
    catraca_settle: () => [`select * from catraca_settle('x', $1, $2, 1, 'm', 1, 1, false, 'completed', now(), null, null)`, [T(), K()]],
    'read password hashes': () => ['select password_hash from portal_users'],
    'read portal sessions': () => ['select * from portal_sessions'],
    'read stored responses': () => ['select * from responses'],
    'change a charge': () => [`update pix_charges set status = 'CONCLUIDA' where txid = $1`, [f.txid]],
    'lift a key limit': () => ['update api_keys set limit_micros = null where id = $1', [K()]],
    'rewrite vendor costs': () => ['update model_vendor_costs set input_price = 0'],
    'rewrite batch vendor costs': () => ['update model_vendor_costs set batch_input_price = 0'],
    'mark a batch as run at the vendor': () => [`insert into vendor_batch_ids (batch_id) values ('batch_forged')`],
    'forget a vendor-mode batch': () => ['delete from vendor_batch_ids'],
    're-enable a disabled operator': () => ['update operators set disabled_at = null where id = $1', [f.operatorId]],
    'disable an operator without its audit row': () => ['update operators set disabled_at = now() where id = $1', [f.operatorId]],
    'insert into the audit log directly': () => [`insert into console_audit (operator_id, action, ip) values ($1, 'login', '198.51.100.9')`, [f.operatorId]],
    'add a model': () => [`insert into models (id, pool, upstream_model, input_price, output_price) values ('x/forged', 'sim', 'echo', 0, 0)`],
    'change a model’s upstream': () => [`update models set base_url = 'http://198.51.100.9' where id = 'roles/echo'`],
    'change a model’s pool': () => [`update models set pool = 'other' where id = 'roles/echo'`],
    'revoke a key without its audit row': () => ['update api_keys set revoked_at = now() where id = $1', [K()]],
    'copy … to program': () => [`copy (select 1) to program 'id'`],
  },
  admin: {
    'read TOTP secrets': () => ['select totp_secret from operators'],
    'read operator sessions': () => ['select csrf_secret from operator_sessions'],
    'rewrite the audit log': () => [`update console_audit set reason = 'rewritten'`],
    catraca_console_grant: () => [`select * from catraca_console_grant($1, 'x', $2, 1, null, 'r', 'n')`, [f.operatorId, T()]],
    catraca_settle: () => [`select * from catraca_settle('x', $1, $2, 1, 'm', 1, 1, false, 'completed', now(), null, null)`, [T(), K()]],
    catraca_admit: () => [`select * from catraca_admit('x', $1, $2, 1, 1, 1000)`, [T(), K()]],
    catraca_pix_credit: () => [`select * from catraca_pix_credit($1, 'E1', now())`, [f.txid]],
    'update tenants': () => ['update tenants set balance_micros = balance_micros + 1 where id = $1', [T()]],
    'insert into ledger': () => [
      `insert into ledger (tenant_id, kind, amount_micros, balance_after_micros, source) values ($1, 'credit', 1, 1, 'grant')`,
      [T()],
    ],
    'read password hashes': () => ['select password_hash from portal_users'],
    'read invitations': () => ['select token_hash from portal_invitations'],
    'change a member role': () => [`update portal_users set role = 'owner' where id = $1`, [f.userId]],
    'copy … to program': () => [`copy (select 1) to program 'id'`],
    'read webhook secrets': () => ['select secret from notify_endpoints'],
    'make a notification event': () => [`insert into notify_events (id, tenant_id, type, data) values ('msg_forged', $1, 'balance.low', '{}')`, [T()]],
  },
};

/** allowed, refused (42501), or the error it failed with otherwise. Always rolled back. */
async function outcome(role: LoginRole, fn: Run): Promise<string> {
  const c = await pools[role].connect();
  try {
    await c.query('begin');
    await fn(c);
    return 'allowed';
  } catch (err) {
    const e = err as { code?: string; message: string };
    return e.code === '42501' ? 'refused' : `failed: ${e.code ?? ''} ${e.message}`;
  } finally {
    await c.query('rollback').catch(() => {});
    c.release();
  }
}

describe('each process role: its own paths allowed, the rest refused', () => {
  for (const role of LOGIN_ROLES) {
    test(roleName(role), async () => {
      const got: Record<string, string> = {};
      const want: Record<string, string> = {};
      for (const [what, fn] of Object.entries(ALLOWED[role])) {
        got[`${what}`] = await outcome(role, fn);
        want[what] = 'allowed';
      }
      for (const [what, statement] of Object.entries(REFUSED[role])) {
        const [text, values] = statement();
        got[what] = await outcome(role, sql(text, values ?? []));
        want[what] = 'refused';
      }
      expect(got).toEqual(want);
    });
  }

  test('the portal signs up and logs in, and credits a top-up only through the Pix flow', async () => {
    const db = pools.portal;
    const email = `roles.portal.${uniq()}@example.com`;
    const signed = await signUp(db, { email, password: 'senha-forte-123', ip: '198.51.100.2' });
    expect(signed.ok).toBe(true);
    expect((await logIn(db, { email, password: 'senha-forte-123', ip: '198.51.100.2' })).ok).toBe(true);
    expect((await logIn(db, { email, password: 'errada-errada', ip: '198.51.100.2' })).ok).toBe(false);
    const tenantId = signed.ok ? signed.user.tenant_id : '';
    const pix = new PixService(db, psp);
    const ch = await pix.createTopUp(tenantId, 20_000_000n);
    expect(await pix.listCharges(tenantId)).toHaveLength(1);
    // the PSP reports it paid: reconciliation credits it, once
    expect(await pix.reconcileCharge(ch.txid)).toBe('CONCLUIDA');
    expect(await pix.applyPayment({ ...(await psp.getCharge(ch.txid))!.pix[0] }, 'reconcile')).toBe('duplicate');
    expect((await getTenant(admin, tenantId))!.balance_micros).toBe(20_000_000n);
    const { rows } = await admin.query('select kind, amount_micros, source, external_id, note from ledger where tenant_id = $1', [tenantId]);
    expect(rows).toEqual([{ kind: 'credit', amount_micros: 20_000_000n, source: 'pix', external_id: `E${ch.txid}`, note: ch.txid }]);
    // the reconciler's pass is recorded for the console
    await pix.reconcileOnce();
    expect((await admin.query(`select checked, failed from pix_reconciler_status where name = 'reconciler'`)).rows).toEqual([
      expect.objectContaining({ failed: 0 }),
    ]);
    // a devolução debits through catraca_pix_refund
    expect(await pix.requestRefund(ch.txid, 5_000_000n, 'dev1')).toBe('refunded');
    expect((await getTenant(admin, tenantId))!.balance_micros).toBe(15_000_000n);
    // the function credits a charge once, whatever the portal does to its status
    const again = await outcome('portal', async (c) => {
      await c.query(`update pix_charges set status = 'ATIVA' where txid = $1`, [ch.txid]);
      await c.query(`select * from catraca_pix_credit($1, 'E-second', now())`, [ch.txid]);
    });
    expect(again).toMatch(/^failed: P0001 charge \w+ cannot take a payment: it was paid already/);
  });
});

/** Who may execute each catraca_* function (function → roles), and which run as their owner. */
const EXECUTE: Record<string, { roles: LoginRole[]; definer: boolean }> = {
  catraca_admit: { roles: ['gateway'], definer: true },
  catraca_admit_batch: { roles: ['gateway'], definer: true },
  catraca_admit_limited: { roles: ['gateway'], definer: true },
  catraca_admit_vendor_line: { roles: ['gateway'], definer: true },
  catraca_lease_open: { roles: ['gateway'], definer: true },
  catraca_lease_close: { roles: ['gateway'], definer: true },
  catraca_release: { roles: ['gateway'], definer: true },
  catraca_settle: { roles: ['metering'], definer: true },
  catraca_settle_batch: { roles: ['metering'], definer: true },
  catraca_sweep_holds: { roles: ['metering'], definer: true },
  catraca_suspend_tenant: { roles: ['metering'], definer: true },
  catraca_credit: { roles: ['admin'], definer: true },
  catraca_pix_credit: { roles: ['portal'], definer: true },
  catraca_pix_refund: { roles: ['portal'], definer: true },
  catraca_window_start: { roles: ['gateway', 'portal', 'admin'], definer: false },
  // the trigger function of portal_users_keep_an_owner: a trigger runs it, nobody calls it
  catraca_keep_an_owner: { roles: [], definer: false },
  catraca_notify_balance: { roles: ['metering', 'portal', 'admin'], definer: true },
  catraca_notify_keys: { roles: ['metering'], definer: true },
  catraca_notify_reconcile: { roles: ['metering'], definer: true },
  catraca_notify_key_revoked: { roles: ['portal', 'admin'], definer: true },
  catraca_notify_topup: { roles: ['portal'], definer: true },
  // notas fiscais (src/nfse): the note of a credited top-up, and invoice.issued
  catraca_invoice_topup: { roles: ['portal'], definer: true },
  catraca_notify_invoice: { roles: ['portal'], definer: true },
  catraca_notify_recurring_failed: { roles: ['portal'], definer: true },
  catraca_notify_expiring: { roles: ['portal'], definer: true },
  // the insert of one event, for the catraca_notify_* functions above: only they call it, as the owner
  catraca_notify_event: { roles: [], definer: true },
  catraca_console_grant: { roles: ['console'], definer: true },
  catraca_console_adjust: { roles: ['console'], definer: true },
  // the checks, tenant lock and nonce of a grant or an adjustment: only those two call it, as the owner
  catraca_console_balance_lock: { roles: [], definer: true },
  catraca_console_audit_append_only: { roles: [], definer: false },
  catraca_console_audit: { roles: ['console', 'admin'], definer: true },
  catraca_console_disable_operator: { roles: ['console', 'admin'], definer: true },
  catraca_console_revoke_key: { roles: ['console'], definer: true },
};

describe('the invariants that keep it so', () => {
  test('EXECUTE on each catraca function: exactly the roles that call it, never PUBLIC; writers SECURITY DEFINER with a fixed search_path', async () => {
    const { rows } = await admin.query<{ name: string; definer: boolean; config: string[] | null; owner: string; public: boolean; roles: string[] }>(
      `select p.proname as name, p.prosecdef as definer, p.proconfig as config, pg_get_userbyid(p.proowner) as owner,
              exists (select 1 from aclexplode(coalesce(p.proacl, acldefault('f', p.proowner))) a where a.grantee = 0) as public,
              array(select r from unnest($1::text[]) r where has_function_privilege(r, p.oid, 'execute') order by r) as roles
         from pg_proc p where p.pronamespace = 'public'::regnamespace and p.proname like 'catraca\\_%' order by p.proname`,
      [LOGIN_ROLES.map(roleName)],
    );
    const got = Object.fromEntries(rows.map((r) => [r.name, { roles: r.roles, definer: r.definer, public: r.public, owner: r.owner, config: r.config }]));
    const want = Object.fromEntries(
      Object.entries(EXECUTE)
        .sort()
        .map(([name, e]) => [
          name,
          {
            roles: e.roles.map(roleName).sort(),
            definer: e.definer,
            public: false,
            owner: OWNER_ROLE,
            config: expect.arrayContaining(e.definer ? ['search_path=public, pg_temp'] : []),
          },
        ]),
    );
    expect(got).toEqual(want);
    // and no other function of the schema either
    const { rows: open } = await admin.query(
      `select p.oid::regprocedure::text as f from pg_proc p, aclexplode(coalesce(p.proacl, acldefault('f', p.proowner))) a
        where p.pronamespace = 'public'::regnamespace and a.grantee = 0`,
    );
    expect(open).toEqual([]);
  });

  test('catraca_owner owns the database and everything in it; every table but the runner own is granted to some process; no role is privileged', async () => {
    const { rows: db } = await admin.query(
      `select pg_get_userbyid(datdba) as owner,
              exists (select 1 from aclexplode(datacl) a where a.grantee = 0) as public_access
         from pg_database where datname = current_database()`,
    );
    expect(db).toEqual([{ owner: OWNER_ROLE, public_access: false }]);
    const { rows: foreign } = await admin.query(
      `select c.relname from pg_class c where c.relnamespace = 'public'::regnamespace and c.relkind in ('r', 'p', 'v', 'm', 'S') and pg_get_userbyid(c.relowner) <> $1
       union all select p.proname from pg_proc p where p.pronamespace = 'public'::regnamespace and pg_get_userbyid(p.proowner) <> $1`,
      [OWNER_ROLE],
    );
    expect(foreign).toEqual([]);
    const { rows: ungranted } = await admin.query(
      `select c.relname from pg_class c where c.relnamespace = 'public'::regnamespace and c.relkind = 'r'
          and c.relname not in ('schema_migrations', 'schema_functions')
          and not exists (select 1 from unnest($1::text[]) r where has_table_privilege(r, c.oid, 'select') or has_table_privilege(r, c.oid, 'insert'))
        order by 1`,
      [LOGIN_ROLES.map(roleName)],
    );
    expect(ungranted, 'tables no process may read or write: grant them in a migration').toEqual([]);
    const { rows: roles } = await admin.query(
      `select rolname, rolsuper or rolcreaterole or rolcreatedb or rolreplication or rolbypassrls as privileged, rolcanlogin as login
         from pg_roles where rolname like 'catraca\\_%' order by rolname`,
    );
    expect(roles).toEqual([OWNER_ROLE, ...LOGIN_ROLES.map(roleName)].sort().map((rolname) => ({ rolname, privileged: false, login: rolname !== OWNER_ROLE })));
    // the schema takes new objects from the owner only
    const { rows: create } = await admin.query(`select r as role from unnest($1::text[]) r where has_schema_privilege(r, 'public', 'create') order by r`, [
      [OWNER_ROLE, ...LOGIN_ROLES.map(roleName)],
    ]);
    expect(create).toEqual([{ role: OWNER_ROLE }]);
  });
});

describe('the admin CLI as catraca_admin', () => {
  test('creates a tenant, grants credit, manages keys and the catalog, lists, checks the ledger', async () => {
    const env = { DATABASE_URL: derivedRoleUrl(ADMIN_URL, 'admin'), NATS_URL: process.env.NATS_URL };
    const cli = async (...argv: string[]) => {
      let out = '';
      let err = '';
      const code = await runCli([...argv, '--json'], { env, stdout: (s) => (out += s), stderr: (s) => (err += s) });
      expect({ argv: argv.join(' '), code, err }).toEqual({ argv: argv.join(' '), code: 0, err: '' });
      return JSON.parse(out);
    };
    const { id } = await cli('tenant', 'create', '--name', 'cli-admin');
    expect(await cli('credits', 'grant', '--tenant', id, '--amount', '12.34')).toMatchObject({ tenant: id, balance: '12.34' });
    const model = `roles/cli-${uniq()}`;
    await cli(
      'model',
      'set',
      '--id',
      model,
      '--pool',
      'sim',
      '--upstream-model',
      'echo',
      '--input-price',
      '1',
      '--output-price',
      '2',
      '--context-length',
      '8192',
    );
    await cli('model', 'alias', 'add', '--alias', `${model}-alias`, '--model', model);
    await cli('model', 'deployment', 'add', '--model', model, '--base-url', 'https://api.example.com/v1', '--protocol', 'openai');
    const key = await cli('key', 'create', '--tenant', id, '--label', 'cli', '--models', model);
    expect((await cli('key', 'list', '--tenant', id)).keys).toHaveLength(1);
    expect(await cli('key', 'revoke', '--id', key.id)).toEqual({ id: key.id, revoked: true });
    expect((await cli('tenant', 'list')).tenants.find((t: { id: string }) => t.id === id)).toMatchObject({ balance: '12.34', active_keys: 0 });
    expect((await cli('model', 'list')).models.map((m: { id: string }) => m.id)).toContain(model);
    expect(await cli('ledger', 'check', '--tenant', id)).toMatchObject({ ok: true });
    expect(await cli('tenant', 'members', '--id', f.userTenant)).toEqual({
      tenant: f.userTenant,
      members: [{ id: f.userId, email: f.userEmail, role: 'owner', verified: false, created_at: expect.any(String) }],
    });
    // the console's operators: made, listed, given new credentials, disabled
    const email = `roles.cli.${uniq()}@example.com`;
    const op = await cli('operator', 'create', '--email', email);
    expect(op).toMatchObject({ email, password: expect.stringMatching(/^[A-Za-z0-9_-]{20}$/), otpauth_url: expect.stringMatching(/^otpauth:\/\/totp\//) });
    expect(op.recovery_codes).toHaveLength(10);
    expect((await cli('operator', 'list')).operators.find((o: { id: string }) => o.id === op.id)).toMatchObject({ email, created_by: 'cli', disabled: false });
    expect((await cli('operator', 'reset', '--email', email)).totp_secret).not.toBe(op.totp_secret);
    expect(await cli('operator', 'disable', '--email', email)).toEqual({ id: op.id, email, disabled: true });
  });
});

describe('the migration runner', () => {
  const created: OwnDatabase[] = [];
  const dbUrl = (suffix: string) => {
    const own = ownDatabaseUrl(suffix);
    created.push(own);
    return own.url;
  };
  afterAll(async () => {
    for (const own of created) await own.drop();
  });

  test('upgrades a database migrated before the roles existed: the owner takes over, the processes get their rights, data kept', async () => {
    const url = dbUrl('pre_roles');
    await admin.query(`create database "${new URL(url).pathname.slice(1)}"`);
    const old = new pg.Client({ connectionString: url });
    await old.connect();
    try {
      // what the runner did before migration 034: every file as the connecting superuser
      await old.query('create table schema_migrations (version text primary key, applied_at timestamptz not null default now(), checksum text)');
      const dir = join(dirname(fileURLToPath(import.meta.url)), '..', '..', 'src', 'db', 'migrations');
      for (const file of readdirSync(dir)
        .filter((f) => MIGRATION_FILE.test(f) && f < '034')
        .sort()) {
        const body = readFileSync(join(dir, file));
        await old.query(body.toString('utf8'));
        await old.query('insert into schema_migrations (version, checksum) values ($1, $2)', [file, migrationChecksum(body)]);
      }
      await old.query(`insert into tenants (id, name, balance_micros) values ('ten_old', 'old', 5000000)`);
      await old.query(`insert into api_keys (id, tenant_id, key_hash, key_hint) values ('key_old', 'ten_old', '\\x01', 'old')`);
    } finally {
      await old.end();
    }
    // (the run's own password: a role is the cluster's, other files are connecting with it)
    const result = await migrateDatabase(url, { rolePasswords: { gateway: derivedRolePasswords(ADMIN_URL).gateway } });
    expect(result.migrations).toEqual(
      readdirSync(join(dirname(fileURLToPath(import.meta.url)), '..', '..', 'src', 'db', 'migrations'))
        .filter((f) => MIGRATION_FILE.test(f) && f >= '034')
        .sort(),
    );
    expect(result.migrations[0]).toBe('034_roles.sql');
    expect(result.rolePasswords).toEqual(['gateway']);
    const check = new pg.Client({ connectionString: url });
    await check.connect();
    try {
      const { rows } = await check.query(
        `select count(*)::int as n from pg_class c where c.relnamespace = 'public'::regnamespace and c.relkind in ('r', 'S') and pg_get_userbyid(c.relowner) <> $1`,
        [OWNER_ROLE],
      );
      expect(rows).toEqual([{ n: 0 }]);
      await check.query(`set role ${roleName('gateway')}`);
      const admitted = await check.query(`select status, held from catraca_admit('r_old', 'ten_old', 'key_old', 1, 1000, 60000)`);
      expect(admitted.rows).toEqual([{ status: 'ok', held: 1000n }]);
      await expect(check.query(`update tenants set balance_micros = 0`)).rejects.toMatchObject({ code: '42501' });
    } finally {
      await check.end();
    }
  });

  test('sets passwords as SCRAM verifiers PostgreSQL accepts, never the password itself', async () => {
    // a role of this test alone (roles are the cluster's): PostgreSQL hashes a password, we check ours against it
    const role = `catraca_test_scram_${uniq()}`;
    await admin.query(`create role ${role} password 'senha-secreta-1'`);
    try {
      const { rows } = await admin.query('select rolpassword from pg_authid where rolname = $1', [role]);
      const stored: string = rows[0].rolpassword;
      expect(scramMatches(stored, 'senha-secreta-1')).toBe(true);
      expect(scramMatches(stored, 'senha-secreta-2')).toBe(false);
      const [, iterations, salt] = /^SCRAM-SHA-256\$(\d+):([^$]+)\$/.exec(stored)!;
      expect(scramVerifier('senha-secreta-1', Buffer.from(salt, 'base64'), Number(iterations))).toBe(stored);
    } finally {
      await admin.query(`drop role ${role}`);
    }
    const { rows: ours } = await admin.query('select rolname, rolpassword from pg_authid where rolname = any($1) order by rolname', [
      LOGIN_ROLES.map(roleName),
    ]);
    for (const r of ours) expect(scramMatches(r.rolpassword, derivedRolePasswords(ADMIN_URL)[r.rolname.replace('catraca_', '') as LoginRole])).toBe(true);
  });

  test('connected as catraca_owner, it runs as itself: no role created, no password set', async () => {
    // a superuser's session acting as catraca_owner (giving the owner a login would change the cluster for every run)
    const u = new URL(ADMIN_URL);
    u.searchParams.set('options', `-c role=${OWNER_ROLE}`);
    const c = new pg.Client({ connectionString: u.toString() });
    await c.connect();
    expect((await c.query('select current_user as u')).rows).toEqual([{ u: OWNER_ROLE }]);
    await c.end();
    expect(await migrateDatabase(u.toString(), { rolePasswords: { gateway: 'not-set-by-the-owner' } })).toEqual({
      migrations: [],
      functions: [],
      rolePasswords: [],
    });
    const { rows } = await admin.query('select rolpassword from pg_authid where rolname = $1', [roleName('gateway')]);
    expect(scramMatches(rows[0].rolpassword, derivedRolePasswords(ADMIN_URL).gateway)).toBe(true);
  });

  test('connected as a process role, it refuses to run and says what it needs', async () => {
    const url = derivedRoleUrl(ADMIN_URL, 'gateway');
    await expect(migrateDatabase(url)).rejects.toThrow(
      /^the migrations need the catraca roles: connected as catraca_gateway, which is neither a superuser, nor allowed to create roles \(CREATEROLE\), nor catraca_owner\./,
    );
  });
});

describe('stacks connect each process as its role', () => {
  const created: OwnDatabase[] = [];
  /** A database of its own: the connections to it are this stack's alone. */
  const ownDb = () => {
    const own = ownDatabaseUrl('stack');
    created.push(own);
    return own.url;
  };
  afterAll(async () => {
    for (const own of created) await own.drop();
  });
  const usersOf = async (url: string) =>
    (
      await admin.query<{ usename: string }>('select distinct usename from pg_stat_activity where datname = $1 and usename <> current_user order by 1', [
        new URL(url).pathname.slice(1),
      ])
    ).rows.map((r) => r.usename);
  const chat = (baseUrl: string, key: string) =>
    fetch(`${baseUrl}/chat/completions`, {
      method: 'POST',
      headers: { authorization: `Bearer ${key}`, 'content-type': 'application/json' },
      body: JSON.stringify({ model: 'sim/echo', messages: [{ role: 'user', content: 'olá' }] }),
    });

  test('a test stack (src/stack/own-stack.ts): gateway, worker and metering serve and settle a request as their roles', async () => {
    const stack = await startTestStack({ databaseUrl: ownDb() });
    try {
      const t = await stack.tenant('1.00');
      const res = await chat(stack.baseUrl, t.key);
      expect(res.status).toBe(200);
      await stack.waitSettled([res.headers.get('x-request-id')!]);
      await stack.waitNoHolds(t.tenantId);
      expect(await usersOf(stack.databaseUrl)).toEqual(['catraca_gateway', 'catraca_metering', 'catraca_worker']);
    } finally {
      await stack.stop();
    }
  }, 90000);

  test('npm start (src/stack/main.ts): every child as its role, the portal too', async () => {
    const root = join(dirname(fileURLToPath(import.meta.url)), '..', '..');
    const databaseUrl = ownDb();
    const dataDir = mkdtempSync(join(tmpdir(), 'catraca-roles-stack-'));
    const stack = await startNpmStack({
      root,
      natsUrl: '', // a nats-server of its own: its metering and workers must never touch the run's
      databaseUrl,
      gatewayPort: await freePort(),
      portalPort: await freePort(),
      consolePort: await freePort(),
      metricsPorts: { gateway: null, worker: null, metering: null, portal: null, console: null },
      writeState: false,
      dataDir,
      // the request goes to the worker process (a front door would serve sim/* itself)
      env: { GATEWAY_LOCAL_POOLS: '' },
      // ~9 s alone; under CI's parallel files it once passed main.ts's own 30 s
      readyTimeoutMs: 75_000,
      output: () => {},
    });
    try {
      expect(stack.ready).toBe(true);
      const res = await chat(stack.urls.base_url, stack.demo.key);
      expect(res.status).toBe(200);
      const requestId = res.headers.get('x-request-id')!;
      const check = createPool(databaseUrl, 1);
      try {
        for (let settled = 0, deadline = Date.now() + 10000; !settled && Date.now() < deadline; ) {
          settled = (await check.query('select 1 from ledger where request_id = $1', [requestId])).rowCount ?? 0;
          if (!settled) await new Promise((r) => setTimeout(r, 100));
        }
      } finally {
        await check.end();
      }
      expect(await usersOf(databaseUrl)).toEqual(['catraca_console', 'catraca_gateway', 'catraca_metering', 'catraca_portal', 'catraca_worker']);
    } finally {
      await stack.stop();
      rmSync(dataDir, { recursive: true, force: true });
    }
  }, 120_000);
});
