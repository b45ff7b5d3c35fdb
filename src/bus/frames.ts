import { z } from 'zod';
import { PricesSchema, ToolCallDeltaSchema, UsageCountSchema } from './messages.ts';

// Frames: what a worker sends the front door about one request, one NATS message each, on
// catraca.stream.<door>.<request>. Per-token frames are the hot path (one per token of every
// stream), so they are not JSON objects: a type byte, the sequence number, a newline, a payload.
//
//   c<seq>\n"<text>"        a text delta; the payload is the JSON string literal of the text,
//                           exactly as it goes into the SSE chunk (the door copies the bytes)
//   x<seq>\n{…}             an extended delta: {content?, reasoning?, reasoning_signature?,
//                           redacted_reasoning?, tool_calls?} (JSON)
//   b<seq>\n…               a piece of a whole response body (embeddings, token counts): the
//                           pieces of a request, concatenated in order, are its JSON body
//   k<seq>                  keepalive (the stream is quiet; also the worker's liveness)
//   d<seq>\n{…}             done: {finish_reason, usage, estimated} (JSON, checked with zod)
//   e<seq>\n{…}             error: {status, code, message, usage?, retry_after?} (JSON, zod)
//
// The bus is ours (NATS permissions keep anyone else off it), so a text delta gets a cheap check
// (a JSON string literal: quotes at both ends) instead of a parse; terminal and extended frames,
// one or a few per request, are parsed and validated with zod.

export const ExtendedDeltaSchema = z.object({
  content: z.string().optional(),
  reasoning: z.string().optional(),
  /** the signature that closes a reasoning block (Anthropic thinking): returned to the vendor exactly as received */
  reasoning_signature: z.string().optional(),
  /** a reasoning block the vendor sent encrypted (Anthropic redacted_thinking): its opaque data */
  redacted_reasoning: z.string().optional(),
  tool_calls: z.array(ToolCallDeltaSchema).optional(),
});
export type ExtendedDelta = z.infer<typeof ExtendedDeltaSchema>;

export const DoneSchema = z.object({
  /** OpenAI's finish reasons: stop, length, tool_calls, content_filter */
  finish_reason: z.string(),
  usage: UsageCountSchema,
  estimated: z.boolean(),
  /** the stop sequence that ended the output, when the vendor says which */
  stop_sequence: z.string().optional(),
  /** the prices of the deployment that answered (absent: the job's) */
  prices: PricesSchema.optional(),
  /** micro-BRL of failed attempts added to the cost (see UsageMessage.extra_cost) */
  extra_cost: z.string().regex(/^\d+$/).optional(),
});
export type Done = z.infer<typeof DoneSchema>;

export const FrameErrorSchema = z.object({
  /** HTTP status the front door answers with (the upstream's 4xx mapped, 502/503/504, 499 on cancel). */
  status: z.number().int(),
  code: z.string(),
  message: z.string(),
  usage: UsageCountSchema.optional(),
  /** seconds, from the upstream's retry-after (429) */
  retry_after: z.number().nonnegative().optional(),
  prices: PricesSchema.optional(),
  extra_cost: z.string().regex(/^\d+$/).optional(),
  /** a failure before the first byte of a job with `fallback`: no usage was published; another model may be tried */
  retryable: z.boolean().optional(),
});
export type FrameError = z.infer<typeof FrameErrorSchema>;

export const FRAME = { text: 0x63, extended: 0x78, keepalive: 0x6b, done: 0x64, error: 0x65, body: 0x62 } as const; // c x k d e b

/** What a worker sends; `encodeFrame` turns it into bytes. */
export type OutFrame =
  | { t: 'text'; content: string }
  | { t: 'extended'; delta: ExtendedDelta }
  | { t: 'keepalive' }
  | { t: 'body'; piece: string }
  | { t: 'done'; done: Done }
  | { t: 'error'; error: FrameError };

export function encodeFrame(seq: number, f: OutFrame): string {
  switch (f.t) {
    case 'text':
      return `c${seq}\n${JSON.stringify(f.content)}`;
    case 'extended':
      return `x${seq}\n${JSON.stringify(f.delta)}`;
    case 'keepalive':
      return `k${seq}`;
    case 'body':
      return `b${seq}\n${f.piece}`;
    case 'done':
      return `d${seq}\n${JSON.stringify(f.done)}`;
    case 'error':
      return `e${seq}\n${JSON.stringify(f.error)}`;
  }
}

/** A received frame, before its payload is interpreted: the payload is a view of the message. */
export interface RawFrame {
  type: number;
  seq: number;
  payload: Uint8Array;
}

/** Splits a frame; null when it is not one (wrong type byte, no sequence number). */
export function splitFrame(data: Uint8Array): RawFrame | null {
  const type = data[0];
  if (type !== FRAME.text && type !== FRAME.extended && type !== FRAME.keepalive && type !== FRAME.done && type !== FRAME.error && type !== FRAME.body)
    return null;
  let seq = 0;
  let i = 1;
  for (; i < data.length && i < 12; i++) {
    const c = data[i];
    if (c === 0x0a) break;
    if (c < 0x30 || c > 0x39) return null;
    seq = seq * 10 + (c - 0x30);
  }
  if (i === 1) return null;
  if (type === FRAME.keepalive) return i === data.length ? { type, seq, payload: data.subarray(i) } : null;
  if (data[i] !== 0x0a) return null;
  const payload = data.subarray(i + 1);
  // a text delta must be one JSON string literal: it is copied into the SSE chunk as it is
  if (type === FRAME.text && (payload.length < 2 || payload[0] !== 0x22 || payload[payload.length - 1] !== 0x22)) return null;
  return { type, seq, payload };
}

const decoder = new TextDecoder();
export const payloadText = (p: Uint8Array): string => decoder.decode(p);

/** Parses a JSON payload with its schema; null when it does not match. */
export function parsePayload<T>(schema: z.ZodType<T>, payload: Uint8Array): T | null {
  try {
    const r = schema.safeParse(JSON.parse(decoder.decode(payload)));
    return r.success ? r.data : null;
  } catch {
    return null;
  }
}

/** A frame decoded into an object (tests, and the places that are not per-token). */
export type Frame =
  | { t: 'delta'; seq: number; content: string; reasoning?: string; tool_calls?: ExtendedDelta['tool_calls'] }
  | { t: 'keepalive'; seq: number }
  | { t: 'body'; seq: number; piece: string }
  | ({ t: 'done'; seq: number } & Done)
  | ({ t: 'error'; seq: number } & FrameError);

export function decodeFrame(data: Uint8Array): Frame | null {
  const raw = splitFrame(data);
  if (!raw) return null;
  const { seq, payload } = raw;
  switch (raw.type) {
    case FRAME.text: {
      const content = parsePayload(z.string(), payload);
      return content === null ? null : { t: 'delta', seq, content };
    }
    case FRAME.extended: {
      const d = parsePayload(ExtendedDeltaSchema, payload);
      return d === null ? null : { t: 'delta', seq, ...d, content: d.content ?? '' };
    }
    case FRAME.keepalive:
      return { t: 'keepalive', seq };
    case FRAME.body:
      return { t: 'body', seq, piece: payloadText(payload) };
    case FRAME.done: {
      const d = parsePayload(DoneSchema, payload);
      return d === null ? null : { t: 'done', seq, ...d };
    }
    default: {
      const e = parsePayload(FrameErrorSchema, payload);
      return e === null ? null : { t: 'error', seq, ...e };
    }
  }
}
