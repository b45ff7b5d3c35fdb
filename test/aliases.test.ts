import { randomBytes } from 'node:crypto';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { parseBrl, usageCostMicros } from '../src/billing/money.ts';
import { announceCatalogChange } from '../src/catalog/catalog.ts';
import { setAlias } from '../src/db/models.ts';
import { SIM_PRICES, startStack, type TestStack } from './helpers/stack.ts';

// Catalog aliases (`catraca model alias add`): the names agents send on their own (Claude Code's
// `claude-sonnet-…`) resolve to a catalog model on every route; the key's allowlist applies to the
// target; /models lists them; an unknown name is a 404 in the route's own shape.

let stack: TestStack;
const alias = `claude-sonnet-alias-${randomBytes(3).toString('hex')}`;

beforeAll(async () => {
  stack = await startStack({ gateways: 1, workers: 1, pools: 'sim' });
  await setAlias(stack.db, alias, 'sim/echo');
  // as `catraca model alias add` does: the front doors reload at once
  announceCatalogChange(stack.nc, alias);
  await stack.nc.flush();
}, 60000);

afterAll(async () => {
  await stack?.stop();
});

const post = (path: string, key: string, body: Record<string, unknown>, anthropic = false) =>
  fetch(`${stack.baseUrl}${path}`, {
    method: 'POST',
    headers: anthropic
      ? { 'x-api-key': key, 'anthropic-version': '2023-06-01', 'content-type': 'application/json' }
      : { authorization: `Bearer ${key}`, 'content-type': 'application/json' },
    body: JSON.stringify(body),
  });
const balance = async (tenantId: string) =>
  (await stack.db.query('select balance_micros from tenants where id = $1', [tenantId])).rows[0].balance_micros as bigint;
const held = async (tenantId: string) => (await stack.db.query('select count(*)::int as n from holds where tenant_id = $1', [tenantId])).rows[0].n as number;

describe('catalog aliases', () => {
  it('/models lists the alias as an entry of its own naming its model', async () => {
    const { key } = await stack.tenant('1.00');
    // the announcement reaches the door within a second
    const deadline = Date.now() + 1000;
    let body: { data: Array<{ id: string; alias_of?: string }> };
    for (;;) {
      const res = await fetch(`${stack.baseUrl}/models`, { headers: { authorization: `Bearer ${key}` } });
      expect(res.status).toBe(200);
      body = (await res.json()) as typeof body;
      if (body.data.some((m) => m.id === alias) || Date.now() > deadline) break;
      await new Promise((r) => setTimeout(r, 50));
    }
    const entry = body.data.find((m) => m.id === alias);
    expect(entry?.alias_of).toBe('sim/echo');
    expect(body.data.filter((m) => m.id === 'sim/echo' && m.alias_of === undefined)).toHaveLength(1);
  });

  it('resolves on chat, messages, responses and completions, each billed at the target model’s price', async () => {
    const { tenantId, key } = await stack.tenant('1.00');
    const ids: string[] = [];
    const chat = await post('/chat/completions', key, { model: alias, messages: [{ role: 'user', content: 'um dois' }] });
    expect(chat.status).toBe(200);
    const chatBody = (await chat.json()) as { id: string; model: string; usage: { prompt_tokens: number; completion_tokens: number } };
    expect(chatBody.model).toBe('sim/echo');
    ids.push(chatBody.id);
    const messages = await post('/messages', key, { model: alias, max_tokens: 64, messages: [{ role: 'user', content: 'três' }] }, true);
    expect(messages.status).toBe(200);
    ids.push(messages.headers.get('x-request-id') as string);
    const responses = await post('/responses', key, { model: alias, input: 'quatro cinco' });
    expect(responses.status).toBe(200);
    ids.push(responses.headers.get('x-request-id') as string);
    const completions = await post('/completions', key, { model: alias, prompt: 'seis' });
    expect(completions.status).toBe(200);
    ids.push(completions.headers.get('x-request-id') as string);

    await stack.waitSettled(ids);
    const { rows } = await stack.db.query(
      `select request_id, model, route, input_tokens, output_tokens, amount_micros from ledger where request_id = any($1) order by request_id`,
      [ids],
    );
    expect(rows).toHaveLength(4);
    expect(rows.map((r) => r.route).sort()).toEqual(['chat', 'completions', 'messages', 'responses']);
    let total = 0n;
    for (const row of rows) {
      expect(row.model).toBe('sim/echo');
      const cost = usageCostMicros({ prompt_tokens: row.input_tokens, completion_tokens: row.output_tokens }, SIM_PRICES.echo);
      expect(row.amount_micros).toBe(cost);
      total += cost;
    }
    expect(total).toBeGreaterThan(0n);
    expect(await balance(tenantId)).toBe(parseBrl('1.00') - total);
    await stack.waitNoHolds(tenantId);
  });

  it('the allowlist applies to the target: a key for sim/lorem only is refused the alias, in each route’s shape, before anything is held', async () => {
    const { tenantId, key } = await stack.tenant('1.00', { models: ['sim/lorem'] });
    const chat = await post('/chat/completions', key, { model: alias, messages: [{ role: 'user', content: 'x' }] });
    expect(chat.status).toBe(403);
    expect(((await chat.json()) as { error: { code: string } }).error.code).toBe('model_not_allowed');
    const messages = await post('/messages', key, { model: alias, max_tokens: 16, messages: [{ role: 'user', content: 'x' }] }, true);
    expect(messages.status).toBe(403);
    expect(((await messages.json()) as { type: string; error: { type: string } }).error.type).toBe('permission_error');
    const responses = await post('/responses', key, { model: alias, input: 'x' });
    expect(responses.status).toBe(403);
    expect(((await responses.json()) as { error: { code: string } }).error.code).toBe('model_not_allowed');
    expect(await held(tenantId)).toBe(0);
    expect(await balance(tenantId)).toBe(parseBrl('1.00'));
  });

  it('an unknown name is a 404 in the route’s shape', async () => {
    const { key } = await stack.tenant('1.00');
    const chat = await post('/chat/completions', key, { model: 'claude-nowhere-1', messages: [{ role: 'user', content: 'x' }] });
    expect(chat.status).toBe(404);
    expect(((await chat.json()) as { error: { code: string } }).error.code).toBe('model_not_found');
    const messages = await post('/messages', key, { model: 'claude-nowhere-1', max_tokens: 16, messages: [{ role: 'user', content: 'x' }] }, true);
    expect(messages.status).toBe(404);
    expect(await messages.json()).toMatchObject({ type: 'error', error: { type: 'not_found_error' } });
  });
});
