import { execFile } from 'node:child_process';
import { existsSync, mkdirSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { MockUsageEntry } from '../bench/mock-upstream/anthropic.ts';
import { mockText } from '../bench/mock-upstream/content.ts';
import type { MockUpstream } from '../bench/mock-upstream/server.ts';
import { type Prices, usageCostMicros } from '../src/billing/money.ts';
import { setAlias, upsertModel } from '../src/db/models.ts';
import { startStackWithVendor, type TestStack } from './helpers/stack.ts';
import { UNDER_CI } from './helpers/tools.ts';

// The real Gemini CLI (`gemini -p`) pointed at the front door (GOOGLE_GEMINI_BASE_URL, a catraca
// key as GEMINI_API_KEY, settings.json selecting "gemini-api-key" auth), offline, in a HOME of its
// own: its own model names served by aliases, a catalog name with a slash (`-m vendor/model`), an
// OpenAI-compatible and an Anthropic-protocol mock vendor. Every call it makes is billed exactly
// what the mock vendor says that call used.

const ROOT = join(dirname(fileURLToPath(import.meta.url)), '..');
const GEMINI = join(ROOT, 'node_modules/@google/gemini-cli/bundle/gemini.js');
const present = existsSync(GEMINI);
const MISSING = `${GEMINI} is not installed (npm ci installs @google/gemini-cli)`;
if (!present) console.warn(UNDER_CI ? `the Gemini CLI tests fail under CI: ${MISSING}` : `skipping the Gemini CLI tests: ${MISSING}`);

const UPSTREAM_KEY = 'sk-upstream-gemini-cli-0f1e2d3c4b5a6978';
const PRICES: Prices = { input: 3_000_000n, output: 15_000_000n };
/** The model names Gemini CLI 0.61 sends by itself (its router's classifier, its default model, `-m` shorthands). */
const BUILT_IN_NAMES = ['gemini-3.5-flash-lite', 'gemini-3.1-pro-preview', 'gemini-3.5-flash', 'gemini-2.5-pro', 'gemini-2.5-flash', 'gemini-2.5-flash-lite'];

let stack: TestStack;
let mock: MockUpstream;
let home: string;

beforeAll(async () => {
  if (!present) {
    if (UNDER_CI) throw new Error(`the Gemini CLI tests cannot run under CI: ${MISSING}`);
    return;
  }
  ({ stack, mock } = await startStackWithVendor(UPSTREAM_KEY, { pools: 'openai,anthropic' }));
  const vendor = { base_url: mock.url, api_key_env: 'MOCK_UPSTREAM_KEY', input_price: PRICES.input, output_price: PRICES.output, max_output_tokens: 8192 };
  await upsertModel(stack.db, { id: 'gcli/openai', pool: 'openai', upstream_model: 'gpt-4o-mini', ...vendor });
  await upsertModel(stack.db, { id: 'gcli/agent', pool: 'openai', upstream_model: 'mock-agent', ...vendor });
  await upsertModel(stack.db, { id: 'gcli/claude', pool: 'anthropic', upstream_model: 'mock-claude', ...vendor });
  for (const name of BUILT_IN_NAMES) await setAlias(stack.db, name, 'gcli/openai');
  home = mkdtempSync(join(tmpdir(), 'catraca-gemini-home-'));
  mkdirSync(join(home, '.gemini'));
  writeFileSync(
    join(home, '.gemini/settings.json'),
    JSON.stringify({
      security: { auth: { selectedType: 'gemini-api-key' } },
      general: { disableAutoUpdate: true, disableUpdateNag: true },
      privacy: { usageStatisticsEnabled: false },
      telemetry: { enabled: false },
    }),
  );
}, 90_000);

afterAll(async () => {
  await stack?.stop();
  await mock?.close();
  if (home) rmSync(home, { recursive: true, force: true });
});

interface GeminiResult {
  response: string;
  stats?: { models?: Record<string, { tokens?: { prompt?: number; candidates?: number } }> };
  error?: unknown;
}

/** `gemini -p <prompt> -o json` against the front door, with nothing of this machine's environment. */
function gemini(key: string, prompt: string, model?: string): Promise<GeminiResult> {
  const env = {
    PATH: process.env.PATH ?? '/usr/bin:/bin',
    HOME: home,
    GOOGLE_GEMINI_BASE_URL: stack.baseUrl.replace(/\/v1$/, ''),
    GEMINI_API_KEY: key,
    GEMINI_CLI_NO_RELAUNCH: 'true',
    NO_COLOR: '1',
    GEMINI_CLI_TRUST_WORKSPACE: 'true',
  };
  const args = [GEMINI, '-p', prompt, '-o', 'json', ...(model ? ['-m', model] : [])];
  return new Promise((resolve, reject) => {
    execFile(process.execPath, args, { env, cwd: home, timeout: 90_000, maxBuffer: 16 << 20 }, (err, stdout, stderr) => {
      if (err) return reject(new Error(`gemini failed: ${err.message}\nstdout: ${stdout}\nstderr: ${stderr}`));
      try {
        resolve(JSON.parse(stdout.slice(stdout.indexOf('{'))) as GeminiResult);
      } catch {
        reject(new Error(`gemini printed no JSON:\n${stdout}\n${stderr}`));
      }
    });
  });
}

function vendorCost(from: number): { cost: bigint; calls: MockUsageEntry[] } {
  const calls = mock.stats.usages.slice(from);
  let cost = 0n;
  for (const e of calls) {
    if (e.api === 'messages') {
      const u = e.usage;
      cost += usageCostMicros(
        { prompt_tokens: u.input_tokens + u.cache_read_input_tokens + u.cache_creation_input_tokens, completion_tokens: u.output_tokens },
        PRICES,
      );
    } else if (e.api === 'chat') cost += usageCostMicros(e.usage, PRICES);
  }
  return { cost, calls };
}

async function debitsOf(keyId: string, n: number): Promise<{ total: bigint; models: string[] }> {
  const deadline = Date.now() + 15_000;
  let rows: Array<{ amount_micros: string; model: string }> = [];
  while (Date.now() < deadline) {
    rows = (await stack.db.query("select amount_micros, model from ledger where key_id = $1 and kind = 'debit' order by id", [keyId])).rows;
    if (rows.length >= n) break;
    await new Promise((r) => setTimeout(r, 100));
  }
  return { total: rows.reduce((t, r) => t + BigInt(r.amount_micros), 0n), models: rows.map((r) => r.model) };
}

async function expectBalance(tenantId: string, cost: bigint): Promise<void> {
  await stack.waitNoHolds(tenantId);
  const { rows } = await stack.db.query('select balance_micros, held_micros from tenants where id = $1', [tenantId]);
  expect(rows[0]).toEqual({ balance_micros: 5_000_000n - cost, held_micros: 0n });
}

/** The mock's calls after `from`, billed as the debits of `keyId`: exactly, on `model`, nothing held. */
async function expectBilled(t: { tenantId: string; keyId: string }, from: number, model: string): Promise<MockUsageEntry[]> {
  const { cost, calls } = vendorCost(from);
  expect(cost).toBeGreaterThan(0n);
  const d = await debitsOf(t.keyId, calls.length);
  expect(d.models).toEqual(Array(calls.length).fill(model));
  expect(d.total).toBe(cost);
  await expectBalance(t.tenantId, cost);
  return calls;
}

describe.skipIf(!present && !UNDER_CI)('the real Gemini CLI', () => {
  it('its own model name (an alias of an OpenAI-compatible model): its ~30 KB request translated, the vendor text back, billed exactly', async () => {
    const t = await stack.tenant('5.00');
    const from = mock.stats.usages.length;
    const out = await gemini(t.key, 'say hi', 'gemini-3.1-pro-preview');
    expect(out.response).toBe(mockText(16));
    const sent = mock.stats.lastBody as { model: string; messages: Array<{ role: string }>; tools: unknown[] };
    expect(sent.model).toBe('gpt-4o-mini');
    expect(sent.messages[0].role).toBe('system');
    expect(sent.tools.length).toBeGreaterThan(5);
    const calls = await expectBilled(t, from, 'gcli/openai');
    expect(calls.map((c) => c.api)).toEqual(['chat']);
  }, 120_000);

  it('a catalog name with a slash on an Anthropic-protocol model', async () => {
    const t = await stack.tenant('5.00');
    const from = mock.stats.usages.length;
    const out = await gemini(t.key, 'say hi', 'gcli/claude');
    expect(out.response).toBe(mockText(16));
    const calls = await expectBilled(t, from, 'gcli/claude');
    expect(calls.map((c) => c.api)).toEqual(['messages']);
  }, 120_000);

  it('a function-call round trip: the call the vendor made answered by the CLI, both calls billed exactly', async () => {
    const t = await stack.tenant('5.00');
    const from = mock.stats.usages.length;
    const out = await gemini(t.key, "what's the weather in São Paulo?", 'gcli/agent');
    expect(out.response).toBe(mockText(16));
    const sent = mock.stats.lastBody as { messages: Array<{ role: string; tool_call_id?: string }> };
    expect(sent.messages.filter((m) => m.role === 'tool').map((m) => m.tool_call_id)).toEqual(['call_mock_weather_1']);
    const calls = await expectBilled(t, from, 'gcli/agent');
    expect(calls.map((c) => c.api)).toEqual(['chat', 'chat']);
  }, 120_000);
});
