import { describe, expect, it } from 'vitest';
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
