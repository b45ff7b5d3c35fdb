import { describe, expect, it } from 'vitest';
import { newRequestId } from './exchange.ts';

describe('newRequestId', () => {
  it('gives 80 fresh random bits per id across pool refills', () => {
    const ids = Array.from({ length: 1200 }, () => newRequestId()); // three refills of the pool
    expect(new Set(ids).size).toBe(1200);
    for (const id of ids) expect(id).toMatch(/^gen-[0-9a-z]{8,9}[0-9a-f]{20}$/);
    const randomParts = new Set(ids.map((id) => id.slice(-20)));
    expect(randomParts.size).toBe(1200);
  });
});
