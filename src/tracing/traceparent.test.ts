import { describe, expect, it } from 'vitest';
import { formatTraceparent, isSampled, newSpanId, newTraceId, parseTraceparent } from './traceparent.ts';

describe('traceparent (W3C Trace Context)', () => {
  const example = '00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01';

  it('parses the specification example and formats it back byte for byte', () => {
    const ctx = parseTraceparent(example);
    expect(ctx).toEqual({ traceId: '4bf92f3577b34da6a3ce929d0e0e4736', spanId: '00f067aa0ba902b7', traceFlags: 1 });
    expect(formatTraceparent(ctx!)).toBe(example);
    expect(isSampled(ctx!)).toBe(true);
    const unsampled = parseTraceparent('00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-00')!;
    expect(isSampled(unsampled)).toBe(false);
    expect(formatTraceparent(unsampled)).toBe('00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-00');
    expect(formatTraceparent({ traceId: 'a'.repeat(32), spanId: 'b'.repeat(16), traceFlags: 0x0b })).toBe(`00-${'a'.repeat(32)}-${'b'.repeat(16)}-0b`);
  });

  it('trims surrounding whitespace; accepts a future version with more fields', () => {
    expect(parseTraceparent(`  ${example} `)?.spanId).toBe('00f067aa0ba902b7');
    expect(parseTraceparent('cc-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01-what-ever')).toEqual({
      traceId: '4bf92f3577b34da6a3ce929d0e0e4736',
      spanId: '00f067aa0ba902b7',
      traceFlags: 1,
    });
  });

  it.each([
    ['absent', undefined],
    ['empty', ''],
    ['upper-case hex', '00-4BF92F3577B34DA6A3CE929D0E0E4736-00F067AA0BA902B7-01'],
    ['all-zero trace id', `00-${'0'.repeat(32)}-00f067aa0ba902b7-01`],
    ['all-zero parent id', `00-4bf92f3577b34da6a3ce929d0e0e4736-${'0'.repeat(16)}-01`],
    ['version ff', 'ff-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01'],
    ['version 00 with a fifth field', `${example}-extra`],
    ['short trace id', '00-4bf92f3577b34da6a3ce929d0e0e473-00f067aa0ba902b7-01'],
    ['long parent id', '00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b71-01'],
    ['non-hex', '00-4bf92f3577b34da6a3ce929d0e0e473g-00f067aa0ba902b7-01'],
    ['wrong separators', '00_4bf92f3577b34da6a3ce929d0e0e4736_00f067aa0ba902b7_01'],
    ['one-digit flags', '00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-1'],
  ])('refuses %s (a new trace starts instead)', (_what, header) => {
    expect(parseTraceparent(header)).toBeNull();
  });

  it('new ids are lowercase hex of the right length, never zero, and distinct', () => {
    const traces = new Set<string>();
    const spans = new Set<string>();
    for (let i = 0; i < 2000; i++) {
      const t = newTraceId();
      const s = newSpanId();
      expect(t).toMatch(/^[0-9a-f]{32}$/);
      expect(s).toMatch(/^[0-9a-f]{16}$/);
      traces.add(t);
      spans.add(s);
    }
    expect(traces.size).toBe(2000);
    expect(spans.size).toBe(2000);
    const round = { traceId: newTraceId(), spanId: newSpanId(), traceFlags: 1 };
    expect(parseTraceparent(formatTraceparent(round))).toEqual(round);
  });
});
