import { writeFileSync, mkdtempSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { defaultConcurrency, openFileLimit, STREAM_KIB } from './capacity.ts';

describe('worker capacity', () => {
  it('is the memory budget over the cost of a stream, within the open-file limit', () => {
    expect(STREAM_KIB).toBe(32);
    expect(defaultConcurrency(1024, 1_000_000)).toBe(32_768);
    expect(defaultConcurrency(1024, 20_000)).toBe(19_488);
    expect(defaultConcurrency(64, 1_000_000)).toBe(2_048);
    expect(defaultConcurrency(0, 1_000_000)).toBe(1);
  });

  it("a front door's in-process pools count two sockets per stream (client and vendor)", () => {
    expect(defaultConcurrency(1024, 20_000, 2)).toBe(9_744);
    expect(defaultConcurrency(1024, 1_000_000, 2)).toBe(32_768);
  });

  it('reads the soft open-file limit from /proc/self/limits', () => {
    const dir = mkdtempSync(join(tmpdir(), 'limits-'));
    const f = join(dir, 'limits');
    writeFileSync(
      f,
      'Limit                     Soft Limit           Hard Limit           Units\nMax open files            20000                20000                files\n',
    );
    expect(openFileLimit(f)).toBe(20_000);
    expect(openFileLimit(join(dir, 'missing'))).toBe(1024);
    expect(openFileLimit()).toBeGreaterThan(0);
  });
});
