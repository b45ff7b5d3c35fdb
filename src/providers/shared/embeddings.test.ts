import { describe, expect, it } from 'vitest';
import { inputList } from '../../protocols/embeddings/input.ts';
import { base64Float32, embeddingsBody, encodeVector, float32Base64 } from './embeddings.ts';

/** How the openai SDK decodes a base64 embedding (toFloat32Array in openai/internal/utils/base64). */
const sdkDecode = (b64: string) => {
  const buf = Buffer.from(b64, 'base64');
  return Array.from(new Float32Array(buf.buffer, buf.byteOffset, buf.length / 4));
};

describe('OpenAI base64 embeddings', () => {
  it('encodes float32 little-endian, 4 bytes a value, as OpenAI does', () => {
    // 1.0 = 0x3F800000, -2.0 = 0xC0000000, 0.5 = 0x3F000000, each little-endian
    expect(float32Base64([1, -2, 0.5])).toBe('AACAPwAAAMAAAAA/');
    expect(Buffer.from(float32Base64([1, -2, 0.5]), 'base64')).toEqual(Buffer.from([0, 0, 0x80, 0x3f, 0, 0, 0, 0xc0, 0, 0, 0, 0x3f]));
    expect(float32Base64([])).toBe('');
  });

  it('rounds each value to float32, and the SDK decodes exactly those values', () => {
    const values = [0.1, -0.0069292835, 1 / 3, 123456.789];
    const b64 = float32Base64(values);
    expect(sdkDecode(b64)).toEqual(values.map(Math.fround));
    expect(base64Float32(b64)).toEqual(values.map(Math.fround));
  });

  it('reads back only real base64 float32 vectors', () => {
    expect(base64Float32('AACAPwAAAMAAAAA/')).toEqual([1, -2, 0.5]);
    expect(base64Float32('AACAPw==')).toEqual([1]);
    expect(base64Float32('AACA')).toBeNull(); // 3 bytes: not whole float32 values
    expect(base64Float32('not base64!')).toBeNull();
  });

  it("converts a vendor's vector to the client's encoding, keeping a base64 answer byte for byte", () => {
    const b64 = float32Base64([0.25, -0.75]);
    expect(encodeVector(b64, 'base64')).toBe(b64);
    expect(encodeVector(b64, 'float')).toEqual([0.25, -0.75]);
    expect(encodeVector([0.25, -0.75], 'float')).toEqual([0.25, -0.75]);
    expect(encodeVector([0.25, -0.75], 'base64')).toBe(b64);
    expect(encodeVector([0.25, 'x'], 'float')).toBeNull();
    expect(encodeVector('%%%', 'base64')).toBeNull();
    expect(encodeVector(null, 'float')).toBeNull();
  });

  it("builds OpenAI's answer with the catalog id and the prompt tokens", () => {
    expect(JSON.parse(embeddingsBody('sim/embed', [[0.5], 'AAAAPw=='], 7))).toEqual({
      object: 'list',
      data: [
        { object: 'embedding', index: 0, embedding: [0.5] },
        { object: 'embedding', index: 1, embedding: 'AAAAPw==' },
      ],
      model: 'sim/embed',
      usage: { prompt_tokens: 7, total_tokens: 7 },
    });
  });

  it('lists the inputs of every input shape', () => {
    expect(inputList('a')).toEqual(['a']);
    expect(inputList(['a', 'b'])).toEqual(['a', 'b']);
    expect(inputList([1, 2, 3])).toEqual([[1, 2, 3]]);
    expect(inputList([[1], [2, 3]])).toEqual([[1], [2, 3]]);
    expect(inputList([])).toEqual([]);
  });
});
