import { mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startStack, type TestStack } from './helpers/stack.ts';
import { embeddedPgDir, ensurePostgres, freePort, type ServiceHandle } from '../src/stack/services.ts';
import { ledgerCheck } from '../src/cli/ledger-check.ts';
import { createPool } from '../src/db/pool.ts';

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
    const results: Array<{ status: number; code?: string; retryAfter?: string | null; id?: string; phase: string }> = [];
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
        });
        await new Promise((r) => setTimeout(r, 20));
      }
    };
    const clients = [client(rich.key), client(rich.key), client(exact.key), client(exact.key)];
    await new Promise((r) => setTimeout(r, 1500));
    phase = 'down';
    kill();
    await new Promise((r) => setTimeout(r, 4000));
    phase = 'restarting';
    await restart();
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
    const { rows } = await stack.db.query(
      `select request_id, count(*)::int as n from ledger where request_id = any($1) group by request_id having count(*) <> 1`,
      [ok],
    );
    expect(rows).toEqual([]);
    await stack.waitNoHolds(rich.tenantId, 30000);
    await stack.waitNoHolds(exact.tenantId, 30000);
    expect(await ledgerCheck(stack.db)).toMatchObject({ ok: true });
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
