import { describe, expect, it } from 'vitest';
import { inputTokensUpperBound } from '../../billing/estimate.ts';
import type { CatalogEntry } from '../../catalog/catalog.ts';
import { ConfigSchema } from '../../config.ts';
import type { ApiKeyRecord } from '../../db/keys.ts';
import type { Db } from '../../db/pool.ts';
import type { CatracaError } from '../../errors.ts';
import { Collected } from '../collector.ts';
import type { PrepareContext } from '../types.ts';
import { responses } from './index.ts';

// The protocol between parse and the hold, with a stand-in for the database: what a stored
// conversation adds to the hold, and what storing off (RESPONSES_RETENTION_DAYS=0) means.

const PRIOR = {
  input_items: [{ type: 'message', id: 'msg_p_i0', role: 'user', content: [{ type: 'input_text', text: 'a long first question '.repeat(200) }] }],
  output_items: [
    { type: 'message', id: 'msg_p_0', role: 'assistant', status: 'completed', content: [{ type: 'output_text', text: 'a long answer '.repeat(300) }] },
  ],
};

/** A database that knows one response, resp_prev, of tenant t1 (the query names the tenant). */
function fakeDb(): { db: Db; queries: unknown[][] } {
  const queries: unknown[][] = [];
  const db = {
    query: async (_sql: string, params: unknown[]) => {
      queries.push(params);
      return { rows: params[0] === 'resp_prev' && params[1] === 't1' ? [PRIOR] : [], rowCount: 0 };
    },
  } as unknown as Db;
  return { db, queries };
}

const MODEL = {
  protocol: 'openai',
  extra_params: [],
  input_modalities: ['text'],
  context_length: 128000,
  image_input_tokens: null,
  max_output_tokens: 4096,
} as unknown as CatalogEntry;

function ctx(db: Db, tenant = 't1', retention = '30'): PrepareContext {
  return {
    requestId: 'gen-abc',
    key: { id: 'k1', tenant_id: tenant } as ApiKeyRecord,
    db,
    config: ConfigSchema.parse({ RESPONSES_RETENTION_DAYS: retention }),
  };
}

async function refusal(p: Promise<unknown>): Promise<CatracaError> {
  try {
    await p;
  } catch (err) {
    return err as CatracaError;
  }
  throw new Error('expected a refusal');
}

describe('responses protocol: prepare, check and the hold', () => {
  it("holds for the previous response's conversation too", async () => {
    const { db, queries } = fakeDb();
    const alone = responses.parse({ model: 'm', input: 'and then?' });
    await responses.prepare!(alone, ctx(db));
    const followUp = responses.parse({ model: 'm', input: 'and then?', previous_response_id: 'resp_prev' });
    await responses.prepare!(followUp, ctx(db));
    expect(queries).toEqual([['resp_prev', 't1']]);
    const priorBound = inputTokensUpperBound(
      {
        messages: [
          { role: 'user', content: PRIOR.input_items[0].content[0].text },
          { role: 'assistant', content: PRIOR.output_items[0].content[0].text },
        ],
      },
      MODEL,
    );
    expect(responses.inputBound(followUp, MODEL)).toBeGreaterThan(responses.inputBound(alone, MODEL) + priorBound - 16);
    expect(followUp.conversation?.map((i) => i.id)).toEqual(['msg_p_i0', 'msg_p_0', 'msg_abc_i0']);
    expect(responses.check(followUp, MODEL)).toBeNull();
    expect(responses.job(followUp, MODEL)).toMatchObject({ api: 'chat', body: { max_completion_tokens: 4096 } });
    expect(followUp.onFinal).toBeTypeOf('function'); // store defaults to true
  });

  it("answers another tenant's response id with the same 404 as a missing one", async () => {
    const { db } = fakeDb();
    const stranger = await refusal(responses.prepare!(responses.parse({ model: 'm', input: 'x', previous_response_id: 'resp_prev' }), ctx(db, 't2')));
    const missing = await refusal(responses.prepare!(responses.parse({ model: 'm', input: 'x', previous_response_id: 'resp_gone' }), ctx(db, 't1')));
    expect([stranger.status, stranger.code, stranger.param]).toEqual([404, 'previous_response_not_found', 'previous_response_id']);
    expect([missing.status, missing.code]).toEqual([404, 'previous_response_not_found']);
  });

  it('with storing off, stores nothing and refuses previous_response_id with a 400 that says why', async () => {
    const { db, queries } = fakeDb();
    const req = responses.parse({ model: 'm', input: 'x', store: true });
    await responses.prepare!(req, ctx(db, 't1', '0'));
    expect(req.onFinal).toBeUndefined();
    const e = await refusal(responses.prepare!(responses.parse({ model: 'm', input: 'x', previous_response_id: 'resp_prev' }), ctx(db, 't1', '0')));
    expect(e.status).toBe(400);
    expect(e.message).toContain('RESPONSES_RETENTION_DAYS=0');
    expect(queries).toEqual([]);
  });

  it('stores nothing with store: false, and caps output at max_output_tokens (no clamping)', async () => {
    const { db } = fakeDb();
    const req = responses.parse({ model: 'm', input: 'x', store: false, max_output_tokens: 99 });
    await responses.prepare!(req, ctx(db));
    expect(req.onFinal).toBeUndefined();
    expect(responses.outputCap(req)).toEqual({ requested: 99, param: 'max_output_tokens', clamp: false });
    expect(responses.job(req, MODEL).body.max_completion_tokens).toBe(99);
  });

  it('answers even when the response cannot be stored (the failure is logged)', async () => {
    const db = { query: async () => Promise.reject(new Error('connection terminated')) } as unknown as Db;
    const req = responses.parse({ model: 'm', input: 'x' });
    await responses.prepare!(req, ctx(db));
    const encoder = responses.encoder({ requestId: 'gen-abc', model: 'm', created: 1, streaming: true }, req);
    encoder.open();
    const end = { finishReason: 'stop', usage: { prompt_tokens: 1, completion_tokens: 0 }, estimated: false, costMicros: 0n };
    await expect(encoder.beforeEnd!(new Collected(), end)).resolves.toBeUndefined();
    expect(encoder.close(end)).toContain('event: response.completed');
  });
});
