import { describe, expect, it } from 'vitest';
import { csv, csvField } from './csv.ts';

describe('csv', () => {
  it('quotes what needs it, CRLF lines, JSON for objects, ISO dates', () => {
    expect(
      csv(
        ['a', 'b'],
        [
          ['x,y', 'say "hi"'],
          [{ k: 1 }, new Date('2026-01-02T03:04:05Z')],
          [null, 12n],
        ],
      ),
    ).toBe('a,b\r\n"x,y","say ""hi"""\r\n"{""k"":1}",2026-01-02T03:04:05.000Z\r\n,12\r\n');
  });
  it('a field a spreadsheet would run as a formula gets an apostrophe; a negative number stays a number', () => {
    expect(['=1+1', '+55 11', '@SUM(A1)', '-x', '\tx', '-0.018140', '-3', 'ok'].map(csvField)).toEqual([
      "'=1+1",
      "'+55 11",
      "'@SUM(A1)",
      "'-x",
      "'\tx",
      '-0.018140',
      '-3',
      'ok',
    ]);
  });
});
