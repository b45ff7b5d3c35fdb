import http from 'node:http';
import type { AddressInfo } from 'node:net';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { VERSION } from '../version.ts';
import { InMemorySpanExporter, OtlpHttpExporter, parseOtlpHeaders, Tracer, tracerFromEnv } from './tracer.ts';

describe('Tracer', () => {
  it('a span continues the parent trace, a missing or invalid parent starts a new one', () => {
    const mem = new InMemorySpanExporter();
    const t = new Tracer('catraca-test', mem);
    const child = t.startSpan('job', { parent: '00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01', kind: 'consumer', attributes: { pool: 'sim' } });
    expect(child.traceId).toBe('4bf92f3577b34da6a3ce929d0e0e4736');
    expect(child.parentSpanId).toBe('00f067aa0ba902b7');
    expect(child.spanId).toMatch(/^[0-9a-f]{16}$/);
    expect(child.traceparent()).toBe(`00-4bf92f3577b34da6a3ce929d0e0e4736-${child.spanId}-01`);
    child
      .setAttributes({ n: 3, ok: true, none: undefined })
      .addLink(`00-${'a'.repeat(32)}-${'b'.repeat(16)}-01`)
      .addLink('garbage')
      .setStatus('error', 'boom');
    child.end();
    child.end(); // once
    child
      .setAttribute('late', 1)
      .addLink(`00-${'c'.repeat(32)}-${'d'.repeat(16)}-01`)
      .setStatus('ok'); // ignored once ended
    const root = t.startSpan('chat.completions', { parent: 'not-a-traceparent' });
    expect(root.parentSpanId).toBeNull();
    expect(root.traceId).not.toBe(child.traceId);
    root.end();
    expect(mem.spans.map((s) => [s.name, s.service, s.parentSpanId])).toEqual([
      ['job', 'catraca-test', '00f067aa0ba902b7'],
      ['chat.completions', 'catraca-test', null],
    ]);
    expect(mem.spans[0]).toMatchObject({
      kind: 'consumer',
      attributes: { pool: 'sim', n: 3, ok: true },
      links: [{ traceId: 'a'.repeat(32), spanId: 'b'.repeat(16) }],
      status: { code: 'error', message: 'boom' },
    });
    expect(mem.spans[0]!.endTime).toBeGreaterThanOrEqual(mem.spans[0]!.startTime);
    expect(mem.spans[0]!.attributes).toEqual({ pool: 'sim', n: 3, ok: true });
    expect(mem.spans[0]!.links).toHaveLength(1);
  });

  it('an unsampled parent is propagated but not exported; without an exporter nothing is recorded', () => {
    const mem = new InMemorySpanExporter();
    const s = new Tracer('x', mem).startSpan('job', { parent: '00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-00' });
    expect(s.traceparent()).toMatch(/-00$/);
    s.end();
    expect(mem.spans).toEqual([]);
    const off = new Tracer('x');
    expect(off.recording).toBe(false);
    off.startSpan('a').end();
  });

  it('tracerFromEnv: off unless an OTLP endpoint is set', () => {
    expect(tracerFromEnv('catraca-gateway', {}).exporter).toBeNull();
    const on = tracerFromEnv('catraca-gateway', { OTEL_EXPORTER_OTLP_ENDPOINT: 'http://collector:4318/', OTEL_EXPORTER_OTLP_HEADERS: 'api-key=s%3Dx, team=a' });
    expect(on.exporter).toBeInstanceOf(OtlpHttpExporter);
    expect((on.exporter as unknown as { opts: { url: string; headers: Record<string, string> } }).opts).toMatchObject({
      url: 'http://collector:4318/v1/traces',
      headers: { 'api-key': 's=x', team: 'a' },
    });
    void on.shutdown();
    const named = tracerFromEnv('catraca-gateway', { OTEL_EXPORTER_OTLP_TRACES_ENDPOINT: 'http://c/traces', OTEL_SERVICE_NAME: 'edge' });
    expect(named.serviceName).toBe('edge');
    expect((named.exporter as unknown as { opts: { url: string } }).opts.url).toBe('http://c/traces');
    void named.shutdown();
    expect(tracerFromEnv('x', { OTEL_EXPORTER_OTLP_ENDPOINT: 'http://c', OTEL_TRACES_EXPORTER: 'none' }).exporter).toBeNull();
    expect(parseOtlpHeaders(undefined)).toEqual({});
  });
});

describe('OtlpHttpExporter', () => {
  const bodies: Array<{ headers: http.IncomingHttpHeaders; url: string; body: any }> = [];
  let server: http.Server;
  let url: string;
  beforeAll(async () => {
    server = http.createServer((req, res) => {
      let data = '';
      req.on('data', (c) => (data += c));
      req.on('end', () => {
        bodies.push({ headers: req.headers, url: req.url!, body: JSON.parse(data) });
        res.writeHead(200, { 'content-type': 'application/json' });
        res.end('{}');
      });
    });
    await new Promise<void>((r) => server.listen(0, '127.0.0.1', r));
    url = `http://127.0.0.1:${(server.address() as AddressInfo).port}`;
  });
  afterAll(() => new Promise<void>((r) => server.close(() => r())));

  it('batches spans into OTLP/JSON ExportTraceServiceRequests at <endpoint>/v1/traces', async () => {
    const tracer = tracerFromEnv('catraca-worker', { OTEL_EXPORTER_OTLP_ENDPOINT: url, OTEL_EXPORTER_OTLP_HEADERS: 'authorization=Bearer%20t' });
    const exporter = tracer.exporter as OtlpHttpExporter;
    const parent = tracer.startSpan('job', {
      parent: '00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01',
      kind: 'consumer',
      attributes: { 'catraca.request_id': 'gen-1', tokens: 12, ratio: 0.5, ok: true },
    });
    parent.end();
    for (let i = 0; i < 4; i++) tracer.startSpan(`s${i}`).end();
    expect(bodies).toHaveLength(0); // nothing sent before the interval or a full batch
    await tracer.shutdown();
    expect(bodies).toHaveLength(1);
    expect(bodies[0]!.url).toBe('/v1/traces');
    expect(bodies[0]!.headers['content-type']).toBe('application/json');
    expect(bodies[0]!.headers.authorization).toBe('Bearer t');
    const rs = bodies[0]!.body.resourceSpans;
    expect(rs).toHaveLength(1);
    expect(rs[0].resource.attributes).toEqual([
      { key: 'service.name', value: { stringValue: 'catraca-worker' } },
      { key: 'service.version', value: { stringValue: VERSION } },
      { key: 'process.pid', value: { intValue: String(process.pid) } },
    ]);
    expect(rs[0].scopeSpans[0].scope).toEqual({ name: 'catraca', version: VERSION });
    const spans = rs[0].scopeSpans[0].spans;
    expect(spans.map((s: { name: string }) => s.name)).toEqual(['job', 's0', 's1', 's2', 's3']);
    expect(spans[0]).toEqual({
      traceId: '4bf92f3577b34da6a3ce929d0e0e4736',
      spanId: parent.spanId,
      parentSpanId: '00f067aa0ba902b7',
      flags: 1,
      name: 'job',
      kind: 5,
      startTimeUnixNano: expect.stringMatching(/^\d{19}$/),
      endTimeUnixNano: expect.stringMatching(/^\d{19}$/),
      attributes: [
        { key: 'catraca.request_id', value: { stringValue: 'gen-1' } },
        { key: 'tokens', value: { intValue: '12' } },
        { key: 'ratio', value: { doubleValue: 0.5 } },
        { key: 'ok', value: { boolValue: true } },
      ],
      links: [],
      status: { code: 0 },
    });
    expect(BigInt(spans[0].endTimeUnixNano) >= BigInt(spans[0].startTimeUnixNano)).toBe(true);
    expect(Math.abs(Number(BigInt(spans[0].startTimeUnixNano) / 1_000_000n) - Date.now())).toBeLessThan(5000);
    expect(spans[1].parentSpanId).toBeUndefined();
    expect(exporter.counts).toEqual({ exported: 5, dropped: 0, failed: 0 });
  });

  it('sends a full batch at once; a collector that is away costs the spans, never an error', async () => {
    bodies.length = 0;
    const exporter = new OtlpHttpExporter({ url: `${url}/v1/traces`, service: 's', maxBatch: 3, intervalMs: 60000 });
    const tracer = new Tracer('s', exporter);
    for (let i = 0; i < 3; i++) tracer.startSpan(`b${i}`).end();
    await exporter.flush();
    expect(bodies.map((b) => b.body.resourceSpans[0].scopeSpans[0].spans.length)).toEqual([3]);
    await exporter.shutdown();
    const away = new OtlpHttpExporter({ url: 'http://127.0.0.1:1/v1/traces', service: 's', maxQueue: 2, timeoutMs: 2000 });
    const t2 = new Tracer('s', away);
    for (let i = 0; i < 3; i++) t2.startSpan(`x${i}`).end();
    await away.shutdown();
    expect(away.counts).toEqual({ exported: 0, dropped: 1, failed: 2 });
  });
});
