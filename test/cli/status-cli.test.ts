// `catraca status` as the operator runs it: the real CLI as a child process (`node bin/catraca.js
// status`, stdout a pipe) against a nats-server and a PostgreSQL database of this file's own, so
// every figure it prints is known exactly.
import { execFile, spawn } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import type { NatsConnection } from 'nats';
import pg from 'pg';
import { afterAll, beforeAll, describe, expect, test } from 'vitest';
import { admit, credit, openLease } from '../../src/billing/ledger.ts';
import { connectBus } from '../../src/bus/connect.ts';
import { encode } from '../../src/bus/messages.ts';
import { createMetrics, registerMonitoring } from '../../src/bus/monitoring.ts';
import { publishToStream, RequestMux } from '../../src/bus/requests.ts';
import { subjects } from '../../src/bus/subjects.ts';
import { createApiKey } from '../../src/db/keys.ts';
import { upsertModel } from '../../src/db/models.ts';
import { migrate } from '../../src/db/migrate.ts';
import { createPool } from '../../src/db/pool.ts';
import { createTenant } from '../../src/db/tenants.ts';
import { ensureMeteringConsumer } from '../../src/metering/consumer.ts';
import { ensureNats, type ServiceHandle } from '../../src/stack/services.ts';

const ROOT = join(dirname(fileURLToPath(import.meta.url)), '..', '..');
const BIN = join(ROOT, 'bin', 'catraca.js');

interface Run {
  code: number;
  stdout: string;
  stderr: string;
}

/** The CLI with only these connection settings (no stack.json: cwd is an empty directory). */
function cli(args: string[], env: Record<string, string>): Promise<Run> {
  const base = { ...process.env } as Record<string, string | undefined>;
  delete base.NATS_URL;
  delete base.DATABASE_URL;
  return new Promise((resolve) => {
    execFile(process.execPath, [BIN, ...args], { cwd: emptyDir, env: { ...base, ...env } as NodeJS.ProcessEnv, timeout: 20000 }, (err, stdout, stderr) => {
      resolve({ code: err ? ((err as { code?: number }).code ?? 1) : 0, stdout, stderr });
    });
  });
}

let emptyDir: string;
let natsDir: string;
let nats: ServiceHandle;
let nc: NatsConnection;
let databaseUrl: string;
let adminUrl: string;
let dbName: string;
const stops: Array<() => Promise<void>> = [];

beforeAll(async () => {
  emptyDir = mkdtempSync(join(tmpdir(), 'catraca-status-cwd-'));
  natsDir = mkdtempSync(join(tmpdir(), 'catraca-status-nats-'));
  nats = await ensureNats({ dataDir: natsDir });
  nc = await connectBus(nats.url, 'status-cli-test');
  const u = new URL(process.env.DATABASE_URL!);
  dbName = `catraca_status_${Date.now()}_${randomBytes(3).toString('hex')}`;
  u.pathname = `/${dbName}`;
  databaseUrl = u.toString();
  u.pathname = '/postgres';
  adminUrl = u.toString();
  await migrate(databaseUrl); // creates the database
}, 60000);

afterAll(async () => {
  for (const s of stops) await s().catch(() => {});
  await nc?.drain().catch(() => {});
  await nats?.stop();
  const admin = new pg.Client({ connectionString: adminUrl });
  await admin.connect();
  await admin.query(`drop database if exists "${dbName}" with (force)`).catch(() => {});
  await admin.end();
  rmSync(natsDir, { recursive: true, force: true });
  rmSync(emptyDir, { recursive: true, force: true });
});

describe('catraca status (the CLI, piped)', () => {
  test('exit 1 when NATS cannot be reached', async () => {
    const r = await cli(['status'], { NATS_URL: 'nats://127.0.0.1:1' });
    expect(r.code).toBe(1);
    expect(r.stderr).toMatch(/^cannot reach NATS at nats:\/\/127\.0\.0\.1:1: /);
    expect(r.stdout).toBe('');
    const j = await cli(['status', '--json'], { NATS_URL: 'nats://127.0.0.1:1' });
    expect(j.code).toBe(1);
    expect(JSON.parse(j.stdout)).toMatchObject({ ok: false, nats: { ok: false, url: 'nats://127.0.0.1:1' } });
  });

  test('exit 1 when NATS answers but no catraca instance does', async () => {
    const r = await cli(['status', '--wait-ms', '300'], { NATS_URL: nats.url, DATABASE_URL: databaseUrl });
    expect(r.code).toBe(1);
    expect(r.stderr).toBe('catraca status: no catraca instance answered\n');
    expect(r.stdout).toContain('(no catraca instance answered on $SRV.STATS)');
    expect(r.stdout).toMatch(/^NATS {8}ok {2}nats:\/\/127\.0\.0\.1:\d+ {2}\(nats-server \S+, rtt [\d.]+ ms\)$/m);
    expect(r.stdout).toContain('Usage       the USAGE stream does not exist yet');
    expect(r.stdout).not.toContain('\x1b');
  });

  describe('with instances, a usage backlog, holds and leases', () => {
    const K = 7;
    beforeAll(async () => {
      // a front door with 2 jobs waiting for pool sim; a worker serving sim and openai
      const g = createMetrics();
      g.gauge('catraca_dispatch_waiting', 'waiting', { pool: 'sim' }).set(2);
      g.gauge('catraca_inflight', 'open').set(5);
      const w = createMetrics();
      w.gauge('catraca_inflight', 'jobs').set(4);
      w.gauge('catraca_worker_capacity', 'capacity').set(10);
      const extra = () => ({ pools: ['openai', 'sim'], inflight_by_pool: { sim: 3, openai: 1 }, capacity: 10 });
      stops.push((await registerMonitoring(nc, { name: 'catraca-gateway', version: '0.1.0', instanceId: 'st_gw', metrics: g })).stop);
      stops.push((await registerMonitoring(nc, { name: 'catraca-worker', version: '0.1.0', instanceId: 'st_wk', metrics: w, extra })).stop);
      // metering's consumer exists but metering is not running: K usage messages wait
      await ensureMeteringConsumer(nc, 10000, { replicas: 1, maxBytes: 1024 * 1024 });
      const mux = new RequestMux(nc);
      for (let i = 0; i < K; i++) await publishToStream(mux, subjects.usage('sim'), encode({ v: 1, request_id: `st-${i}` }), `st-${i}`, 5000);
      mux.close();
      // two open holds (R$ 0.001000 + R$ 0.002500) and one lease (R$ 0.005000)
      const db = createPool(databaseUrl, 1);
      try {
        const t = await createTenant(db, 'status');
        await credit(db, { tenantId: t.id, amountMicros: 1_000_000n, source: 'grant', note: 'test' });
        const k = await createApiKey(db, { tenantId: t.id, label: 'status' });
        for (const [id, amount] of [
          ['h1', 1000n],
          ['h2', 2500n],
        ] as const) {
          expect((await admit(db, { requestId: id, tenantId: t.id, keyId: k.record.id, min: amount, max: amount, ttlMs: 600000 })).status).toBe('ok');
        }
        expect((await openLease(db, { leaseId: 'l1', tenantId: t.id, keyId: k.record.id, amount: 5000n, richness: 1, ttlMs: 600000 })).status).toBe('ok');
        // one model registered before --context-length was required, one with it
        await upsertModel(db, { id: 'legacy/no-context', pool: 'sim', upstream_model: 'echo', input_price: 1n, output_price: 1n });
        await upsertModel(db, { id: 'new/with-context', pool: 'sim', upstream_model: 'echo', input_price: 1n, output_price: 1n, context_length: 8192 });
      } finally {
        await db.end();
      }
    }, 30000);

    test('--json: health, backlog, holds and leases, pools, instances — exact figures', async () => {
      const r = await cli(['status', '--json', '--wait-ms', '500'], { NATS_URL: nats.url, DATABASE_URL: databaseUrl });
      expect(r.stderr).toBe('');
      expect(r.code).toBe(0);
      expect(r.stdout.trim().split('\n')).toHaveLength(1);
      const doc = JSON.parse(r.stdout);
      expect(doc.ok).toBe(true);
      expect(doc.nats).toMatchObject({ ok: true, url: nats.url });
      expect(doc.postgres).toMatchObject({ ok: true, url: databaseUrl });
      expect(doc.usage).toEqual({ messages: K, pending: K, ack_pending: 0, stream_bytes: expect.any(Number), max_bytes: 1024 * 1024, retention: 'workqueue' });
      expect(doc.holds).toEqual({ holds: 2, held: '0.003500', leases: 1, leased: '0.005000' });
      expect(doc.models_without_context_length).toEqual(['legacy/no-context']);
      expect(doc.pools).toEqual([
        { pool: 'openai', workers: 1, inflight: 1, capacity: 10, waiting: 0 },
        { pool: 'sim', workers: 1, inflight: 3, capacity: 10, waiting: 2 },
      ]);
      expect(doc.instances.map((i: { service: string; instance: string }) => [i.service, i.instance])).toEqual([
        ['catraca-gateway', 'st_gw'],
        ['catraca-worker', 'st_wk'],
      ]);
    });

    test('piped text has no escape codes and shows every section', async () => {
      const r = await cli(['status', '--wait-ms', '500'], { NATS_URL: nats.url, DATABASE_URL: databaseUrl });
      expect(r.code).toBe(0);
      expect(r.stdout).not.toContain('\x1b');
      const lines = r.stdout.split('\n');
      expect(lines).toContain(
        `Usage       ${K} waiting to be settled (metering: ${K} pending, 0 unacknowledged); stream ${lines.join('\n').match(/stream (\d+) of/)![1]} of 1048576 bytes, retention workqueue`,
      );
      expect(lines).toContain('Holds       2 open, R$ 0.003500; leases 1 open, R$ 0.005000');
      expect(lines).toContain(
        'Catalog     1 model(s) without a context length (their prompt bounds are not capped; set it with model set --context-length): legacy/no-context',
      );
      expect(lines).toContain('POOL    WORKERS  IN-FLIGHT  CAPACITY  WAITING');
      expect(lines).toContain('openai        1          1        10        0');
      expect(lines).toContain('sim           1          3        10        2');
      expect(lines.some((l) => /^PostgreSQL {2}ok {2}postgres:\/\/.* {2}\(rtt [\d.]+ ms\)$/.test(l))).toBe(true);
      expect(lines.some((l) => /^gateway\s+st_gw\s/.test(l))).toBe(true);
    });

    test('--watch into a pipe: plain refreshes (no screen clearing), until SIGINT, exit 0', async () => {
      const base = { ...process.env } as Record<string, string | undefined>;
      delete base.DATABASE_URL;
      const child = spawn(process.execPath, [BIN, 'status', '--watch', '--wait-ms', '200'], {
        cwd: emptyDir,
        env: { ...base, NATS_URL: nats.url, DATABASE_URL: databaseUrl } as NodeJS.ProcessEnv,
        stdio: ['ignore', 'pipe', 'pipe'],
      });
      let out = '';
      child.stdout.on('data', (d) => (out += d));
      const exited = new Promise<number | null>((r) => child.on('exit', (code) => r(code)));
      const deadline = Date.now() + 15000;
      while ((out.match(/^Holds /gm) ?? []).length < 2 && Date.now() < deadline) await new Promise((r) => setTimeout(r, 100));
      child.kill('SIGINT');
      expect(await exited).toBe(0);
      expect((out.match(/^Holds /gm) ?? []).length).toBeGreaterThanOrEqual(2);
      expect(out).not.toContain('\x1b');
      expect(out).toMatch(/^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z$/m); // each refresh starts with its time
    });

    test('exit 1 when PostgreSQL does not answer (the rest still shown)', async () => {
      const r = await cli(['status', '--json', '--wait-ms', '300'], { NATS_URL: nats.url, DATABASE_URL: 'postgres://postgres@127.0.0.1:1/nothing' });
      expect(r.code).toBe(1);
      expect(r.stderr).toBe('catraca status: PostgreSQL does not answer\n');
      const doc = JSON.parse(r.stdout);
      expect(doc).toMatchObject({ ok: false, nats: { ok: true }, postgres: { ok: false, url: 'postgres://postgres@127.0.0.1:1/nothing' }, holds: null });
      expect(doc.usage.messages).toBe(K);
      expect(doc.instances).toHaveLength(2);
    });
  });
});
