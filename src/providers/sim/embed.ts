import { createHash } from 'node:crypto';
import type { EmbeddingInput } from '../../protocols/embeddings/input.ts';
import { countTokens } from './tokens.ts';

// Deterministic embeddings of the sim vendor (and of the mock vendors, with their own salt), so a
// client and a test can predict every vector and every bill:
//
//   vector(salt, input, dims)  SHA-256 of salt, NUL, then "s:" + the text or "t:" + the token ids
//                              joined with ","; that digest + a 4-byte counter k hashed again for
//                              k = 0, 1, … gives 8 little-endian uint32 per block, each mapped to
//                              u / 2^31 − 1; the first `dims` values, scaled to unit length, then
//                              rounded to float32 (the precision vendors return).
//   tokens(input)              a text: the sim's documented count (tokens.ts, no framing); token
//                              ids: how many there are.

export const SIM_EMBEDDING_DIMENSIONS = 256;
/** The most dimensions the sim embeds to (a vendor's maximum for its model). */
export const SIM_MAX_DIMENSIONS = 3072;

export function embeddingTokens(input: EmbeddingInput): number {
  return typeof input === 'string' ? countTokens(input) : input.length;
}

export function simEmbedding(salt: string, input: EmbeddingInput, dims: number): Float32Array {
  const seed = createHash('sha256')
    .update(`${salt}\0${typeof input === 'string' ? `s:${input}` : `t:${input.join(',')}`}`)
    .digest();
  const raw = new Float64Array(dims);
  const counter = Buffer.alloc(4);
  for (let block = 0; block * 8 < dims; block++) {
    counter.writeUInt32LE(block);
    const digest = createHash('sha256').update(seed).update(counter).digest();
    for (let j = 0; j < 8 && block * 8 + j < dims; j++) raw[block * 8 + j] = digest.readUInt32LE(j * 4) / 2 ** 31 - 1;
  }
  let norm = 0;
  for (const v of raw) norm += v * v;
  norm = Math.sqrt(norm) || 1;
  const out = new Float32Array(dims);
  for (let i = 0; i < dims; i++) out[i] = raw[i] / norm;
  return out;
}
