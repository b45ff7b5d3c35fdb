import type { HttpResponse } from './uws.ts';
import { errors, type CatracaError } from '../errors.ts';

/**
 * Collects a request body up to `limit` bytes. uWS hands out chunks that are neutered after the
 * callback returns, so each one is copied. Over the limit → 413 without reading the rest.
 */
export function readBody(
  res: HttpResponse,
  limit: number,
  declaredLength: number,
  onBody: (body: Buffer) => void,
  onError: (err: CatracaError) => void,
): void {
  if (declaredLength > limit) {
    onError(errors.bodyTooLarge(limit));
    return;
  }
  const chunks: Buffer[] = [];
  let size = 0;
  let failed = false;
  res.onData((chunk, isLast) => {
    if (failed) return;
    size += chunk.byteLength;
    if (size > limit) {
      failed = true;
      onError(errors.bodyTooLarge(limit));
      return;
    }
    chunks.push(Buffer.from(Buffer.from(chunk)));
    if (isLast) onBody(chunks.length === 1 ? chunks[0] : Buffer.concat(chunks, size));
  });
}
