import { describe, expect, it } from 'vitest';
import { catalogEntry } from '../catalog/catalog.ts';
import { ModelInputSchema, type ModelRecord } from '../db/models.ts';
import { page, vendorBody } from './vendor-batch.ts';

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

// A chunk's results go back to the front door in pages that fit a NATS message.
describe('page', () => {
  it('takes results up to the byte budget (always at least one) and says where the next page starts', () => {
    const all = Array.from({ length: 5 }, (_, i) => ({ custom_id: `l${i}`, body: 'x'.repeat(90) }));
    const size = Buffer.byteLength(JSON.stringify(all[0]));
    expect(page(all, 0, size * 2)).toEqual({ results: all.slice(0, 2), next: 2 });
    expect(page(all, 2, size * 2)).toEqual({ results: all.slice(2, 4), next: 4 });
    expect(page(all, 4, size * 2)).toEqual({ results: all.slice(4), next: null });
    expect(page(all, 0, 1)).toEqual({ results: all.slice(0, 1), next: 1 });
    expect(page(all, 0)).toEqual({ results: all, next: null });
    expect(page([], 0)).toEqual({ results: [], next: null });
  });
});
