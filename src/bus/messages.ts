import { z } from 'zod';

// The wire messages between front door, workers and metering. JSON on NATS.

// A job names its model; it never carries where the upstream is or which key to use. The worker
// resolves the model in its own catalog and serves the job only when that entry's fingerprint
// equals the one the front door priced the request with (src/catalog/catalog.ts).
const price = z.string().regex(/^\d+$/);

/** A model's prices, micro-BRL per 1M tokens, as decimal strings (bigint does not survive JSON); cache prices only where the catalog has them. */
export const PricesSchema = z.object({
  input_price: price,
  output_price: price,
  cached_input_price: price.optional(),
  cache_write_price: price.optional(),
  cache_write_1h_price: price.optional(),
});
export type WirePrices = z.infer<typeof PricesSchema>;

export const JobModelSchema = PricesSchema.extend({
  id: z.string(),
  fingerprint: z.string(),
});

/**
 * The API a job's body speaks: `chat` (OpenAI chat completions: every adapter takes it), or a
 * vendor's own API passed through natively (`messages`: Anthropic's, to Anthropic-protocol models;
 * `completions`: legacy text completions; `embeddings`; `count_tokens`: Anthropic's token count, free).
 * The front door translates what an adapter does not take natively into `chat`.
 */
export const JOB_APIS = ['chat', 'messages', 'completions', 'embeddings', 'count_tokens'] as const;
export type JobApi = (typeof JOB_APIS)[number];

export const JobSchema = z.object({
  v: z.literal(1),
  /** absent: chat (jobs of front doors before the other APIs); workers are upgraded before front doors */
  api: z.enum(JOB_APIS).optional(),
  request_id: z.string(),
  tenant_id: z.string(),
  key_id: z.string(),
  model: JobModelSchema,
  /** The client's request body in the job's `api` (translated by the front door where needed), minus `model`. */
  body: z.record(z.string(), z.unknown()),
  /** The hold the request was admitted under (its own request id, or its front door's lease); settlement draws on it. */
  hold: z.string().optional(),
  /** OpenRouter's provider preferences, applied by the worker to the model's deployments. */
  routing: z
    .object({
      order: z.array(z.string()).optional(),
      only: z.array(z.string()).optional(),
      ignore: z.array(z.string()).optional(),
      allow_fallbacks: z.boolean().optional(),
      sort: z.enum(['price', 'throughput', 'latency']).optional(),
    })
    .optional(),
  /** The key's data country (ISO 3166-1 alpha-2): only deployments in it may serve the job. */
  data_country: z
    .string()
    .regex(/^[A-Z]{2}$/)
    .optional(),
  /**
   * The front door has more models to try (OpenRouter `models`): a failure before the first byte
   * that another model could serve publishes no usage; the error frame says `retryable` and carries
   * what the vendor may bill, which the next attempt's job brings as `carry_cost`.
   */
  fallback: z.boolean().optional(),
  /** micro-BRL that earlier attempts of this request may have cost (a cut first-byte timeout): added to its debit */
  carry_cost: z.string().regex(/^\d+$/).optional(),
  /** A line of a batch (docs/batch.md): priced, and billed by the worker, at the deployments' batch prices. */
  batch: z.boolean().optional(),
  /** that batch's id (batch_…), recorded on the line's ledger row */
  batch_id: z.string().max(64).optional(),
  /** The public API the request came in by (chat, messages, responses, …), for the ledger; absent: chat. */
  route: z.string().max(32).optional(),
  /** The client's end user (OpenAI's `user`, Anthropic's metadata.user_id), for the ledger. */
  end_user: z.string().max(256).optional(),
  /** Output cap the hold pays for; the worker sends it upstream as max_tokens. 0: an API with no output (embeddings). */
  max_tokens: z.number().int().nonnegative(),
  /** Subject to publish frames on. */
  reply_to: z.string(),
  /** Epoch ms after which the worker abandons the request. */
  deadline: z.number().int(),
});
export type Job = z.infer<typeof JobSchema>;

/**
 * NATS header of a job message: epoch ms (the front door's clock) after which the door no longer
 * waits for the ack. A worker that would ack later refuses the job: its request was answered 504.
 */
export const ACK_BY_HEADER = 'Catraca-Ack-By';

/** A worker's answer to a job request: accepted (frames follow) or refused (try another / 503). */
export const JobAckSchema = z.discriminatedUnion('ok', [
  z.object({ ok: z.literal(true), worker: z.string() }),
  z.object({ ok: z.literal(false), code: z.enum(['busy', 'invalid_job', 'draining']), message: z.string() }),
]);
export type JobAck = z.infer<typeof JobAckSchema>;

const count = z.number().int().nonnegative();

/**
 * Tokens of one request as the vendor billed them, in OpenAI's convention: `prompt_tokens` counts
 * all input (cache reads and writes included), `completion_tokens` all output (reasoning included).
 */
export const UsageCountSchema = z.object({
  prompt_tokens: count,
  completion_tokens: count,
  /** input read from the vendor's prompt cache (OpenAI cached_tokens, Anthropic cache_read_input_tokens) */
  cached_tokens: count.optional(),
  /** input written to the vendor's prompt cache at its default (5-minute) lifetime */
  cache_write_tokens: count.optional(),
  /** input written to the vendor's prompt cache for one hour (Anthropic) */
  cache_write_1h_tokens: count.optional(),
  /** output spent on reasoning */
  reasoning_tokens: count.optional(),
});
export type UsageCount = z.infer<typeof UsageCountSchema>;

/** One piece of a streamed tool call, in OpenAI's delta shape (pieces merge by `index`). */
export const ToolCallDeltaSchema = z.object({
  index: z.number().int().nonnegative(),
  id: z.string().optional(),
  type: z.literal('function').optional(),
  function: z.object({ name: z.string().optional(), arguments: z.string().optional() }).optional(),
});
export type ToolCallDelta = z.infer<typeof ToolCallDeltaSchema>;

export const UsageMessageSchema = PricesSchema.extend({
  v: z.literal(1),
  request_id: z.string(),
  tenant_id: z.string(),
  key_id: z.string(),
  model: z.string(),
  pool: z.string(),
  prompt_tokens: count,
  completion_tokens: count,
  cached_tokens: count.optional(),
  cache_write_tokens: count.optional(),
  cache_write_1h_tokens: count.optional(),
  reasoning_tokens: count.optional(),
  /** the API of the job (absent: chat) */
  api: z.enum(JOB_APIS).optional(),
  /** the job's route and end user (JobSchema) */
  route: z.string().max(32).optional(),
  end_user: z.string().max(256).optional(),
  /** the deployment that answered (its id; absent: the model's primary) */
  deployment: z.string().optional(),
  /** where it ran: the deployment's name (absent: the primary), and the region and country it declared (absent: not said) */
  ran_on: z.string().max(64).optional(),
  region: z.string().max(40).optional(),
  country: z.string().length(2).optional(),
  /** the batch the request was a line of (JobSchema.batch_id), recorded as ledger.batch_id */
  batch_id: z.string().max(64).optional(),
  /** micro-BRL added to the cost at these prices: what failed attempts on other deployments or models may have cost */
  extra_cost: z.string().regex(/^\d+$/).optional(),
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
/** catraca.tenants.changed: a tenant was suspended or reactivated. */
export const TenantChangedSchema = z.object({ tenant_id: z.string() });

const enc = new TextEncoder();
const dec = new TextDecoder();
export const encode = (value: unknown): Uint8Array => enc.encode(JSON.stringify(value));
export const decodeJson = (data: Uint8Array): unknown => JSON.parse(dec.decode(data));
