import type { HttpResponse } from './uws.ts';
import { errors, type CatracaError } from '../errors.ts';

/** Bodies up to this many times the limit are read and discarded so the client sees the 413. */
const DISCARD_FACTOR = 16;

/**
 * A refused request's body is read and dropped up to this many bytes before the refusal is sent, so
 * the client reads the answer; a longer one is answered at once and its connection closed unread.
 */
export const REFUSED_BODY_DROP_BYTES = 1024 * 1024;

/**
 * Collects a request body up to `limit` bytes. uWS hands out chunks that are neutered after the
 * callback returns, so each one is copied. Past the limit the rest is discarded (not buffered)
 * and the 413 is sent once the body ends, so the client reads the answer instead of a broken
 * pipe; a declared length beyond DISCARD_FACTOR × limit is refused at once and the connection closed.
 * A body still incomplete `timeoutMs` after the first chunk that did not end it (a slow-loris sender:
 * uWS restarts its idle timeout on every chunk) is answered 408 and its connection closed; the
 * timer is armed only then, so a body that arrives in one chunk costs none.
 * Returns `stop`: the rest of the body is not collected and nothing above is called back; true when
 * the body had not been handed over yet (the caller answers, and closes the connection the body still
 * arrives on). With `answer`, the caller's answer waits for the rest of the body, read and dropped up
 * to REFUSED_BODY_DROP_BYTES (and `limit`) and `timeoutMs`, and is sent when it ends, or at once when
 * it is longer: a connection closed with a body's bytes still unread is reset, and a client still
 * sending (a streamed multipart upload) gets the reset rather than the answer.
 */
export function readBody(
  res: HttpResponse,
  limit: number,
  declaredLength: number,
  onBody: (body: Buffer) => void,
  onError: (err: CatracaError, closeConnection: boolean) => void,
  timeoutMs = 0,
): (answer?: () => void) => boolean {
  if (declaredLength > limit * DISCARD_FACTOR) {
    onError(errors.bodyTooLarge(limit), true);
    return () => false;
  }
  const chunks: Buffer[] = [];
  let size = 0;
  let timer: NodeJS.Timeout | undefined;
  let failed = false;
  /** set by stop(answer): called once, when the rest of the body has been dropped */
  let answerWhenEnded: (() => void) | undefined;
  const dropLimit = Math.min(limit, REFUSED_BODY_DROP_BYTES);
  const answerNow = () => {
    const answer = answerWhenEnded;
    answerWhenEnded = undefined;
    if (timer) clearTimeout(timer);
    answer?.();
  };
  const fail = (err: CatracaError, closeConnection: boolean) => {
    if (failed) return;
    failed = true;
    if (timer) clearTimeout(timer);
    chunks.length = 0;
    onError(err, closeConnection);
  };
  res.onData((chunk, isLast) => {
    if (answerWhenEnded) {
      size += chunk.byteLength;
      if (isLast || size > dropLimit) answerNow();
      return;
    }
    if (failed) return;
    if (isLast) {
      if (timer) clearTimeout(timer);
    } else if (!timer && timeoutMs > 0) {
      timer = setTimeout(() => (answerWhenEnded ? answerNow() : fail(errors.bodyTimeout(timeoutMs), true)), timeoutMs);
    }
    size += chunk.byteLength;
    if (size > limit) {
      chunks.length = 0;
      if (size > limit * DISCARD_FACTOR) {
        fail(errors.bodyTooLarge(limit), true);
        return;
      }
      if (isLast) fail(errors.bodyTooLarge(limit), false);
      return;
    }
    chunks.push(Buffer.from(Buffer.from(chunk)));
    if (isLast) {
      failed = true; // handed over: stop() has nothing left to stop
      onBody(chunks.length === 1 ? chunks[0] : Buffer.concat(chunks, size));
    }
  });
  return (answer) => {
    if (failed) return false;
    failed = true;
    chunks.length = 0;
    if (answer && size <= dropLimit && declaredLength <= dropLimit) {
      answerWhenEnded = answer;
      if (!timer && timeoutMs > 0) timer = setTimeout(answerNow, timeoutMs);
    } else {
      if (timer) clearTimeout(timer);
      answer?.();
    }
    return true;
  };
}

/** A refusal decided before the body was read, sent once the body has arrived and been dropped (see `readBody`'s `stop`). */
export function answerAfterBody(res: HttpResponse, limit: number, declaredLength: number, timeoutMs: number, answer: () => void): void {
  readBody(res, limit, declaredLength, answer, answer, timeoutMs)(answer);
}
