import { describe, expect, it } from 'vitest';
import { catalogEntry } from '../catalog/catalog.ts';
import { ModelInputSchema, type ModelRecord } from '../db/models.ts';
import { vendorBody } from './vendor-batch.ts';

// What a vendor batch's line is sent as: the online transform (allowlist, upstream model, the cap the hold paid for), not streamed.
describe('vendorBody', () => {
  it('names the upstream model, caps the output at what was held, drops streaming and unknown fields', () => {
    const input = ModelInputSchema.parse({
      id: 'v/gpt',
      pool: 'openai',
      protocol: 'openai',
      upstream_model: 'mock-gpt',
      base_url: 'http://127.0.0.1:9/v1',
      input_price: 1n,
      output_price: 1n,
    });
    const entry = catalogEntry({ ...input, context_length_set: true, created_at: new Date(0), updated_at: new Date(0) } as ModelRecord);
    const body = vendorBody(entry, { messages: [{ role: 'user', content: 'hi', extra: 1 }], temperature: 0.5, provider: { only: ['x'] } }, 64);
    expect(body).toEqual({ model: 'mock-gpt', messages: [{ role: 'user', content: 'hi' }], temperature: 0.5, max_tokens: 64 });
  });
});
