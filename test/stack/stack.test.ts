// The `npm start` path as a library: services, migrations, seed, children, state file, stop.
import { existsSync, mkdtempSync, readFileSync, rmSync, statSync } from 'node:fs';
import { networkInterfaces, tmpdir } from 'node:os';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import OpenAI from 'openai';
import { afterAll, beforeAll, describe, expect, test } from 'vitest';
import { createPool } from '../../src/db/pool.ts';
import { startStack, type RunningStack } from '../../src/stack/main.ts';
import { DEMO_TENANT_ID } from '../../src/stack/seed.ts';
import { freePort, natsReachable, tcpReachable } from '../../src/stack/services.ts';
import { stateFile } from '../../src/stack/state.ts';
import { ownDatabase } from '../helpers/own-database.ts';
import { PortalClient } from '../portal/client.ts';

const ROOT = join(dirname(fileURLToPath(import.meta.url)), '..', '..');
const db = createPool(process.env.DATABASE_URL!, 2);
afterAll(() => db.end());

describe('startStack without children', () => {
  test('migrates, seeds idempotently, rotates the demo key, writes and removes stack.json', async () => {
    const root = mkdtempSync(join(tmpdir(), 'catraca-root-'));
    try {
      const run = () => startStack({ root, natsUrl: '', databaseUrl: process.env.DATABASE_URL, processes: [], gatewayPort: 1, portalPort: 2 });
      const a = await run();
      const state = JSON.parse(readFileSync(stateFile(root), 'utf8'));
      expect(state).toEqual({
        database_url: process.env.DATABASE_URL,
        nats_url: a.urls.nats_url,
        base_url: 'http://127.0.0.1:1/v1',
        portal_url: null,
        console_url: null,
        pid: process.pid,
        started_at: expect.any(String),
      });
      expect(statSync(stateFile(root)).mode & 0o777).toBe(0o600);
      expect(JSON.stringify(state)).not.toContain('sk-cat');
      expect(a.embedded).toEqual({ nats: true, postgres: false });
      expect(a.demo.key).toMatch(/^sk-cat-v1-[0-9a-f]{64}$/);
      // A second stack from the same checkout is refused while the first runs.
      await expect(run()).rejects.toThrow(/already running/);
      await a.stop();
      expect(existsSync(stateFile(root))).toBe(false);
      expect(await natsReachable(a.urls.nats_url)).toBe(false);

      const b = await run();
      await b.stop();
      const { rows: tenant } = await db.query('select name, balance_micros from tenants where id = $1', [DEMO_TENANT_ID]);
      expect(tenant).toEqual([{ name: 'Demo', balance_micros: 100_000_000n }]); // granted once
      const { rows: grants } = await db.query(`select count(*)::int as n from ledger where external_id = 'seed:demo-grant'`);
      expect(grants[0].n).toBe(1);
      const { rows: keys } = await db.query(
        `select id, label, is_demo, revoked_at is null as live from api_keys where tenant_id = $1 and id = any($2) order by created_at`,
        [DEMO_TENANT_ID, [a.demo.keyId, b.demo.keyId]],
      );
      expect(keys).toEqual([
        { id: a.demo.keyId, label: 'demo', is_demo: true, live: false },
        { id: b.demo.keyId, label: 'demo', is_demo: true, live: true },
      ]);
      const { rows: live } = await db.query(`select count(*)::int as n from api_keys where tenant_id = $1 and is_demo and revoked_at is null`, [
        DEMO_TENANT_ID,
      ]);
      expect(live[0].n).toBe(1);
      const { rows: models } = await db.query(
        `select id, pool, upstream_model, input_price, output_price, max_output_tokens from models where id like 'sim/%' order by id`,
      );
      expect(models).toEqual([
        { id: 'sim/echo', pool: 'sim', upstream_model: 'echo', input_price: 1_000_000n, output_price: 2_000_000n, max_output_tokens: 4096 },
        { id: 'sim/embed', pool: 'sim', upstream_model: 'embed', input_price: 100_000n, output_price: 0n, max_output_tokens: 4096 },
        { id: 'sim/lorem', pool: 'sim', upstream_model: 'lorem', input_price: 500_000n, output_price: 1_500_000n, max_output_tokens: 4096 },
      ]);
    } finally {
      rmSync(root, { recursive: true, force: true });
    }
  });
});

describe('startStack runs the portal in development mode (npm start, as for a new user)', () => {
  test('the portal gets CATRACA_DEV=1 and 127.0.0.1: the simulator and its pay button work, on loopback only', async () => {
    const portalPort = await freePort();
    const portalMetricsPort = await freePort();
    // A database and a nats-server of its own: this portal runs a notifier, which would otherwise
    // claim other test files' deliveries from the shared database.
    const own = await ownDatabase('portal');
    const ownDb = createPool(own.url, 2);
    const stack = await startStack({
      root: ROOT,
      natsUrl: '',
      databaseUrl: own.url,
      portalPort,
      metricsPorts: { portal: portalMetricsPort },
      processes: ['portal'],
      writeState: false,
      dataDir: mkdtempSync(join(tmpdir(), 'catraca-stack-')),
      // Every client of the test run signs up from 127.0.0.1 (one database for the run).
      env: { PORTAL_SIGNUP_LIMIT_PER_HOUR: '1000' },
      output: () => {},
    });
    try {
      expect(stack.ready).toBe(true);
      expect(stack.urls.portal_url).toBe(`http://127.0.0.1:${portalPort}`);
      const ext = Object.values(networkInterfaces())
        .flat()
        .find((i) => i && i.family === 'IPv4' && !i.internal);
      if (ext) expect(await tcpReachable(ext.address, portalPort, 1000)).toBe(false);
      const c = new PortalClient(stack.urls.portal_url!);
      expect((await c.signUp(`dev.${Date.now()}@example.com`)).status).toBe(303);
      // npm start issues notas fiscais (the Sefin simulator): the first top-up waits for Dados fiscais
      expect((await c.post('/topup', { _csrf: await c.csrfOf('/topup'), amount: '50,00' })).status).toBe(409);
      const fiscal = {
        document: '529.982.247-25',
        name: 'Dev',
        cep: '01310-100',
        street: 'Avenida Paulista',
        number: '1000',
        district: 'Bela Vista',
        city_code: '3550308',
        uf: 'SP',
      };
      expect((await c.post('/dados-fiscais', { _csrf: await c.csrfOf('/dados-fiscais'), ...fiscal })).status).toBe(303);
      const topup = await c.post('/topup', { _csrf: await c.csrfOf('/topup'), amount: '50,00' });
      expect(topup.status).toBe(303);
      const charge = await c.get(topup.location!);
      expect(charge.text).toContain('data-testid="dev-pay"');
      expect(charge.text).toContain('Pagar com o simulador (desenvolvimento)');
      expect((await c.post(`${topup.location}/simulate`, { _csrf: PortalClient.csrf(charge.text) })).status).toBe(303);
      expect(JSON.parse((await c.get(`${topup.location}/status`)).text)).toMatchObject({ status: 'CONCLUIDA', balance_micros: '50000000' });
      const { rows } = await ownDb.query(`select id from models where id like 'sim/%' order by id`);
      expect(rows.map((r) => r.id)).toEqual(['sim/echo', 'sim/embed', 'sim/lorem']);
      // the portal's own /metrics, on its internal port: each answered request counted once
      expect(stack.metricsPorts).toEqual({ portal: portalMetricsPort });
      const ok200 = async () => seriesValue(await scrape(portalMetricsPort), 'catraca_http_responses_total', 'status="200"');
      const before = await ok200();
      for (let i = 0; i < 4; i++) expect((await fetch(`${stack.urls.portal_url}/healthz`)).status).toBe(200);
      expect((await ok200()) - before).toBe(4);
      const text = await scrape(portalMetricsPort);
      for (const name of PROCESS_METRICS) expect(text).toMatch(new RegExp(`^# TYPE ${name} `, 'm'));
      // never on the public port (there /metrics is just an unknown page: a redirect to sign-in)
      const pub = await fetch(`${stack.urls.portal_url}/metrics`, { redirect: 'manual' });
      expect(pub.status).not.toBe(200);
      expect(await pub.text()).not.toContain('# TYPE');
    } finally {
      await stack.stop();
      await ownDb.end();
      await own.drop();
    }
  }, 60000);

  test('PORTAL_HOST=0.0.0.0 with dev mode stops npm start with the reason, before anything starts', async () => {
    await expect(
      startStack({
        root: ROOT,
        databaseUrl: process.env.DATABASE_URL,
        processes: ['portal'],
        writeState: false,
        portalPort: await freePort(),
        env: { PORTAL_HOST: '0.0.0.0' },
      }),
    ).rejects.toThrow('the portal would listen on 0.0.0.0 with the Pix simulator');
  });
});

/** Prometheus text of a process's internal /metrics. */
async function scrape(port: number): Promise<string> {
  const res = await fetch(`http://127.0.0.1:${port}/metrics`);
  expect(res.status).toBe(200);
  expect(res.headers.get('content-type')).toBe('text/plain; version=0.0.4');
  return res.text();
}
/** Sum of the series of `name` whose labels contain `label` (every series without one). */
function seriesValue(text: string, name: string, label = ''): number {
  let sum = 0;
  for (const line of text.split('\n')) {
    const m = /^([a-zA-Z_:][a-zA-Z0-9_:]*)(\{[^}]*\})? (\S+)$/.exec(line);
    if (m && m[1] === name && (m[2] ?? '').includes(label)) sum += Number(m[3]);
  }
  return sum;
}
const PROCESS_METRICS = [
  'process_cpu_seconds_total',
  'process_resident_memory_bytes',
  'process_start_time_seconds',
  'process_open_fds',
  'nodejs_heap_size_used_bytes',
  'nodejs_eventloop_lag_seconds',
  'nodejs_version_info',
  'catraca_build_info',
];

describe('startStack with gateway, worker and metering', () => {
  let stack: RunningStack;
  const lines: string[] = [];
  beforeAll(async () => {
    stack = await startStack({
      root: ROOT,
      natsUrl: '', // a nats-server of its own: never share jobs with other test files
      databaseUrl: process.env.DATABASE_URL,
      gatewayPort: await freePort(),
      metricsPorts: { gateway: await freePort(), worker: await freePort(), metering: await freePort() },
      processes: ['gateway', 'worker', 'metering'],
      writeState: false,
      dataDir: mkdtempSync(join(tmpdir(), 'catraca-stack-')),
      output: (line) => lines.push(line),
    });
  }, 60000);
  afterAll(async () => {
    await stack?.stop();
  }, 60000);

  test('the demo key answers a chat completion through the stack, and is billed', async () => {
    expect(stack.ready).toBe(true);
    const client = new OpenAI({ baseURL: stack.urls.base_url, apiKey: stack.demo.key, maxRetries: 0 });
    const r = await client.chat.completions.create({ model: 'sim/echo', messages: [{ role: 'user', content: 'Olá, catraca!' }] });
    expect(typeof r.choices[0].message.content).toBe('string');
    expect(r.usage!.prompt_tokens).toBeGreaterThan(0);
    const deadline = Date.now() + 10000;
    let n = 0;
    while (Date.now() < deadline) {
      const { rows } = await db.query(`select count(*)::int as n from ledger where key_id = $1 and kind = 'debit'`, [stack.demo.keyId]);
      n = rows[0].n;
      if (n === 1) break;
      await new Promise((res) => setTimeout(res, 100));
    }
    expect(n).toBe(1);
    // child output is prefixed with its name
    expect(lines.some((l) => /^gateway\s+\| /.test(l))).toBe(true);
  });

  test('every process serves /metrics on its own internal port; the counters move by exactly the requests sent', async () => {
    const ports = stack.metricsPorts as Record<'gateway' | 'worker' | 'metering', number>;
    const expected = {
      gateway: [
        'catraca_jobs_total counter',
        'catraca_http_responses_total counter',
        'catraca_admissions_total counter',
        'catraca_leases_opened_total counter',
        'catraca_latency_seconds histogram',
        'catraca_ttft_seconds histogram',
        'catraca_admit_seconds histogram',
        'catraca_inflight gauge',
        'catraca_local_jobs_accepted_total counter',
        'catraca_local_capacity gauge',
      ],
      worker: [
        'catraca_jobs_total counter',
        'catraca_jobs_accepted_total counter',
        'catraca_latency_seconds histogram',
        'catraca_upstream_ttft_seconds histogram',
        'catraca_worker_capacity gauge',
        'catraca_usage_pending gauge',
      ],
      metering: [
        'catraca_jobs_total counter',
        'catraca_usage_settled_total counter',
        'catraca_metering_lag_seconds histogram',
        'catraca_open_holds gauge',
        'catraca_open_leases gauge',
        'catraca_usage_backlog_messages gauge',
      ],
    };
    for (const [proc, names] of Object.entries(expected)) {
      const text = await scrape(ports[proc as keyof typeof ports]);
      for (const n of [...names, ...PROCESS_METRICS.map((x) => `${x} ${x.endsWith('_total') ? 'counter' : 'gauge'}`)]) {
        expect(text, `${proc}: ${n}`).toMatch(new RegExp(`^# TYPE ${n}$`, 'm'));
      }
      // never a duration in ms: Prometheus base units
      expect(text).not.toMatch(/_ms[ {_]/);
    }
    // the public port never serves /metrics
    expect((await fetch(stack.urls.base_url.replace('/v1', '/metrics'))).status).toBe(404);

    const figures = async () => ({
      answered: seriesValue(await scrape(ports.gateway), 'catraca_http_responses_total', 'status="200"'),
      admitted: seriesValue(await scrape(ports.gateway), 'catraca_admissions_total'),
      // jobs run by the front door's in-process pools, and by the worker process
      local: seriesValue(await scrape(ports.gateway), 'catraca_local_jobs_accepted_total'),
      accepted: seriesValue(await scrape(ports.worker), 'catraca_jobs_accepted_total'),
      settled: seriesValue(await scrape(ports.metering), 'catraca_usage_settled_total', 'status="settled"'),
    });
    const before = await figures();
    const N = 5;
    const client = new OpenAI({ baseURL: stack.urls.base_url, apiKey: stack.demo.key, maxRetries: 0 });
    for (let i = 0; i < N; i++) await client.chat.completions.create({ model: 'sim/echo', messages: [{ role: 'user', content: `conta ${i}` }] });
    const deadline = Date.now() + 10000;
    let after = await figures();
    while (after.settled - before.settled < N && Date.now() < deadline) {
      await new Promise((r) => setTimeout(r, 100));
      after = await figures();
    }
    await new Promise((r) => setTimeout(r, 300)); // nothing more arrives
    after = await figures();
    expect({
      answered: after.answered - before.answered,
      admitted: after.admitted - before.admitted,
      local: after.local - before.local,
      accepted: after.accepted - before.accepted,
      settled: after.settled - before.settled,
    }).toEqual({ answered: N, admitted: N, local: N, accepted: 0, settled: N });
  }, 30000);

  test('a child that dies is restarted', async () => {
    const port = Number(new URL(stack.urls.base_url).port);
    const before = lines.length;
    const pid = stack.pids().gateway!;
    expect(pid).toBeGreaterThan(0);
    process.kill(pid, 'SIGKILL');
    const deadline = Date.now() + 20000;
    let up = false;
    await new Promise((r) => setTimeout(r, 300));
    while (Date.now() < deadline && !(up = await tcpReachable('127.0.0.1', port, 300))) await new Promise((r) => setTimeout(r, 200));
    expect(up).toBe(true);
    expect(stack.pids().gateway).not.toBe(pid);
    const client = new OpenAI({ baseURL: stack.urls.base_url, apiKey: stack.demo.key, maxRetries: 2 });
    const r = await client.chat.completions.create({ model: 'sim/lorem', messages: [{ role: 'user', content: 'de novo' }] });
    expect(r.choices[0].message.role).toBe('assistant');
    expect(lines.length).toBeGreaterThan(before);
  }, 40000);
});
