import { execFile } from 'node:child_process';
import { existsSync, mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { MockUsageEntry } from '../bench/mock-upstream/anthropic.ts';
import { mockText } from '../bench/mock-upstream/content.ts';
import { type MockUpstream, startMockUpstream } from '../bench/mock-upstream/server.ts';
import { type Prices, usageCostMicros } from '../src/billing/money.ts';
import { setAlias, upsertModel } from '../src/db/models.ts';
import { startStack, type TestStack } from './helpers/stack.ts';
import { UNDER_CI } from './helpers/tools.ts';

// The real Claude Code CLI (`claude -p`) pointed at the front door (ANTHROPIC_BASE_URL, a catraca
// key as ANTHROPIC_API_KEY), offline, in a HOME of its own: on an Anthropic-protocol mock model
// through the aliases of the built-in model names it sends, and on an OpenAI-compatible mock model
// (translated). Every call it makes is billed exactly what the mock vendor says that call used.

const ROOT = join(dirname(fileURLToPath(import.meta.url)), '..');
const CLAUDE = join(ROOT, 'node_modules/@anthropic-ai/claude-code-linux-x64/claude');
const present = existsSync(CLAUDE);
// Under CI a missing binary is a failure, never a silent skip.
const MISSING = `${CLAUDE} is not installed (npm ci installs @anthropic-ai/claude-code on linux-x64)`;
if (!present) console.warn(UNDER_CI ? `the Claude Code tests fail under CI: ${MISSING}` : `skipping the Claude Code tests: ${MISSING}`);

const UPSTREAM_KEY = 'sk-upstream-claude-code-5e4d3c2b1a09f8e7';
const PRICES: Prices = { input: 3_000_000n, output: 15_000_000n, cachedInput: 300_000n, cacheWrite: 3_750_000n, cacheWrite1h: 6_000_000n };
/** The model names Claude Code sends by itself (its default, and `--model sonnet` / `--model haiku`). */
const BUILT_IN_NAMES = ['claude-opus-5-5', 'claude-sonnet-5-5', 'claude-haiku-5-5'];

let stack: TestStack;
let mock: MockUpstream;
let home: string;

beforeAll(async () => {
  if (!present) {
    if (UNDER_CI) throw new Error(`the Claude Code tests cannot run under CI: ${MISSING}`);
    return;
  }
  mock = await startMockUpstream({ host: '127.0.0.1', port: 0 });
  stack = await startStack({ pools: 'openai,anthropic', env: { MOCK_UPSTREAM_KEY: UPSTREAM_KEY, WORKER_UPSTREAM_KEYS: 'MOCK_UPSTREAM_KEY' } });
  const vendor = {
    base_url: mock.url,
    api_key_env: 'MOCK_UPSTREAM_KEY',
    input_price: PRICES.input,
    output_price: PRICES.output,
    cached_input_price: PRICES.cachedInput,
    cache_write_price: PRICES.cacheWrite,
    cache_write_1h_price: PRICES.cacheWrite1h,
    max_output_tokens: 8192,
  };
  await upsertModel(stack.db, { id: 'ccclaude/code', pool: 'anthropic', upstream_model: 'mock-claude', ...vendor });
  await upsertModel(stack.db, { id: 'ccclaude/agent', pool: 'anthropic', upstream_model: 'mock-claude-agent', ...vendor });
  await upsertModel(stack.db, { id: 'ccvendor/agent', pool: 'openai', upstream_model: 'mock-agent', ...vendor });
  for (const name of BUILT_IN_NAMES) await setAlias(stack.db, name, 'ccclaude/code');
  home = mkdtempSync(join(tmpdir(), 'catraca-claude-home-'));
}, 90_000);

afterAll(async () => {
  await stack?.stop();
  await mock?.close();
  if (home) rmSync(home, { recursive: true, force: true });
});

interface ClaudeResult {
  result: string;
  is_error: boolean;
  usage: { input_tokens: number; output_tokens: number };
  num_turns: number;
}

/** `claude -p <prompt> --output-format json` against the front door, with nothing of this machine's environment. */
function claude(key: string, prompt: string, model?: string): Promise<ClaudeResult> {
  const env = {
    PATH: process.env.PATH ?? '/usr/bin:/bin',
    HOME: home,
    ANTHROPIC_BASE_URL: stack.baseUrl.replace(/\/v1$/, ''),
    ANTHROPIC_API_KEY: key,
    DISABLE_TELEMETRY: '1',
    CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC: '1',
    DISABLE_AUTOUPDATER: '1',
  };
  const args = ['-p', prompt, '--output-format', 'json', ...(model ? ['--model', model] : [])];
  return new Promise((resolve, reject) => {
    execFile(CLAUDE, args, { env, cwd: home, timeout: 90_000, maxBuffer: 16 << 20 }, (err, stdout, stderr) => {
      if (err) return reject(new Error(`claude failed: ${err.message}\nstdout: ${stdout}\nstderr: ${stderr}`));
      try {
        resolve(JSON.parse(stdout) as ClaudeResult);
      } catch {
        reject(new Error(`claude printed no JSON:\n${stdout}\n${stderr}`));
      }
    });
  });
}

/** What the mock's usage entries cost, the calls Claude Code made being the entries after `from`. */
function vendorCost(from: number): { cost: bigint; calls: MockUsageEntry[] } {
  const calls = mock.stats.usages.slice(from);
  let cost = 0n;
  for (const e of calls) {
    if (e.api === 'messages') {
      const u = e.usage;
      cost += usageCostMicros(
        {
          prompt_tokens: u.input_tokens + u.cache_read_input_tokens + u.cache_creation_input_tokens,
          completion_tokens: u.output_tokens,
          cached_tokens: u.cache_read_input_tokens,
          cache_write_tokens: u.cache_creation.ephemeral_5m_input_tokens,
          cache_write_1h_tokens: u.cache_creation.ephemeral_1h_input_tokens,
        },
        PRICES,
      );
    } else if (e.api === 'chat') cost += usageCostMicros(e.usage, PRICES); // the OpenAI adapter bills cached_tokens (none here) as input
  }
  return { cost, calls };
}

async function debitsOf(keyId: string): Promise<{ total: bigint; rows: number; models: string[] }> {
  const { rows } = await stack.db.query("select amount_micros, model from ledger where key_id = $1 and kind = 'debit' order by id", [keyId]);
  return { total: rows.reduce((n, r) => n + BigInt(r.amount_micros), 0n), rows: rows.length, models: rows.map((r) => r.model) };
}

const balanceOf = async (tenantId: string): Promise<bigint> =>
  (await stack.db.query('select balance_micros from tenants where id = $1', [tenantId])).rows[0].balance_micros;

/** The tenant's balance is the grant minus exactly what the vendor's usage costs at the model's prices; no hold left. */
async function expectBalance(tenantId: string, cost: bigint): Promise<void> {
  expect(await balanceOf(tenantId)).toBe(5_000_000n - cost);
  const { rows } = await stack.db.query('select count(*)::int as n from holds where tenant_id = $1', [tenantId]);
  expect(rows[0].n).toBe(0);
}

async function settledCalls(keyId: string, n: number): Promise<void> {
  const deadline = Date.now() + 15_000;
  while ((await debitsOf(keyId)).rows < n && Date.now() < deadline) await new Promise((r) => setTimeout(r, 100));
}

describe.skipIf(!present && !UNDER_CI)('the real Claude Code CLI', () => {
  it('its own model name (an alias of an Anthropic-protocol model): answers with the vendor text, billed what the vendor used', async () => {
    const t = await stack.tenant('5.00');
    const from = mock.stats.usages.length;
    const out = await claude(t.key, 'say hi');
    expect(out).toMatchObject({ is_error: false, result: mockText(16) });
    const sent = mock.stats.lastBody!;
    // what Claude Code sent reached the vendor: blocks, cache markers, tools, thinking, context management
    expect(sent).toMatchObject({ model: 'mock-claude', max_tokens: 8192, thinking: { type: 'adaptive' }, context_management: { edits: [expect.any(Object)] } });
    expect((sent.system as Array<{ cache_control?: unknown }>).filter((b) => b.cache_control).length).toBeGreaterThan(0);
    expect((sent.tools as unknown[]).length).toBeGreaterThan(5);
    const { cost, calls } = vendorCost(from);
    await settledCalls(t.keyId, calls.filter((c) => c.api !== 'count_tokens').length);
    const debits = await debitsOf(t.keyId);
    expect(debits.rows).toBe(calls.filter((c) => c.api !== 'count_tokens').length);
    expect(debits.total).toBe(cost);
    expect(debits.models.every((m) => m === 'ccclaude/code')).toBe(true);
    expect(cost).toBeGreaterThan(0n);
    await expectBalance(t.tenantId, cost);
    // what Claude Code read as usage is the vendor's
    const last = calls.at(-1)!;
    if (last.api === 'messages') expect(out.usage).toMatchObject({ input_tokens: last.usage.input_tokens, output_tokens: last.usage.output_tokens });
  });

  it('a tool round trip on an Anthropic-protocol model: every call billed exactly', async () => {
    const t = await stack.tenant('5.00');
    const from = mock.stats.usages.length;
    const out = await claude(t.key, "what's the weather in São Paulo?", 'ccclaude/agent');
    expect(out).toMatchObject({ is_error: false, result: mockText(16) });
    const { cost, calls } = vendorCost(from);
    const turns = calls.filter((c) => c.api === 'messages');
    expect(turns.length).toBeGreaterThanOrEqual(2); // the tool_use, then the answer
    // Claude Code's cache markers at work through the gateway: the second call reads what the first wrote
    const second = turns[1];
    if (second.api === 'messages') expect(second.usage.cache_read_input_tokens).toBeGreaterThan(10_000);
    await settledCalls(t.keyId, calls.filter((c) => c.api !== 'count_tokens').length);
    const debits = await debitsOf(t.keyId);
    expect(debits.total).toBe(cost);
    await expectBalance(t.tenantId, cost);
  });

  it('an OpenAI-compatible model (translated both ways), a tool round trip included: every call billed exactly', async () => {
    const t = await stack.tenant('5.00');
    const from = mock.stats.usages.length;
    const out = await claude(t.key, "what's the weather in São Paulo?", 'ccvendor/agent');
    expect(out).toMatchObject({ is_error: false, result: mockText(16) });
    const { cost, calls } = vendorCost(from);
    expect(calls.map((c) => c.api)).toEqual(['chat', 'chat']);
    const sent = mock.stats.lastBody as { messages: Array<{ role: string }>; tools: unknown[] };
    expect(sent.messages.map((m) => m.role)).toContain('tool');
    expect(sent.tools.length).toBeGreaterThan(5);
    await settledCalls(t.keyId, calls.length);
    const debits = await debitsOf(t.keyId);
    expect(debits.rows).toBe(2);
    expect(debits.total).toBe(cost);
    await expectBalance(t.tenantId, cost);
  });

  it('`--model haiku` and `--model sonnet` send built-in names that the aliases serve', async () => {
    const t = await stack.tenant('5.00');
    const from = mock.stats.usages.length;
    for (const model of ['haiku', 'sonnet']) {
      const out = await claude(t.key, 'say hi', model);
      expect(out).toMatchObject({ is_error: false, result: mockText(16) });
    }
    const { cost, calls } = vendorCost(from);
    const billedCalls = calls.filter((c) => c.api !== 'count_tokens').length;
    await settledCalls(t.keyId, billedCalls);
    expect((await debitsOf(t.keyId)).models).toEqual(Array(billedCalls).fill('ccclaude/code'));
    await expectBalance(t.tenantId, cost);
  });
});
