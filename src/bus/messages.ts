import { z } from 'zod';

// The wire messages between front door, workers and metering. JSON on NATS.

// A job names its model; it never carries where the upstream is or which key to use. The worker
// resolves the model in its own catalog and serves the job only when that entry's fingerprint
// equals the one the front door priced the request with (src/catalog/catalog.ts).
export const JobModelSchema = z.object({
  id: z.string(),
  fingerprint: z.string(),
  /** micro-BRL per 1M tokens, as decimal strings (bigint does not survive JSON) */
  input_price: z.string().regex(/^\d+$/),
  output_price: z.string().regex(/^\d+$/),
});

export const JobSchema = z.object({
  v: z.literal(1),
  request_id: z.string(),
  tenant_id: z.string(),
  key_id: z.string(),
  model: JobModelSchema,
  /** The client's request body as received (unknown OpenAI parameters included), minus `model`. */
  body: z.record(z.string(), z.unknown()),
  /** The hold the request was admitted under (its own request id, or its front door's lease); settlement draws on it. */
  hold: z.string().optional(),
  /** Output cap the hold pays for; the worker sends it upstream as max_tokens. */
  max_tokens: z.number().int().positive(),
  /** Subject to publish frames on. */
  reply_to: z.string(),
  /** Epoch ms after which the worker abandons the request. */
  deadline: z.number().int(),
});
export type Job = z.infer<typeof JobSchema>;

/** A worker's answer to a job request: accepted (frames follow) or refused (try another / 503). */
export const JobAckSchema = z.discriminatedUnion('ok', [
  z.object({ ok: z.literal(true), worker: z.string() }),
  z.object({ ok: z.literal(false), code: z.enum(['busy', 'invalid_job', 'draining']), message: z.string() }),
]);
export type JobAck = z.infer<typeof JobAckSchema>;

export const UsageCountSchema = z.object({
  prompt_tokens: z.number().int().nonnegative(),
  completion_tokens: z.number().int().nonnegative(),
});

/** One piece of a streamed tool call, in OpenAI's delta shape (pieces merge by `index`). */
export const ToolCallDeltaSchema = z.object({
  index: z.number().int().nonnegative(),
  id: z.string().optional(),
  type: z.literal('function').optional(),
  function: z.object({ name: z.string().optional(), arguments: z.string().optional() }).optional(),
});
export type ToolCallDelta = z.infer<typeof ToolCallDeltaSchema>;

export const UsageMessageSchema = z.object({
  v: z.literal(1),
  request_id: z.string(),
  tenant_id: z.string(),
  key_id: z.string(),
  model: z.string(),
  pool: z.string(),
  input_price: z.string().regex(/^\d+$/),
  output_price: z.string().regex(/^\d+$/),
  prompt_tokens: z.number().int().nonnegative(),
  completion_tokens: z.number().int().nonnegative(),
  /** true when the upstream gave no usage and the worker counted tokens itself */
  estimated: z.boolean(),
  outcome: z.enum(['completed', 'cancelled', 'error']),
  /** the job's hold (see JobSchema.hold) */
  hold: z.string().optional(),
  /** epoch ms when the request ended at the worker */
  ended_at: z.number().int(),
  worker: z.string(),
});
export type UsageMessage = z.infer<typeof UsageMessageSchema>;

/**
 * Several requests' usage in one JetStream message (a worker's usage of one linger window):
 * msgID = `batch`, unique per publish. Each item settles exactly once by its request id, as a
 * lone v1 message does; `traceparent` is the item's job span (a lone message carries it as a header).
 */
export const UsageBatchSchema = z.object({
  v: z.literal(2),
  batch: z.string(),
  items: z.array(UsageMessageSchema.extend({ traceparent: z.string().optional() })).min(1),
});
export type UsageBatch = z.infer<typeof UsageBatchSchema>;

/** A worker's announcement on catraca.capacity.<pool>: it can take `free` more jobs now. */
export const CapacitySchema = z.object({ worker: z.string(), free: z.number().int().positive() });

export const KeyInvalidatedSchema = z.object({ key_id: z.string() });

const enc = new TextEncoder();
const dec = new TextDecoder();
export const encode = (value: unknown): Uint8Array => enc.encode(JSON.stringify(value));
export const decodeJson = (data: Uint8Array): unknown => JSON.parse(dec.decode(data));
