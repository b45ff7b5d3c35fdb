import type { Msg, NatsConnection, Subscription } from 'nats';
import { priceStrings, samePrices } from '../billing/money.ts';
import { type VendorBatchReply, type VendorBatchRequest, VendorBatchRequestSchema, type VendorResult } from '../batch/vendor-wire.ts';
import { decodeJson, encode, type Job, type JobApi, type UsageCount } from '../bus/messages.ts';
import { RequestMux } from '../bus/requests.ts';
import { subjects } from '../bus/subjects.ts';
import { asDeployment, type CatalogEntry, type Deployment, type ModelSource } from '../catalog/catalog.ts';
import type { Logger } from '../log.ts';
import {
  batchResults,
  cancelBatch as openaiCancel,
  createBatch as openaiCreate,
  findBatch,
  OPENAI_BATCH_ENDED,
  retrieveBatch as openaiRetrieve,
  uploadBatchFile,
  usageOfBody,
} from '../providers/openai/batch.ts';
import { completionsRequestBody } from '../providers/openai/completions.ts';
import { embeddingsRequestBody } from '../providers/openai/embeddings.ts';
import { buildUpstreamBody } from '../providers/openai/request.ts';
import { cancelMessageBatch, createMessageBatch, messageBatchResults, messageUsage, retrieveMessageBatch } from '../providers/anthropic/batch.ts';
import { buildMessagesBody } from '../providers/anthropic/messages.ts';
import { newCall, type UpstreamCall, UpstreamError } from '../providers/types.ts';
import { UsagePublisher } from './usage-publisher.ts';

// `vendor` batch mode, the worker's side (docs/batch.md): a front door asks a worker of the model's
// pool — which alone holds the deployment's key — to submit a chunk of lines to the deployment's
// own batch API, to poll it, or to cancel it. When a poll finds the vendor's batch ended, the
// worker reads its results and publishes one usage message per succeeded line (request id = the
// line's, hold = the line's own hold, batch prices of the deployment, batch_id) before it answers:
// metering debits each once, whatever a poll repeated after a door's restart publishes again.

export interface VendorBatchServiceOptions {
  nc: NatsConnection;
  pools: string[];
  workerId: string;
  catalog: ModelSource;
  /** the upstream key variables this worker may read (WORKER_UPSTREAM_KEYS) */
  env: Record<string, string | undefined>;
  log: Logger;
}

/** The metadata key naming the chunk an OpenAI batch was submitted for (`<batch id>:<chunk>`). */
export const CHUNK_METADATA = 'catraca_chunk';

const refusal = (code: string, message: string): VendorBatchReply => ({ ok: false, code, message });

export class VendorBatchService {
  private readonly subs: Subscription[];
  private readonly usage: UsagePublisher;
  private inFlight = 0;

  constructor(private readonly o: VendorBatchServiceOptions) {
    this.usage = new UsagePublisher(o.nc, new RequestMux(o.nc), o.log);
    this.subs = o.pools.map((pool) =>
      o.nc.subscribe(subjects.vendorBatch(pool), { queue: subjects.vendorBatchGroup(pool), callback: (err, msg) => !err && void this.onRequest(pool, msg) }),
    );
  }

  async stop(): Promise<void> {
    await Promise.all(this.subs.map((s) => s.drain().catch(() => {})));
    for (let i = 0; i < 100 && this.inFlight > 0; i++) await new Promise((r) => setTimeout(r, 50));
    await this.usage.flushed();
  }

  private async onRequest(pool: string, msg: Msg): Promise<void> {
    if (!msg.reply) return;
    this.inFlight++;
    let reply: VendorBatchReply;
    try {
      const parsed = VendorBatchRequestSchema.safeParse(decodeJson(msg.data));
      reply = parsed.success ? await this.handle(pool, parsed.data) : refusal('invalid_request', 'The request does not match the vendor batch schema.');
    } catch (err) {
      const e = err as Error;
      reply = err instanceof UpstreamError ? refusal(err.code, err.message) : refusal('internal_error', e.message);
      this.o.log.warn('vendor batch request failed', { pool, err: e });
    } finally {
      this.inFlight--;
    }
    try {
      msg.respond(encode(reply));
    } catch {
      /* requester gone */
    }
  }

  /** The model and deployment named, when the worker's catalog has them at the prices the door held at. */
  private async resolve(pool: string, ref: VendorBatchRequest['model']): Promise<{ entry: CatalogEntry; d: Deployment } | string> {
    let model = await this.o.catalog.get(ref.id);
    let d = model?.deployments.find((x) => x.id === ref.deployment);
    if (!model || !d || !samePrices(priceStrings(d.batchPrices), ref.prices)) {
      model = await this.o.catalog.fetch(ref.id);
      d = model?.deployments.find((x) => x.id === ref.deployment);
    }
    if (!model || model.pool !== pool) return `Model ${ref.id} is not served by pool ${pool}.`;
    if (!d) return `Model ${ref.id} has no deployment ${ref.deployment}.`;
    if (!samePrices(priceStrings(d.batchPrices), ref.prices)) return `The batch prices of ${ref.id} (${d.name}) changed.`;
    return { entry: asDeployment(model, d), d };
  }

  private keyOf(entry: CatalogEntry): { baseUrl: string; key: string | null } {
    if (!entry.base_url) throw new UpstreamError(502, 'upstream_not_configured', `Model ${entry.id} has no upstream base URL configured.`);
    if (!entry.api_key_env) return { baseUrl: entry.base_url, key: null };
    const key = this.o.env[entry.api_key_env] || null;
    if (!key) throw new UpstreamError(502, 'upstream_not_configured', `The upstream API key for model ${entry.id} is not configured on this worker.`);
    return { baseUrl: entry.base_url, key };
  }

  private async handle(pool: string, r: VendorBatchRequest): Promise<VendorBatchReply> {
    const resolved = await this.resolve(pool, r.model);
    if (typeof resolved === 'string') return refusal('invalid_job', resolved);
    const { entry, d } = resolved;
    if (entry.protocol === 'anthropic') return this.anthropic(pool, r, entry, d);
    if (entry.protocol !== 'openai') {
      return refusal(
        'batch_not_supported',
        `Deployment ${d.name} of ${entry.id} speaks ${entry.protocol}: vendor batches are built for OpenAI's and Anthropic's batch APIs.`,
      );
    }
    const { baseUrl, key } = this.keyOf(entry);
    switch (r.op) {
      case 'submit': {
        if (r.chunk && r.adopt_since !== undefined) {
          // an earlier submit of this chunk may have reached the vendor: its batch carries the chunk's name
          const found = await findBatch(baseUrl, key, { key: CHUNK_METADATA, value: r.chunk, since: r.adopt_since });
          if (found) {
            this.o.log.info('vendor batch: the chunk was at the vendor already, adopted', { chunk: r.chunk, vendor_batch_id: found.id });
            return { ok: true, vendor_batch_id: found.id, status: found.status, ended: false, adopted: true };
          }
        }
        if (!Object.hasOwn(VENDOR_BODIES, r.endpoint)) return refusal('batch_not_supported', `Vendor batches of ${r.endpoint} are not built.`);
        const lines = r.lines.map((l) => ({
          custom_id: l.custom_id,
          method: 'POST',
          url: r.endpoint,
          body: vendorBody(entry, l.body, l.max_tokens, r.endpoint),
        }));
        const fileId = await uploadBatchFile(baseUrl, key, lines, 'catraca-batch.jsonl');
        const b = await openaiCreate(baseUrl, key, fileId, r.endpoint, { catraca: 'vendor-mode', ...(r.chunk ? { [CHUNK_METADATA]: r.chunk } : {}) });
        return { ok: true, vendor_batch_id: b.id, status: b.status, ended: false };
      }
      case 'cancel': {
        const b = await openaiCancel(baseUrl, key, r.vendor_batch_id);
        return { ok: true, vendor_batch_id: b.id, status: b.status, ended: OPENAI_BATCH_ENDED.includes(b.status) };
      }
      case 'poll': {
        const b = await openaiRetrieve(baseUrl, key, r.vendor_batch_id);
        if (!OPENAI_BATCH_ENDED.includes(b.status)) return { ok: true, vendor_batch_id: b.id, status: b.status, ended: false };
        const { results, next } = page(b.status === 'failed' ? [] : await batchResults(baseUrl, key, b), r.offset ?? 0);
        for (const res of results) this.bill(pool, r, d, res);
        await this.usage.flushed();
        const failure = b.errors?.data?.[0] ? `${b.errors.data[0].code ?? 'failed'}: ${b.errors.data[0].message ?? ''}` : undefined;
        return {
          ok: true,
          vendor_batch_id: b.id,
          status: b.status,
          ended: true,
          results,
          ...(next ? { next_offset: next } : {}),
          ...(failure ? { failure } : {}),
        };
      }
    }
  }

  /** Anthropic's Message Batches: the same operations, the requests inline, `ended` once done. */
  private async anthropic(pool: string, r: VendorBatchRequest, entry: CatalogEntry, d: Deployment): Promise<VendorBatchReply> {
    const { baseUrl, key } = this.keyOf(entry);
    switch (r.op) {
      case 'submit': {
        const requests = r.lines.map((l) => ({ custom_id: l.custom_id, params: vendorMessagesBody(entry, l.body, l.max_tokens) }));
        const b = await createMessageBatch(baseUrl, key, requests);
        return { ok: true, vendor_batch_id: b.id, status: b.processing_status, ended: false };
      }
      case 'cancel': {
        const b = await cancelMessageBatch(baseUrl, key, r.vendor_batch_id);
        return { ok: true, vendor_batch_id: b.id, status: b.processing_status, ended: b.processing_status === 'ended' };
      }
      case 'poll': {
        const b = await retrieveMessageBatch(baseUrl, key, r.vendor_batch_id);
        if (b.processing_status !== 'ended') return { ok: true, vendor_batch_id: b.id, status: b.processing_status, ended: false };
        const { results, next } = page(await messageBatchResults(baseUrl, key, b), r.offset ?? 0);
        for (const res of results) this.bill(pool, r, d, res, messageUsage);
        await this.usage.flushed();
        return { ok: true, vendor_batch_id: b.id, status: b.processing_status, ended: true, results, ...(next ? { next_offset: next } : {}) };
      }
    }
  }

  /** A succeeded line's usage message: debited by metering at the deployment's batch prices, against the line's hold. */
  private bill(
    pool: string,
    r: Extract<VendorBatchRequest, { op: 'poll' }>,
    d: Deployment,
    res: VendorResult,
    usageOf: (body: unknown) => UsageCount | null = usageOfBody,
  ): void {
    const requestId = r.requests[res.custom_id];
    if (!requestId || res.status_code !== 200) return;
    const usage = usageOf(res.body);
    if (!usage) {
      this.o.log.warn('vendor batch line without usage: not billed', { request_id: requestId, vendor_batch_id: r.vendor_batch_id });
      return;
    }
    this.usage.publish(
      pool,
      {
        v: 1,
        request_id: requestId,
        tenant_id: r.tenant_id,
        key_id: r.key_id,
        model: r.model.id,
        pool,
        ...priceStrings(d.batchPrices),
        ...usage,
        ...(d.id === 'primary' ? {} : { deployment: d.id, ran_on: d.name }),
        ...(d.region ? { region: d.region } : {}),
        ...(d.country ? { country: d.country } : {}),
        batch_id: r.batch_id,
        estimated: false,
        outcome: 'completed',
        hold: requestId,
        ended_at: Date.now(),
        worker: this.o.workerId,
      },
      '',
    );
  }
}

/** How a line's job body becomes the vendor's, by the batch's endpoint: the same transform as an online call of its job API. */
const VENDOR_BODIES: Record<string, { api: JobApi; build: (call: UpstreamCall) => Record<string, unknown> }> = {
  '/v1/chat/completions': { api: 'chat', build: buildUpstreamBody },
  '/v1/embeddings': { api: 'embeddings', build: embeddingsRequestBody },
  '/v1/completions': { api: 'completions', build: completionsRequestBody },
};

/** A line's body as the vendor takes it: the same transform as an online call (allowlist, upstream model, the cap the hold paid for), not streamed. */
export function vendorBody(entry: CatalogEntry, body: Record<string, unknown>, maxTokens: number, endpoint = '/v1/chat/completions'): Record<string, unknown> {
  const how = Object.hasOwn(VENDOR_BODIES, endpoint) ? VENDOR_BODIES[endpoint] : undefined;
  if (!how) throw new UpstreamError(400, 'batch_not_supported', `Vendor batches of ${endpoint} are not built.`);
  const job = { v: 1, api: how.api, request_id: '', tenant_id: '', key_id: '', model: { id: entry.id }, body, max_tokens: maxTokens } as unknown as Job;
  const out = how.build(newCall(job, entry));
  delete out.stream;
  delete out.stream_options;
  return out;
}

/** A message batch request's params as Anthropic takes them: the online transform (allowlist, upstream model, the cap the hold paid for), not streamed. */
export function vendorMessagesBody(entry: CatalogEntry, body: Record<string, unknown>, maxTokens: number): Record<string, unknown> {
  const job = { v: 1, api: 'messages', request_id: '', tenant_id: '', key_id: '', model: { id: entry.id }, body, max_tokens: maxTokens } as unknown as Job;
  const out = buildMessagesBody(newCall(job, entry));
  delete out.stream;
  return out;
}

/** Bytes of results in one answer: well under NATS's default max_payload (1 MiB). */
export const RESULTS_PAGE_BYTES = 512 * 1024;

/** The results from `offset` that fit in one answer (at least one), and where the next page starts (null: none). */
export function page<T>(all: T[], offset: number, budget = RESULTS_PAGE_BYTES): { results: T[]; next: number | null } {
  const results: T[] = [];
  let bytes = 0;
  for (let i = offset; i < all.length; i++) {
    const size = Buffer.byteLength(JSON.stringify(all[i]));
    if (results.length > 0 && bytes + size > budget) return { results, next: i };
    results.push(all[i]);
    bytes += size;
  }
  return { results, next: null };
}
