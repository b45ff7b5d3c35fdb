import { z } from 'zod';
import { PricesSchema } from '../bus/messages.ts';

// The NATS requests between a front door and a worker of a model's pool for `vendor` batch mode
// (docs/batch.md): on subject catraca.vbatch.<pool>, queue group vbatch.<pool>; the worker holds the
// deployment's key, so it talks to the vendor's batch API. A line is sent to the vendor with the
// custom_id `l<line>` (its 0-based line in the batch); the door maps it back to the client's.

const ModelRef = z.object({
  id: z.string(),
  /** the deployment's id ('primary' or dep_…) */
  deployment: z.string(),
  /** the deployment's batch prices the door held at: the worker refuses when its catalog disagrees */
  prices: PricesSchema,
});

export const VendorLineSchema = z.object({
  custom_id: z.string(),
  /** the job body the line's protocol made of it (minus `model`), as an online job's */
  body: z.record(z.string(), z.unknown()),
  /** the output cap the hold paid for */
  max_tokens: z.number().int().nonnegative(),
});
export type VendorLine = z.infer<typeof VendorLineSchema>;

export const VendorBatchRequestSchema = z.discriminatedUnion('op', [
  z.object({
    op: z.literal('submit'),
    model: ModelRef,
    endpoint: z.string(),
    lines: z.array(VendorLineSchema).min(1),
    /** the chunk's name (`<batch id>:<chunk>`): OpenAI's batch is created with metadata {catraca_chunk: it} */
    chunk: z.string().optional(),
    /**
     * The chunk may be at the vendor already (an earlier submit whose answer was not stored: a door
     * or worker died, a timeout): before submitting, look among the vendor's batches created since
     * this time (epoch seconds) for one named `chunk`, and adopt it. OpenAI only (Anthropic's
     * message batches have no metadata: docs/batch.md).
     */
    adopt_since: z.number().int().optional(),
  }),
  z.object({
    op: z.literal('poll'),
    model: ModelRef,
    vendor_batch_id: z.string(),
    /** who the succeeded lines' usage is billed to: each line's request id is its hold */
    tenant_id: z.string(),
    key_id: z.string(),
    batch_id: z.string(),
    requests: z.record(z.string(), z.string()),
    /** the results are answered in pages (a NATS message is bounded): the first result of this page */
    offset: z.number().int().nonnegative().optional(),
  }),
  z.object({ op: z.literal('cancel'), model: ModelRef, vendor_batch_id: z.string() }),
]);
export type VendorBatchRequest = z.infer<typeof VendorBatchRequestSchema>;

/** A line's answer from the vendor: its HTTP status and body (or an error of the vendor's batch itself). */
export const VendorResultSchema = z.object({
  custom_id: z.string(),
  status_code: z.number().int().nullable(),
  body: z.unknown(),
  error: z.object({ code: z.string(), message: z.string() }).nullable(),
});
export type VendorResult = z.infer<typeof VendorResultSchema>;

export const VendorBatchReplySchema = z.discriminatedUnion('ok', [
  z.object({
    ok: z.literal(true),
    vendor_batch_id: z.string(),
    /** the vendor's status of its batch */
    status: z.string(),
    /** the vendor's batch ended: `results` holds every line it answered (a line missing did not run) */
    ended: z.boolean(),
    results: z.array(VendorResultSchema).optional(),
    /** more results follow: ask again from this offset */
    next_offset: z.number().int().positive().optional(),
    /** why the vendor failed the whole batch (its `errors`), when it did */
    failure: z.string().optional(),
    /** a submit found the chunk at the vendor already (`adopt_since`) and submitted nothing */
    adopted: z.boolean().optional(),
  }),
  z.object({ ok: z.literal(false), code: z.string(), message: z.string() }),
]);
export type VendorBatchReply = z.infer<typeof VendorBatchReplySchema>;
