import { describe, expect, it } from 'vitest';
import { subjects } from '../bus/subjects.ts';
import { waitingByteBudgets } from './dispatcher.ts';

describe('waitingByteBudgets', () => {
  it('auto: an eighth of the memory for the door, a quarter of that for one tenant; explicit values as given', () => {
    const GiB = 1024 ** 3;
    const auto = { DISPATCH_MAX_WAITING_BYTES: 'auto', DISPATCH_MAX_WAITING_BYTES_PER_TENANT: 'auto' } as const;
    expect(waitingByteBudgets(auto, 8 * GiB)).toEqual({ maxBytes: GiB, maxBytesPerTenant: GiB / 4 });
    expect(waitingByteBudgets({ ...auto, DISPATCH_MAX_WAITING_BYTES: 1000 }, 8 * GiB)).toEqual({ maxBytes: 1000, maxBytesPerTenant: 250 });
    expect(waitingByteBudgets({ DISPATCH_MAX_WAITING_BYTES: 1000, DISPATCH_MAX_WAITING_BYTES_PER_TENANT: 900 })).toEqual({
      maxBytes: 1000,
      maxBytesPerTenant: 900,
    });
    expect(waitingByteBudgets(auto).maxBytes).toBeGreaterThan(0);
  });
});

describe('capacity subjects', () => {
  it('the pool the dispatcher reads back is the pool the subject was made for', () => {
    for (const pool of ['openai', 'sim', 'anthropic-eu']) expect(subjects.parseCapacity(subjects.capacity(pool))).toBe(pool);
    expect(subjects.capacityWildcard.startsWith(subjects.capacity(''))).toBe(true);
  });
});
