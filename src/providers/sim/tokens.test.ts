import { describe, expect, it } from 'vitest';
import { contentText, countTokens, promptTokens, splitTokens } from './tokens.ts';

describe('sim token counting', () => {
  it('counts maximal non-whitespace runs with their leading whitespace', () => {
    expect(countTokens('')).toBe(0);
    expect(countTokens('   ')).toBe(0);
    expect(countTokens('Hello')).toBe(1);
    expect(countTokens('Hello, world!')).toBe(2);
    expect(countTokens('  leading and trailing  ')).toBe(3);
    expect(countTokens('a\tb\nc\r\nd')).toBe(4);
    expect(countTokens('olá, catraca! R$ 1,00')).toBe(4);
    expect(countTokens('emoji 🎉🎉 ok')).toBe(3);
  });

  it('splits so that concatenation reproduces the text exactly', () => {
    expect(splitTokens('Hello, world!')).toEqual(['Hello,', ' world!']);
    expect(splitTokens('  two\n lines  ')).toEqual(['  two', '\n lines  ']);
    expect(splitTokens('   ')).toEqual([]);
    expect(splitTokens('')).toEqual([]);
    const text = ' a  b\tc\n\nd ';
    expect(splitTokens(text).join('')).toBe(text);
    expect(splitTokens(text)).toHaveLength(countTokens(text));
  });

  it('extracts text from string and content-part arrays', () => {
    expect(contentText('hi')).toBe('hi');
    expect(
      contentText([
        { type: 'text', text: 'a b' },
        { type: 'image_url', image_url: { url: 'x' } },
        { type: 'text', text: 'c' },
      ]),
    ).toBe('a b\nc');
    expect(contentText(null)).toBe('');
    expect(contentText(undefined)).toBe('');
  });

  it('prompt tokens = 3 + Σ (3 + tokens(content))', () => {
    expect(promptTokens([])).toBe(3);
    expect(promptTokens([{ role: 'user', content: 'Hello, world!' }])).toBe(3 + 3 + 2);
    expect(
      promptTokens([
        { role: 'system', content: 'You are terse.' },
        { role: 'user', content: 'Say hi' },
        { role: 'assistant', content: null, tool_calls: [] },
      ]),
    ).toBe(3 + (3 + 3) + (3 + 2) + (3 + 0));
  });
});
