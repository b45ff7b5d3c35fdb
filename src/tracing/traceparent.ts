import { randomBytes } from 'node:crypto';

// W3C Trace Context (https://www.w3.org/TR/trace-context/): the `traceparent` header,
//   version "-" trace-id "-" parent-id "-" trace-flags
//   00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01
// lowercase hex; an all-zero trace-id or parent-id is invalid; version ff is invalid; a future
// version (01–fe) may carry more fields after the four, which are ignored.

export interface SpanContext {
  /** 32 lowercase hex digits */
  traceId: string;
  /** 16 lowercase hex digits */
  spanId: string;
  /** bit 0: sampled */
  traceFlags: number;
}

const HEADER = /^([0-9a-f]{2})-([0-9a-f]{32})-([0-9a-f]{16})-([0-9a-f]{2})(-.*)?$/;
const ZERO_TRACE = '0'.repeat(32);
const ZERO_SPAN = '0'.repeat(16);

/** The span context a `traceparent` header names, or null when it is absent or invalid (then a new trace starts). */
export function parseTraceparent(header: string | null | undefined): SpanContext | null {
  if (!header) return null;
  const m = HEADER.exec(header.trim());
  if (!m) return null;
  const [, version, traceId, spanId, flags, rest] = m;
  if (version === 'ff') return null;
  // version 00 has exactly four fields; a later version may have more
  if (version === '00' && rest !== undefined) return null;
  if (traceId === ZERO_TRACE || spanId === ZERO_SPAN) return null;
  return { traceId: traceId!, spanId: spanId!, traceFlags: parseInt(flags!, 16) };
}

/** `00-<trace-id>-<span-id>-<flags>` */
export function formatTraceparent(ctx: SpanContext): string {
  return `00-${ctx.traceId}-${ctx.spanId}-${(ctx.traceFlags & 0xff).toString(16).padStart(2, '0')}`;
}

export const isSampled = (ctx: SpanContext) => (ctx.traceFlags & 1) === 1;

// ids from one random pool refilled 4 KiB at a time: one randomBytes call per ~170 spans
let pool = Buffer.alloc(0);
let offset = 0;
function hex(bytes: number): string {
  for (;;) {
    if (offset + bytes > pool.length) {
      pool = randomBytes(4096);
      offset = 0;
    }
    const id = pool.toString('hex', offset, offset + bytes);
    offset += bytes;
    // all-zero ids are invalid (probability 2^-64 or less; drawn again)
    if (!/^0+$/.test(id)) return id;
  }
}

export const newTraceId = (): string => hex(16);
export const newSpanId = (): string => hex(8);
