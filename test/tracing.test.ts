// Traces across the three processes of a request (src/tracing): the front door's
// `chat.completions` span, the worker's `job` span and metering's `settle` span share one trace
// id and link parent to child through the `traceparent` NATS headers (job message, first frame,
// usage message). The trace starts at the front door: a client's `traceparent` is a link of its
// span, never its parent (a client can neither hide its request from our traces nor splice it into
// another trace). The three run in this process, each with its own tracer (its service name),
// all ending in one in-memory exporter; NATS is a nats-server of this file's own, PostgreSQL the
// run's database. The client is the official openai package.
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import type { NatsConnection } from 'nats';
import OpenAI from 'openai';
import type pg from 'pg';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { credit } from '../src/billing/ledger.ts';
import { connectBus } from '../src/bus/connect.ts';
import { loadConfig } from '../src/config.ts';
import { createApiKey } from '../src/db/keys.ts';
import { createPool } from '../src/db/pool.ts';
import { createTenant } from '../src/db/tenants.ts';
import { startGateway, type Gateway } from '../src/gateway/server.ts';
import { startMetering, type Metering } from '../src/metering/consumer.ts';
import { ensureNats, type ServiceHandle } from '../src/stack/services.ts';
import { InMemorySpanExporter, Tracer, type FinishedSpan } from '../src/tracing/tracer.ts';
import { startWorker, type WorkerHandle } from '../workers/worker.ts';
import { seedSimCatalog } from './helpers/stack.ts';

const exporter = new InMemorySpanExporter();
let nats: ServiceHandle;
let natsDir: string;
let nc: NatsConnection;
let db: pg.Pool;
let gateway: Gateway;
let worker: WorkerHandle;
let metering: Metering;
let client: OpenAI;
let key: string;

beforeAll(async () => {
  natsDir = mkdtempSync(join(tmpdir(), 'catraca-tracing-'));
  nats = await ensureNats({ dataDir: natsDir });
  nc = await connectBus(nats.url, 'tracing-test');
  db = createPool(process.env.DATABASE_URL!, 10);
  await seedSimCatalog(db);
  const config = loadConfig({ ...process.env, NATS_URL: nats.url, GATEWAY_HOST: '127.0.0.1', GATEWAY_PORT: '0', METRICS_PORT: '' });
  metering = await startMetering({
    nc,
    db,
    lingerMs: 5,
    sweepIntervalMs: 60000,
    tracer: new Tracer('catraca-metering', exporter),
    instanceId: 'trace-metering',
  });
  worker = await startWorker({ config, pools: ['sim'], nc, id: 'trace_worker', tracer: new Tracer('catraca-worker', exporter) });
  gateway = await startGateway({ config, db, nc, doorId: 'trace_door', tracer: new Tracer('catraca-gateway', exporter) });
  const t = await createTenant(db, `tracing-${Date.now()}`);
  await credit(db, { tenantId: t.id, amountMicros: 10_000_000n, source: 'grant', note: 'test' });
  key = (await createApiKey(db, { tenantId: t.id, label: 'tracing' })).key;
  client = new OpenAI({ baseURL: `http://127.0.0.1:${gateway.port}/v1`, apiKey: key, maxRetries: 0 });
}, 60000);

afterAll(async () => {
  await gateway?.close(1000);
  await worker?.stop();
  await metering?.stop();
  await nc?.drain().catch(() => {});
  await db?.end();
  await nats?.stop();
  rmSync(natsDir, { recursive: true, force: true });
});

/** The spans of one request, once metering's has ended (it is the last). */
async function spansOf(requestId: string): Promise<FinishedSpan[]> {
  const deadline = Date.now() + 10000;
  const mine = () => exporter.spans.filter((s) => s.attributes['catraca.request_id'] === requestId);
  while (Date.now() < deadline && !mine().some((s) => s.name === 'settle')) await new Promise((r) => setTimeout(r, 50));
  await new Promise((r) => setTimeout(r, 200)); // nothing more may arrive
  return mine();
}

function chain(spans: FinishedSpan[]) {
  const by = (service: string) => {
    const found = spans.filter((s) => s.service === service);
    expect(found, service).toHaveLength(1); // exactly one span per request per process
    return found[0]!;
  };
  return { gw: by('catraca-gateway'), wk: by('catraca-worker'), mt: by('catraca-metering') };
}

describe('a request is one trace across gateway → worker → metering', () => {
  it("starts a new trace at the edge with the client's traceparent as a link; parents link span to span; the worker's first frame is a link too", async () => {
    const traceId = '0af7651916cd43dd8448eb211c80319c';
    const clientSpan = 'b7ad6b7169203331';
    const res = await client.chat.completions
      .create({ model: 'sim/echo', messages: [{ role: 'user', content: 'um dois três' }] }, { headers: { traceparent: `00-${traceId}-${clientSpan}-01` } })
      .withResponse();
    expect(res.data.choices[0]!.message.content).toBe('um dois três');
    const requestId = res.response.headers.get('x-request-id')!;
    const { gw, wk, mt } = chain(await spansOf(requestId));
    expect(gw.traceId).toMatch(/^[0-9a-f]{32}$/);
    expect(gw.traceId).not.toBe(traceId);
    expect([wk.traceId, mt.traceId]).toEqual([gw.traceId, gw.traceId]);
    expect(gw.parentSpanId).toBeNull();
    expect(wk.parentSpanId).toBe(gw.spanId);
    expect(mt.parentSpanId).toBe(wk.spanId);
    expect(new Set([gw.spanId, wk.spanId, mt.spanId, clientSpan]).size).toBe(4);
    expect(gw.links).toEqual([
      { traceId, spanId: clientSpan },
      { traceId: gw.traceId, spanId: wk.spanId },
    ]);
    expect(exporter.spans.some((s) => s.traceId === traceId)).toBe(false);
    expect([gw.name, gw.kind, wk.name, wk.kind, mt.name, mt.kind]).toEqual(['chat.completions', 'server', 'job', 'consumer', 'settle', 'consumer']);
    expect(gw.attributes).toMatchObject({ 'http.response.status_code': 200, 'catraca.model': 'sim/echo', 'catraca.pool': 'sim' });
    expect(wk.attributes['catraca.worker']).toBe('trace_worker');
    expect(wk.attributes).toMatchObject({
      'catraca.outcome': 'completed',
      'catraca.prompt_tokens': res.data.usage!.prompt_tokens,
      'catraca.completion_tokens': 3,
    });
    expect(mt.attributes).toMatchObject({ 'catraca.settle_status': 'settled', 'catraca.redelivered': false });
    expect([gw.status, wk.status, mt.status]).toEqual([{ code: 'unset' }, { code: 'unset' }, { code: 'unset' }]);
    // causality in time: the worker's span lies within the gateway's; metering settles after the job
    expect(wk.startTime).toBeGreaterThanOrEqual(gw.startTime);
    expect(wk.endTime).toBeLessThanOrEqual(gw.endTime + 5);
    expect(mt.startTime).toBeGreaterThanOrEqual(wk.startTime);
  });

  it('without a traceparent the gateway starts the trace; a long stream is still one span per process, never one per token', async () => {
    const stream = await client.chat.completions.create({
      model: 'sim/lorem',
      stream: true,
      messages: [{ role: 'user', content: 'lorem' }],
      // the sim's knobs: 60 output tokens
      ...({ sim: { output_tokens: 60 } } as object),
    });
    let chunks = 0;
    let requestId = '';
    for await (const chunk of stream) {
      requestId = chunk.id;
      if (chunk.choices[0]?.delta?.content) chunks++;
    }
    expect(chunks).toBe(60);
    const spans = await spansOf(requestId);
    expect(spans).toHaveLength(3);
    const { gw, wk, mt } = chain(spans);
    expect(gw.parentSpanId).toBeNull();
    expect(gw.traceId).toMatch(/^[0-9a-f]{32}$/);
    expect([wk.traceId, mt.traceId]).toEqual([gw.traceId, gw.traceId]);
    expect([wk.parentSpanId, mt.parentSpanId]).toEqual([gw.spanId, wk.spanId]);
    expect(wk.attributes['catraca.completion_tokens']).toBe(60);
  });

  it('an invalid client traceparent starts a new trace with no link; an unsampled one cannot switch our tracing off: recorded, linked', async () => {
    const bad = await client.chat.completions
      .create({ model: 'sim/echo', messages: [{ role: 'user', content: 'x' }] }, { headers: { traceparent: 'nonsense' } })
      .withResponse();
    const { gw } = chain(await spansOf(bad.response.headers.get('x-request-id')!));
    expect(gw.parentSpanId).toBeNull();
    expect(gw.links.filter((l) => l.traceId !== gw.traceId)).toEqual([]);

    const unsampled = '1af7651916cd43dd8448eb211c80319c';
    const off = await client.chat.completions
      .create({ model: 'sim/echo', messages: [{ role: 'user', content: 'y' }] }, { headers: { traceparent: `00-${unsampled}-c7ad6b7169203331-00` } })
      .withResponse();
    const spans = await spansOf(off.response.headers.get('x-request-id')!);
    const { gw: g2, wk, mt } = chain(spans);
    expect(g2.traceId).not.toBe(unsampled);
    expect(g2.traceFlags).toBe(1);
    expect([wk.traceId, mt.traceId]).toEqual([g2.traceId, g2.traceId]);
    expect(g2.links[0]).toEqual({ traceId: unsampled, spanId: 'c7ad6b7169203331' });
    expect(exporter.spans.some((s) => s.traceId === unsampled)).toBe(false);
  });
});
