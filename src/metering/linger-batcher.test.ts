import { describe, expect, it } from 'vitest';
import { LingerBatcher } from './linger-batcher.ts';

describe('LingerBatcher', () => {
  it('a lone item waits lingerMs; a full batch starts at once; at most `concurrency` batches run', async () => {
    const batches: number[][] = [];
    let active = 0;
    let maxActive = 0;
    const b = new LingerBatcher<number>(
      async (batch) => {
        batches.push(batch);
        maxActive = Math.max(maxActive, ++active);
        await new Promise((r) => setTimeout(r, 20));
        active--;
      },
      { batchSize: 3, concurrency: 2, lingerMs: 30 },
    );
    b.push(1);
    await new Promise((r) => setTimeout(r, 10));
    expect(batches).toEqual([]); // lingering
    b.push(2);
    b.push(3); // full: starts at once
    expect(batches).toEqual([[1, 2, 3]]);
    for (let i = 4; i <= 10; i++) b.push(i);
    await b.close();
    expect(batches.flat()).toEqual([1, 2, 3, 4, 5, 6, 7, 8, 9, 10]);
    expect(batches.every((x) => x.length <= 3)).toBe(true);
    expect(maxActive).toBe(2);
    expect(b.size).toBe(0);
  });
});
