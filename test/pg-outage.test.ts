import { mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startStack, type TestStack } from './helpers/stack.ts';
import { embeddedPgDir, ensurePostgres, freePort, type ServiceHandle } from '../src/stack/services.ts';
import { ledgerCheck } from '../src/billing/ledger-check.ts';
import { createPool } from '../src/db/pool.ts';
import { createTenant } from '../src/db/tenants.ts';
import { startPortal } from '../src/portal/server.ts';
import { getSetting, SETTINGS } from '../src/pix/settings.ts';

// PostgreSQL going away under load, then coming back: nothing is admitted without a hold, no
// request gets a 500, usage waits in JetStream and settles once, no process needs a restart.
// The database is an embedded PostgreSQL of this test's own, killed with SIGKILL.
let stack: TestStack;
let pg: ServiceHandle;
let dir: string;
let port: number;

const kill = () => {
  const pid = Number(readFileSync(join(embeddedPgDir(join(dir, 'pg')), 'postmaster.pid'), 'utf8').split('\n')[0]);
  process.kill(pid, 'SIGKILL');
};
const restart = async () => (pg = await ensurePostgres({ dataDir: join(dir, 'pg'), port, database: 'catraca_outage' }));

beforeAll(async () => {
  dir = mkdtempSync(join(tmpdir(), 'catraca-pg-outage-'));
  port = await freePort();
  await restart();
  stack = await startStack({
    databaseUrl: pg.url,
    gateways: 1,
    workers: 1,
    env: { DB_CONNECT_TIMEOUT_MS: '1500', HOLD_SWEEP_INTERVAL_MS: '500', ADMISSION_LEASE_MS: '1000' },
  });
}, 120000);

afterAll(async () => {
  await stack?.stop();
  await pg?.stop();
  rmSync(dir, { recursive: true, force: true });
});

describe('PostgreSQL going away', () => {
  it('admits only against holds, answers 503 with retry-after (never 500), settles everything once when it returns', { timeout: 120000 }, async () => {
    const rich = await stack.tenant('100.00'); // admitted from leases while it can
    const exact = await stack.tenant('100.00', { rateLimitRequests: 100_000, rateLimitIntervalS: 60 }); // every request holds in PostgreSQL
    const results: Array<{ status: number; code?: string; retryAfter?: string | null; id?: string; phase: string; t: number }> = [];
    let phase = 'before';
    let running = true;
    const client = async (key: string) => {
      while (running) {
        const res = await fetch(`${stack.baseUrl}/chat/completions`, {
          method: 'POST',
          headers: { authorization: `Bearer ${key}`, 'content-type': 'application/json' },
          body: JSON.stringify({ model: 'sim/lorem', max_tokens: 20, messages: [{ role: 'user', content: 'go' }], sim: { output_tokens: 5 } }),
        }).catch(() => null);
        if (!res) continue;
        const body = await res.json();
        results.push({
          status: res.status,
          code: body.error?.code,
          retryAfter: res.headers.get('retry-after'),
          id: res.headers.get('x-request-id') ?? undefined,
          phase,
          t: Date.now(),
        });
        await new Promise((r) => setTimeout(r, 20));
      }
    };
    const clients = [client(rich.key), client(rich.key), client(exact.key), client(exact.key)];
    await new Promise((r) => setTimeout(r, 1500));
    phase = 'down';
    const killedAt = Date.now();
    kill();
    await new Promise((r) => setTimeout(r, 4000));
    phase = 'restarting';
    await restart();
    const backAt = Date.now();
    phase = 'after';
    await new Promise((r) => setTimeout(r, 5000));
    running = false;
    await Promise.all(clients);

    // every answer is a success or a clean 503 naming the database, with retry-after
    const bad = results.filter(
      (r) => !(r.status === 200 || (r.status === 503 && ['database_unavailable', 'database_timeout'].includes(r.code!) && r.retryAfter === '2')),
    );
    expect(bad).toEqual([]);
    expect(results.filter((r) => r.phase === 'down' && r.status === 503).length).toBeGreaterThan(0);
    // it recovers by itself: the last second of requests all succeeded
    expect(
      results
        .filter((r) => r.phase === 'after')
        .slice(-8)
        .every((r) => r.status === 200),
    ).toBe(true);
    // no process needed a restart
    for (const p of [...stack.gateways, ...stack.workers, ...stack.metering]) expect(p.child.exitCode).toBeNull();
    // usage waited in JetStream: every answered request is debited exactly once
    const ok = results.filter((r) => r.status === 200).map((r) => r.id!);
    await stack.waitSettled(ok, 30000);
    const settledAt = Date.now();
    const count = (p: string, status: number) => results.filter((r) => r.phase === p && r.status === status).length;
    const first200After = results.find((r) => r.t >= backAt && r.status === 200);
    const first503 = results.find((r) => r.t >= killedAt && r.status === 503);
    console.log(
      `pg outage: first 503 ${first503 ? first503.t - killedAt : '-'} ms after the kill; down ${count('down', 200)}×200 ${count('down', 503)}×503; ` +
        `restart took ${backAt - killedAt - 4000} ms; first 200 ${first200After ? first200After.t - backAt : '-'} ms after PostgreSQL was back; ` +
        `after ${count('after', 200)}×200 ${count('after', 503)}×503; all ${ok.length} answers 200 settled once, ${settledAt - killedAt} ms after the kill`,
    );
    const { rows } = await stack.db.query(
      `select request_id, count(*)::int as n from ledger where request_id = any($1) group by request_id having count(*) <> 1`,
      [ok],
    );
    expect(rows).toEqual([]);
    await stack.waitNoHolds(rich.tenantId, 30000);
    await stack.waitNoHolds(exact.tenantId, 30000);
    expect(await ledgerCheck(stack.db)).toMatchObject({ ok: true });
  });

  it('the Pix reconciler resumes: a charge paid while the database was away is credited once when it returns', { timeout: 90000 }, async () => {
    const db = createPool(pg.url, 4, { connectTimeoutMs: 500 });
    const portal = await startPortal({ db, nc: null, reconcileIntervalMs: 300, env: { PIX_PROVIDER: 'simulator', CATRACA_DEV: '1' } });
    try {
      const t = await createTenant(db, 'pix-outage');
      const ch = await portal.pix.createTopUp(t.id, 12_340_000n);
      const secret = (await getSetting(db, SETTINGS.webhookSecret))!;
      kill();
      // The payer pays at the PSP while our database is away: the webhook cannot be applied.
      const paid = await portal.simulator!.pay(ch.txid);
      expect(paid.status).toBe(200);
      expect((paid.body as { delivered: boolean }).delivered).toBe(false);
      // while it is away the portal answers 503 with retry-after (the PSP delivers again), not a 500
      const page = await fetch(`${portal.url}/webhooks/pix/${secret}`, {
        method: 'POST',
        headers: { 'content-type': 'application/json' },
        body: JSON.stringify({ pix: [{ endToEndId: 'E99999999202611240000abcdefghijk', txid: ch.txid, valor: '12.34', horario: new Date().toISOString() }] }),
      });
      expect(page.status).toBe(503);
      expect(page.headers.get('retry-after')).toBe('5');
      expect(await page.text()).toBe('O serviço está indisponível por um momento. Tente de novo em alguns segundos.');
      await restart();
      const deadline = Date.now() + 20000;
      let balance = 0n;
      while (Date.now() < deadline) {
        balance = await db.query('select balance_micros from tenants where id = $1', [t.id]).then(
          (r) => r.rows[0].balance_micros as bigint,
          () => -1n,
        );
        if (balance === 12_340_000n) break;
        await new Promise((r) => setTimeout(r, 200));
      }
      expect(balance).toBe(12_340_000n);
      await new Promise((r) => setTimeout(r, 1000)); // more reconciler passes credit nothing more
      const credits = await db.query(`select amount_micros from ledger where tenant_id = $1 and kind = 'credit'`, [t.id]);
      expect(credits.rows).toEqual([{ amount_micros: 12_340_000n }]);
      expect((await db.query('select status from pix_charges where txid = $1', [ch.txid])).rows[0].status).toBe('CONCLUIDA');
      expect(await ledgerCheck(db)).toMatchObject({ ok: true });
    } finally {
      await portal.close();
      await db.end();
    }
  });

  it('pool exhaustion and a statement timeout are clear errors, not hangs', { timeout: 60000 }, async () => {
    const { classifyDbError } = await import('../src/db/pool.ts');
    const tiny = createPool(pg.url, 1, { connectTimeoutMs: 300, statementTimeoutMs: 200 });
    const holder = await tiny.connect();
    const t0 = Date.now();
    const exhausted = await tiny.query('select 1').then(
      () => null,
      (e) => e,
    );
    expect(Date.now() - t0).toBeLessThan(2000);
    expect(classifyDbError(exhausted)).toBe('unavailable');
    holder.release();
    const slow = await tiny.query('select pg_sleep(2)').then(
      () => null,
      (e) => e,
    );
    expect(classifyDbError(slow)).toBe('timeout');
    await tiny.end();
  });
});
