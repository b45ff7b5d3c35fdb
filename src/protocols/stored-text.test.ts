import { describe, expect, it } from 'vitest';
import { checkStoredText, jsonbText, nulPath } from './stored-text.ts';

const refusedParam = (f: () => void) => {
  try {
    f();
    return null;
  } catch (e) {
    return (e as { status: number; param: string }).status === 400 ? (e as { param: string }).param : 'not a 400';
  }
};

describe('stored text', () => {
  it('names the first field PostgreSQL cannot take: fallback models, model, provider slugs, end user, previous_response_id', () => {
    const req = (body: Record<string, unknown>, over: Record<string, unknown> = {}) => ({ model: 'm', stream: false, body, ...over });
    expect(refusedParam(() => checkStoredText(req({ models: ['m', 'a\u0000'] }), 'user'))).toBe('models[1]');
    expect(refusedParam(() => checkStoredText(req({}, { model: 'x\u0007' }), 'user'))).toBe('model');
    expect(refusedParam(() => checkStoredText(req({ provider: { ignore: ['ok', 'b\u007f'] } }), 'user'))).toBe('provider.ignore[1]');
    expect(refusedParam(() => checkStoredText(req({}, { endUser: 'u\n' }), 'metadata.user_id'))).toBe('metadata.user_id');
    expect(refusedParam(() => checkStoredText(req({ previous_response_id: 'resp_\u0000' }), 'user'))).toBe('previous_response_id');
    expect(refusedParam(() => checkStoredText(req({}, { model: 'x'.repeat(257) }), 'user'))).toBe('model');
    expect(refusedParam(() => checkStoredText(req({ models: ['a'], provider: { order: ['openai'] }, messages: [{ content: '\u0000' }] }), 'user'))).toBe(null);
  });

  it('finds U+0000 in nested strings and keys; jsonb text replaces it with U+FFFD (and only then walks the value)', () => {
    expect(nulPath({ input: [{ content: [{ text: 'a' }, { text: 'b\u0000' }] }] }, '')).toBe('input[0].content[1].text');
    expect(nulPath({ metadata: { 'k\u0000': 'v' } }, '')).toBe('metadata.k\u0000');
    expect(nulPath({ a: ['\\u0000', 1, null, true] }, '')).toBe(null);
    const out = [{ type: 'message', content: [{ type: 'output_text', text: 'um\u0000dois' }] }];
    expect(JSON.parse(jsonbText(out))[0].content[0].text).toBe('um\ufffddois');
    expect(jsonbText({ a: 'literal \\u0000 text' })).toBe(JSON.stringify({ a: 'literal \\u0000 text' }));
  });
});
