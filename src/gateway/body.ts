import type { HttpResponse } from './uws.ts';
import { errors, type CatracaError } from '../errors.ts';

/** Bodies up to this many times the limit are read and discarded so the client sees the 413. */
const DISCARD_FACTOR = 16;

/**
 * Collects a request body up to `limit` bytes. uWS hands out chunks that are neutered after the
 * callback returns, so each one is copied. Past the limit the rest is discarded (not buffered)
 * and the 413 is sent once the body ends, so the client reads the answer instead of a broken
 * pipe; a declared length beyond DISCARD_FACTOR × limit is refused at once and the connection closed.
 */
export function readBody(
  res: HttpResponse,
  limit: number,
  declaredLength: number,
  onBody: (body: Buffer) => void,
  onError: (err: CatracaError, closeConnection: boolean) => void,
): void {
  if (declaredLength > limit * DISCARD_FACTOR) {
    onError(errors.bodyTooLarge(limit), true);
    return;
  }
  const chunks: Buffer[] = [];
  let size = 0;
  res.onData((chunk, isLast) => {
    size += chunk.byteLength;
    if (size > limit) {
      chunks.length = 0;
      if (size > limit * DISCARD_FACTOR) {
        if (size - chunk.byteLength <= limit * DISCARD_FACTOR) onError(errors.bodyTooLarge(limit), true);
        return;
      }
      if (isLast) onError(errors.bodyTooLarge(limit), false);
      return;
    }
    chunks.push(Buffer.from(Buffer.from(chunk)));
    if (isLast) onBody(chunks.length === 1 ? chunks[0] : Buffer.concat(chunks, size));
  });
}
