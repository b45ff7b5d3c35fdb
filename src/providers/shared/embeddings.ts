// Embeddings as every adapter answers them: the vendor's vectors in the encoding the client asked
// for, in OpenAI's response shape. `base64` is OpenAI's encoding: the vector's float32 values,
// little-endian, 4 bytes each, in base64 (what the openai SDK asks for by default and decodes).

export type EncodingFormat = 'float' | 'base64';

/** Little-endian float32 bytes of `values`, in base64 (each value rounded to float32 as OpenAI does). */
export function float32Base64(values: ArrayLike<number>): string {
  const bytes = Buffer.allocUnsafe(values.length * 4);
  for (let i = 0; i < values.length; i++) bytes.writeFloatLE(values[i], i * 4);
  return bytes.toString('base64');
}

/** The float32 values of an OpenAI base64 embedding; null when it is not one (bad base64, a length not a multiple of 4). */
export function base64Float32(text: string): number[] | null {
  if (!/^[A-Za-z0-9+/]*={0,2}$/.test(text)) return null;
  const bytes = Buffer.from(text, 'base64');
  if (bytes.length % 4 !== 0) return null;
  const out = new Array<number>(bytes.length / 4);
  for (let i = 0; i < out.length; i++) out[i] = bytes.readFloatLE(i * 4);
  return out;
}

/**
 * One vector in the encoding the client asked for. A vendor's base64 answer is kept byte for byte
 * when the client asked base64; floats are converted when the vendor answered the other encoding
 * (some OpenAI-compatible servers ignore encoding_format). Null: the vendor's vector is unreadable.
 */
export function encodeVector(vendor: unknown, format: EncodingFormat): number[] | string | null {
  if (typeof vendor === 'string') {
    if (format === 'base64') return base64Float32(vendor) === null ? null : vendor;
    return base64Float32(vendor);
  }
  if (!Array.isArray(vendor) || !vendor.every((v) => typeof v === 'number' && Number.isFinite(v))) return null;
  return format === 'base64' ? float32Base64(vendor as number[]) : (vendor as number[]);
}

/** Our /v1/embeddings answer: OpenAI's shape, the catalog id as `model`, the vendor's prompt tokens as usage. */
export function embeddingsBody(model: string, vectors: Array<number[] | string>, promptTokens: number): string {
  return JSON.stringify({
    object: 'list',
    data: vectors.map((embedding, index) => ({ object: 'embedding', index, embedding })),
    model,
    usage: { prompt_tokens: promptTokens, total_tokens: promptTokens },
  });
}
