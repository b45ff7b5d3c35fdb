import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { MockUpstream } from '../bench/mock-upstream/server.ts';
import { encode } from '../src/bus/messages.ts';
import type { DeploymentRow } from '../src/bus/instances.ts';
import { subjects } from '../src/bus/subjects.ts';
import { addDeployment, upsertModel } from '../src/db/models.ts';
import { cli } from './helpers/cli.ts';
import { startStackWithVendor, type TestStack } from './helpers/stack.ts';

// A deployment's health as an operator sees it (`catraca status`, the runner's /metrics), and what
// moves it: a vendor that refuses the connection cools its deployment down; a token count never
// does (Claude Code calls /v1/messages/count_tokens all the time, and a count says nothing about how
// a deployment serves).

const UPSTREAM_KEY = 'sk-upstream-health-00112233445566778899aabb';
const MODEL = 'health/claude';

let stack: TestStack;
let mock: MockUpstream;

beforeAll(async () => {
  ({ stack, mock } = await startStackWithVendor(UPSTREAM_KEY, { workers: 0, pools: 'sim,anthropic' }));
  await stack.spawnWorker({ METRICS_PORT: '0' }); // its /metrics on a free port
  // the primary refuses every connection and is nearly always chosen first (weight 1000 against 1)
  await upsertModel(stack.db, {
    id: MODEL,
    pool: 'anthropic',
    protocol: 'anthropic',
    upstream_model: 'mock-claude',
    base_url: 'http://127.0.0.1:1',
    api_key_env: 'MOCK_UPSTREAM_KEY',
    input_price: 3_000_000n,
    output_price: 15_000_000n,
    context_length: 200_000,
    weight: 1000,
  });
  await addDeployment(stack.db, 'dep_health_second', {
    model_id: MODEL,
    name: 'second',
    protocol: 'anthropic',
    base_url: mock.url,
    api_key_env: 'MOCK_UPSTREAM_KEY',
    upstream_model: 'mock-claude',
  });
  stack.nc.publish(subjects.catalogChanged, encode({ model: MODEL }));
  await stack.nc.flush();
  await new Promise((r) => setTimeout(r, 300));
}, 60_000);

afterAll(async () => {
  await stack?.stop();
  await mock?.close();
});

/** `catraca status --json`'s rows for the model, as the CLI prints them. */
async function status(): Promise<DeploymentRow[]> {
  const r = await cli(['status', '--json', '--wait-ms', '500'], { NATS_URL: stack.natsUrl, DATABASE_URL: stack.databaseUrl });
  if (!r.json) throw new Error(`catraca status: ${r.stderr}`);
  return (r.json.deployments as DeploymentRow[]).filter((d) => d.model === MODEL);
}

/** The worker's /metrics series for the model's deployments: `name{deployment}` → value. */
async function deploymentMetrics(): Promise<Record<string, number>> {
  const line = stack.workers[0].lines.find((l) => l.includes('"metrics_port"'));
  const port = JSON.parse(line!).metrics_port;
  const text = await (await fetch(`http://127.0.0.1:${port}/metrics`)).text();
  const out: Record<string, number> = {};
  for (const m of text.matchAll(/^(catraca_deployment_[a-z_]+)\{([^}]*)\} ([\d.]+)$/gm)) {
    if (!m[2].includes(`model="${MODEL}"`)) continue;
    out[`${m[1]}{${/deployment="([^"]+)"/.exec(m[2])?.[1]}}`] = Number(m[3]);
  }
  return out;
}

const messages = (key: string, path: string, body: Record<string, unknown>) =>
  fetch(`${stack.baseUrl}/messages${path}`, {
    method: 'POST',
    headers: { 'x-api-key': key, 'anthropic-version': '2023-06-01', 'content-type': 'application/json' },
    body: JSON.stringify({ model: MODEL, messages: [{ role: 'user', content: 'how many tokens?' }], ...body }),
  });

describe('deployment health', () => {
  it('token counts against a deployment that refuses connections never cool it down', async () => {
    const t = await stack.tenant('1.00');
    const answers: Array<[number, unknown]> = [];
    for (let i = 0; i < 6; i++) {
      const res = await messages(t.key, '/count_tokens', {});
      answers.push([res.status, await res.json()]);
    }
    // the primary (chosen first) refuses the connection; the count comes from the second
    expect(new Set(answers.map(([status]) => status))).toEqual(new Set([200]));
    expect((answers[0][1] as { input_tokens: number }).input_tokens).toBeGreaterThan(0);
    const rows = await status();
    expect(rows.map((d) => [d.deployment, d.runners, d.healthy, d.circuits_open, d.failed])).toEqual([
      ['primary', 1, 1, 0, 0],
      ['second', 1, 1, 0, 0],
    ]);
    await new Promise((r) => setTimeout(r, 1200)); // /metrics is sampled once a second
    expect(await deploymentMetrics()).toMatchObject({
      'catraca_deployment_healthy{primary}': 1,
      'catraca_deployment_failures_total{primary}': 0,
    });
  });

  it('a request the primary refuses is served by the second; the primary cools down, shown by status and /metrics', async () => {
    const t = await stack.tenant('1.00');
    const res = await messages(t.key, '', { max_tokens: 64 });
    expect(res.status, await res.clone().text()).toBe(200);
    expect(((await res.json()) as { type: string }).type).toBe('message');
    const rows = await status();
    expect(rows.map((d) => [d.deployment, d.healthy, d.served, d.failed])).toEqual([
      ['primary', 0, 0, 1],
      ['second', 1, 1, 0],
    ]);
    expect(rows[0].last_error).not.toBeNull();
    // the runner samples its figures into /metrics once a second
    let m = await deploymentMetrics();
    for (const deadline = Date.now() + 3000; m['catraca_deployment_failures_total{primary}'] !== 1 && Date.now() < deadline; ) {
      await new Promise((r) => setTimeout(r, 200));
      m = await deploymentMetrics();
    }
    expect(m).toMatchObject({
      'catraca_deployment_healthy{primary}': 0,
      'catraca_deployment_failures_total{primary}': 1,
      'catraca_deployment_healthy{second}': 1,
      'catraca_deployment_served_total{second}': 1,
    });
    expect(m['catraca_deployment_cooldown_seconds{primary}']).toBeGreaterThan(0);
  });
});
