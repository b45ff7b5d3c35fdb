// The USAGE stream never drops unsettled usage (src/bus/usage-stream.ts): work-queue retention,
// discard new at USAGE_MAX_BYTES, no age limit; a backlog alarm while metering is away; metering
// settles everything exactly once when it is back. Real nats-server (one of this file's own) and
// PostgreSQL.
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { DiscardPolicy, RetentionPolicy, StorageType, type NatsConnection } from 'nats';
import type pg from 'pg';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { connectBus } from '../src/bus/connect.ts';
import { encode, type UsageMessage } from '../src/bus/messages.ts';
import { PublishRefused, publishToStream, RequestMux } from '../src/bus/requests.ts';
import { METERING_DURABLE, subjects, USAGE_STREAM } from '../src/bus/subjects.ts';
import { ensureUsageStream, usageBacklog, usageStreamConfig, watchUsageBacklog } from '../src/bus/usage-stream.ts';
import { credit } from '../src/billing/ledger.ts';
import { costMicros } from '../src/billing/money.ts';
import { createApiKey } from '../src/db/keys.ts';
import { createPool } from '../src/db/pool.ts';
import { createTenant } from '../src/db/tenants.ts';
import { configureLogging } from '../src/log.ts';
import { startMetering } from '../src/metering/consumer.ts';
import { createMetrics } from '../src/metrics/registry.ts';
import { ensureNats, type ServiceHandle } from '../src/stack/services.ts';

const MAX_BYTES = 64 * 1024;
let nats: ServiceHandle;
let dir: string;
let nc: NatsConnection;
let db: pg.Pool;
const logLines: Array<Record<string, unknown>> = [];

beforeAll(async () => {
  dir = mkdtempSync(join(tmpdir(), 'catraca-usage-'));
  nats = await ensureNats({ dataDir: dir });
  nc = await connectBus(nats.url, 'usage-stream-test');
  db = createPool(process.env.DATABASE_URL!, 4);
  configureLogging({ format: 'json', write: (line) => logLines.push(JSON.parse(line)) });
});
afterAll(async () => {
  configureLogging({ format: 'json', write: (line) => process.stderr.write(line + '\n') });
  await nc?.drain().catch(() => {});
  await db?.end();
  await nats?.stop();
  rmSync(dir, { recursive: true, force: true });
});

function usage(i: number, tenantId: string, keyId: string): UsageMessage {
  return {
    v: 1,
    request_id: `req-usage-${i}-${tenantId}`,
    tenant_id: tenantId,
    key_id: keyId,
    model: 'sim/echo',
    pool: 'sim',
    input_price: '1000000',
    output_price: '2000000',
    prompt_tokens: 10 + i,
    completion_tokens: 100 + i,
    estimated: false,
    outcome: 'completed',
    ended_at: Date.now(),
    worker: 'wrk_test',
  };
}

describe('the USAGE stream while metering is away', () => {
  it('keeps every message until settled: a full stream refuses new usage instead of dropping old; the alarm fires; metering then settles each exactly once', {
    timeout: 60000,
  }, async () => {
    // the stream, as metering creates it
    expect(await ensureUsageStream(nc, { replicas: 1, maxBytes: MAX_BYTES })).toEqual({ action: 'created', replicas: 1 });
    expect(await ensureUsageStream(nc, { replicas: 1, maxBytes: MAX_BYTES })).toEqual({ action: 'unchanged', replicas: 1 });
    const jsm = await nc.jetstreamManager();
    const info = await jsm.streams.info(USAGE_STREAM);
    expect(info.config).toMatchObject({
      subjects: [subjects.usageWildcard],
      retention: RetentionPolicy.Workqueue,
      discard: DiscardPolicy.New,
      storage: StorageType.File,
      max_bytes: MAX_BYTES,
      max_msgs: -1,
      max_age: 0,
      duplicate_window: 120e9,
      num_replicas: 1,
    });
    expect(usageStreamConfig(1, MAX_BYTES)).toMatchObject({ retention: RetentionPolicy.Workqueue, discard: DiscardPolicy.New, max_age: 0 });

    const t = await createTenant(db, `usage-${Date.now()}`);
    await credit(db, { tenantId: t.id, amountMicros: 1_000_000_000n, source: 'grant', note: 'test' });
    const k = await createApiKey(db, { tenantId: t.id, label: 'usage' });

    // metering is not running: publish until the stream is full
    const mux = new RequestMux(nc);
    const stored: UsageMessage[] = [];
    let refused: unknown;
    for (let i = 0; i < 1000 && !refused; i++) {
      const u = usage(i, t.id, k.record.id);
      try {
        const ack = await publishToStream(mux, subjects.usage('sim'), encode(u), u.request_id, 5000);
        expect(ack).toEqual({ seq: i + 1, duplicate: false });
        stored.push(u);
      } catch (err) {
        refused = err;
      }
    }
    expect(refused).toBeInstanceOf(PublishRefused);
    expect((refused as PublishRefused).message).toMatch(/maximum bytes exceeded/i);
    const N = stored.length;
    expect(N).toBeGreaterThan(50); // ~64 KiB of ~500-byte messages
    expect(N).toBeLessThan(1000);
    // nothing was dropped to make room: messages 1..N are all there, the first one intact
    const full = await jsm.streams.info(USAGE_STREAM);
    expect(full.state).toMatchObject({ messages: N, first_seq: 1, last_seq: N });
    expect(full.state.bytes).toBeLessThanOrEqual(MAX_BYTES);
    expect(JSON.parse(new TextDecoder().decode((await jsm.streams.getMessage(USAGE_STREAM, { seq: 1 })).data)).request_id).toBe(stored[0]!.request_id);

    // the backlog alarm, as metering (or `catraca status`) sees it with metering away
    const metrics = createMetrics();
    const watch = watchUsageBacklog(nc, { threshold: 50, intervalMs: 60000, metrics });
    const b = await watch.check();
    watch.stop();
    expect(b).toEqual({
      messages: N,
      pending: null,
      ackPending: null,
      streamMessages: N,
      streamBytes: full.state.bytes,
      maxBytes: MAX_BYTES,
      retention: 'workqueue',
    });
    expect(metrics.snapshot().gauges).toEqual({
      catraca_usage_backlog_messages: N,
      catraca_usage_backlog_alarm: 1,
      catraca_usage_stream_bytes: full.state.bytes,
      catraca_usage_stream_max_bytes: MAX_BYTES,
    });
    const alarm = logLines.filter((l) => l.level === 'error' && String(l.msg).startsWith('usage backlog above USAGE_BACKLOG_ALARM'));
    expect(alarm).toHaveLength(1);
    expect(alarm[0]).toMatchObject({ backlog: N, threshold: 50 });

    // a worker retries the refused publish (as publishUsage does) while metering comes back
    const late = usage(N, t.id, k.record.id);
    const retried = (async () => {
      for (let attempt = 1; ; attempt++) {
        try {
          return { ack: await publishToStream(mux, subjects.usage('sim'), encode(late), late.request_id, 5000), attempt };
        } catch (err) {
          if (!(err instanceof PublishRefused)) throw err;
          await new Promise((r) => setTimeout(r, 100));
        }
      }
    })();

    logLines.length = 0;
    const metering = await startMetering({
      nc,
      db,
      lingerMs: 5,
      sweepIntervalMs: 60000,
      stream: { replicas: 1, maxBytes: MAX_BYTES },
      backlogAlarm: 50,
      backlogIntervalMs: 200,
      instanceId: 'usage-test',
    });
    try {
      // at start it saw the backlog (≥ N: the retried publish may already be in) and said so at error level
      const startAlarm = logLines.find((l) => l.level === 'error' && String(l.msg).startsWith('usage backlog above'));
      expect(startAlarm?.backlog).toBeGreaterThanOrEqual(N);
      const { ack, attempt } = await retried;
      expect(ack.duplicate).toBe(false);
      expect(attempt).toBeGreaterThan(1);
      const all = [...stored, late];
      const ids = all.map((u) => u.request_id);
      const deadline = Date.now() + 20000;
      let n = 0;
      while (Date.now() < deadline) {
        n = (await db.query('select count(*)::int as n from ledger where request_id = any($1)', [ids])).rows[0].n;
        if (n === all.length) break;
        await new Promise((r) => setTimeout(r, 100));
      }
      expect(n).toBe(N + 1);
      // settled exactly once each: one debit row per request, the exact cost, the balance to the micro-real
      const { rows } = await db.query(`select request_id, amount_micros from ledger where tenant_id = $1 and kind = 'debit' order by request_id`, [t.id]);
      expect(rows.length).toBe(N + 1);
      const cost = (u: UsageMessage) => costMicros(u.prompt_tokens, u.completion_tokens, { input: 1_000_000n, output: 2_000_000n });
      expect(new Map(rows.map((r) => [r.request_id, r.amount_micros]))).toEqual(new Map(all.map((u) => [u.request_id, cost(u)])));
      const total = all.reduce((s, u) => s + cost(u), 0n);
      expect((await db.query('select balance_micros from tenants where id = $1', [t.id])).rows[0].balance_micros).toBe(1_000_000_000n - total);
      // the stream is empty (work queue: acked messages leave it), the consumer has nothing pending
      await new Promise((r) => setTimeout(r, 500));
      expect(await usageBacklog(nc)).toMatchObject({ messages: 0, pending: 0, ackPending: 0, streamMessages: 0 });
      expect(metering.stats()).toMatchObject({ settled: N + 1, duplicates: 0, failures: 0, poison: 0 });
      expect(metering.metrics.snapshot().counters['catraca_usage_settled_total{status="settled"}']).toBe(N + 1);
      // the alarm cleared
      expect(metering.metrics.snapshot().gauges).toMatchObject({ catraca_usage_backlog_messages: 0, catraca_usage_backlog_alarm: 0 });
      expect(logLines.some((l) => l.level === 'info' && l.msg === 'usage backlog back under USAGE_BACKLOG_ALARM')).toBe(true);
      // a redelivered or republished usage message within the duplicate window is no second debit
      const again = await publishToStream(mux, subjects.usage('sim'), encode(stored[0]), stored[0]!.request_id, 5000);
      expect(again.duplicate).toBe(true);
    } finally {
      await metering.stop();
      mux.close();
    }
    expect((await jsm.consumers.info(USAGE_STREAM, METERING_DURABLE)).num_pending).toBe(0);
  });

  it('an existing stream with limits retention is left as it is, with an error naming the migration', async () => {
    const jsm = await nc.jetstreamManager();
    await jsm.streams.delete(USAGE_STREAM);
    await jsm.streams.add({
      name: USAGE_STREAM,
      subjects: [subjects.usageWildcard],
      retention: RetentionPolicy.Limits,
      discard: DiscardPolicy.Old,
      max_age: 7 * 24 * 3600e9,
      storage: StorageType.File,
    });
    logLines.length = 0;
    expect(await ensureUsageStream(nc, { replicas: 1, maxBytes: MAX_BYTES })).toEqual({ action: 'retention_mismatch', replicas: 1 });
    const info = await jsm.streams.info(USAGE_STREAM);
    expect(info.config).toMatchObject({ retention: RetentionPolicy.Limits, discard: DiscardPolicy.Old, max_age: 7 * 24 * 3600e9 });
    const err = logLines.filter((l) => l.level === 'error');
    expect(err).toHaveLength(1);
    expect(err[0]).toMatchObject({ retention: 'limits', wanted_retention: 'workqueue' });
    expect(String(err[0]!.msg)).toContain('nats stream rm USAGE');
  });
});
