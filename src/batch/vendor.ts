import type { NatsConnection } from 'nats';
import { admitVendorLine, releaseHold } from '../billing/ledger.ts';
import { costMicros, formatBrl, holdPrices, priceStrings } from '../billing/money.ts';
import { decodeJson, encode } from '../bus/messages.ts';
import { subjects } from '../bus/subjects.ts';
import type { JobApi } from '../bus/messages.ts';
import { speaksNatively } from '../catalog/apis.ts';
import { asDeployment, type CatalogEntry, type Deployment } from '../catalog/catalog.ts';
import type { ApiKeyRecord } from '../db/keys.ts';
import type { DbClient } from '../db/pool.ts';
import { getKey } from '../db/keys.ts';
import { CatracaError, errors } from '../errors.ts';
import { newRequestId } from '../gateway/exchange.ts';
import { outputTokens } from '../gateway/hold.ts';
import { createLogger } from '../log.ts';
import { chat } from '../protocols/chat/index.ts';
import { completions } from '../protocols/completions/index.ts';
import { type EmbeddingsParsed, embeddings } from '../protocols/embeddings/index.ts';
import { messages } from '../protocols/messages/index.ts';
import type { ParsedRequest, Protocol } from '../protocols/types.ts';
import { usageOfBody } from '../providers/openai/batch.ts';
import type { BatchRow } from './batches.ts';
import { type BatchLine, parseBatchFile, RunnableLineSchema } from './files.ts';
import type { RunnerDoor } from './runner.ts';
import { type VendorBatchReply, VendorBatchReplySchema, type VendorBatchRequest, type VendorLine, type VendorResult } from './vendor-wire.ts';

const log = createLogger('gateway');

// `vendor` batch mode, the front door's side (docs/batch.md "vendor mode"). A batch whose model has
// a deployment in `vendor` mode is not put on the BATCH queue: its lines go, in chunks, to that
// deployment's own batch API (OpenAI's Batch API for /v1/batches of chat completions, embeddings
// and legacy completions: VENDOR_ENDPOINTS; Anthropic's Message Batches for /v1/messages/batches),
// through a worker of the model's pool (the worker holds the key: src/runner/vendor-batch.ts). The
// money:
//
//   - before a chunk is submitted, each of its lines is held for its worst case at the
//     deployment's batch prices (its prompt bound and its output cap, the cap sent to the vendor; an
//     embeddings line its input's bound alone, as its route holds it),
//     one hold per line (its request id, kind 'batch'), living VENDOR_HOLD_TTL_MS (the vendor's 24 h
//     window and an hour more) so it cannot expire while the vendor's batch runs; it counts in the
//     balance and the key's limit available to every other request, not in the key's max_concurrent
//     (catraca_admit_vendor_line: the vendor runs the line, it is no request in flight here);
//   - a chunk is the lines, in order, that the balance covers (at most BATCH_VENDOR_CHUNK_LINES); the
//     first line refused waits for the next chunk, once this one ended and its holds settled; when
//     no chunk is running and the next line still cannot be covered, it and every line after it end
//     402 `insufficient_balance` (or the key's limit);
//   - each line the vendor answered 200 is debited once by metering, from the usage message the
//     worker publishes (request id = the line's, its hold, the deployment's batch prices, batch_id);
//     every other line (the vendor's error, cancelled, expired, not run) gives its hold back, nothing charged.
//
// State lives in PostgreSQL (batches.mode/vendor_next_at, vendor_batch_chunks, batch_results), so
// any front door resumes a batch another began: each door's loop claims due batches by moving
// vendor_next_at ahead (`for update skip locked`), polls, and maps results back, idempotently
// (a line's result row is written once: `where ok is null`).

const NOT_RUN = ['batch_cancelled', 'batch_expired'];
const NOT_RUN_ERRORS = {
  batch_cancelled: { code: 'batch_cancelled', message: 'The batch was cancelled before this request ran.' },
  batch_expired: { code: 'batch_expired', message: 'The batch expired (its completion window passed) before this request ran.' },
};

/** A line's hold lives this long: the vendor's 24 h completion window from submission, and an hour to read its results. */
export const VENDOR_HOLD_TTL_MS = 25 * 3600 * 1000;
/** a request to a worker (its vendor calls time out first: the providers' batch.ts) */
const REQUEST_TIMEOUT_MS = 50_000;
/** the most bytes of lines one chunk sends the worker (NATS's default max_payload is 1 MiB) */
const SUBMIT_BYTES = 768 * 1024;
/** how much earlier than the chunk's row a vendor's batch of it may say it was created (clocks disagree) */
const ADOPT_SLACK_S = 600;
/** while a door works on a batch, no other door takes it */
const CLAIM_SECONDS = 60;

/**
 * What vendor mode submits, by the batch's endpoint: OpenAI's batches of chat completions,
 * embeddings and legacy completions to an OpenAI-protocol deployment's Batch API; Anthropic's
 * message batches to an Anthropic-protocol deployment's Message Batches API. The deployment must
 * speak the endpoint's job API natively (a legacy completion to a model without
 * legacy_completions would be translated to chat, which the vendor's batch of /v1/completions does
 * not take). Other batches (OpenAI's /v1/responses: translated to chat online) run in `queue` mode.
 */
interface VendorEndpoint {
  api: BatchRow['api'];
  protocol: Protocol<ParsedRequest>;
  vendor: 'openai' | 'anthropic';
  job: JobApi;
  /** the most inputs the vendor takes in one batch (OpenAI: 50 000 embedding inputs across its requests), and a line's count of them */
  inputs?: { max: number; of: (req: ParsedRequest) => number };
}

/** OpenAI's bound on a batch of /v1/embeddings: inputs across all its requests. */
export const EMBEDDING_INPUTS_PER_VENDOR_BATCH = 50_000;

const VENDOR_ENDPOINTS: Record<string, VendorEndpoint> = {
  '/v1/chat/completions': { api: 'openai', protocol: chat as Protocol<ParsedRequest>, vendor: 'openai', job: 'chat' },
  '/v1/embeddings': {
    api: 'openai',
    protocol: embeddings as Protocol<ParsedRequest>,
    vendor: 'openai',
    job: 'embeddings',
    inputs: { max: EMBEDDING_INPUTS_PER_VENDOR_BATCH, of: (req) => (req as EmbeddingsParsed).inputs.length },
  },
  '/v1/completions': { api: 'openai', protocol: completions as Protocol<ParsedRequest>, vendor: 'openai', job: 'completions' },
  '/v1/messages': { api: 'anthropic', protocol: messages as Protocol<ParsedRequest>, vendor: 'anthropic', job: 'messages' },
};

const vendorApiOf = (row: Pick<BatchRow, 'api' | 'endpoint'>) => {
  const v = Object.hasOwn(VENDOR_ENDPOINTS, row.endpoint) ? VENDOR_ENDPOINTS[row.endpoint] : undefined;
  return v?.api === row.api ? v : null;
};

/**
 * Where a model's batches of `endpoint` go to the vendor: its first deployment (primary first) in
 * `vendor` mode speaking that vendor's API, and the endpoint's job API natively.
 */
export function vendorDeployment(model: CatalogEntry, endpoint = '/v1/chat/completions'): Deployment | null {
  const v = Object.hasOwn(VENDOR_ENDPOINTS, endpoint) ? VENDOR_ENDPOINTS[endpoint] : undefined;
  if (!v) return null;
  return model.deployments.find((d) => d.batchMode === 'vendor' && d.protocol === v.vendor && speaksNatively(asDeployment(model, d), v.job)) ?? null;
}

/** The answer of a batch line naming a model whose primary deployment is `none` (null: the line may run). */
export function batchNotSupported(model: CatalogEntry | undefined): CatracaError | null {
  if (model?.deployments[0]?.batchMode !== 'none' || model.deployments.some((d) => d.batchMode === 'vendor')) return null;
  return new CatracaError(
    400,
    'invalid_request_error',
    'batch_not_supported',
    `The model "${model.id}" does not take batch requests; send this request online instead.`,
    'model',
  );
}

/**
 * A `validating` batch becomes a vendor-mode batch (`in_progress`, claimed for `claimSeconds`), and
 * is remembered in vendor_batch_ids in the same statement: the console's margin costs its lines at
 * the vendor's batch cost, after the sweeper deleted its row (migration 091). Null: not `validating`.
 */
export async function startVendorMode(db: DbClient, batchId: string, claimSeconds: number): Promise<BatchRow | null> {
  const { rows } = await db.query<BatchRow>(
    `with b as (
       update batches set mode = 'vendor', status = 'in_progress', in_progress_at = now(), vendor_next_at = now() + make_interval(secs => $2::int)
        where id = $1 and status = 'validating' returning *),
     v as (insert into vendor_batch_ids (batch_id) select id from b)
     select * from b`,
    [batchId, claimSeconds],
  );
  return rows[0] ?? null;
}

interface ChunkRow {
  batch_id: string;
  chunk: number;
  model_id: string;
  deployment: string;
  pool: string;
  lines: number[];
  vendor_batch_id: string | null;
  cancel_sent: boolean;
  created_at: Date;
}

type Prepared =
  | { line: number; custom_id: string; ok: { hold: bigint; vendor: VendorLine; inputs: number } }
  | { line: number; custom_id: string; error: CatracaError };

const lineError = (e: unknown): CatracaError => (e instanceof CatracaError ? e : errors.internal());

export class VendorBatches {
  private timer?: NodeJS.Timeout;
  private ticking?: Promise<void>;
  private stopped = false;

  constructor(
    private readonly door: RunnerDoor,
    private readonly nc: NatsConnection,
    /** the queue runner's end of a batch: its output and error files, its status */
    private readonly finalize: (batchId: string) => Promise<unknown>,
  ) {}

  start(): void {
    const every = Math.max(100, this.door.config.BATCH_VENDOR_POLL_MS);
    this.timer = setInterval(() => {
      if (this.ticking || this.stopped) return;
      this.ticking = this.tick()
        .catch((err) => log.warn('vendor batch loop failed; it runs again at the next poll', { err: err as Error }))
        .finally(() => (this.ticking = undefined));
    }, every);
    this.timer.unref();
  }

  async stop(): Promise<void> {
    this.stopped = true;
    if (this.timer) clearInterval(this.timer);
    await this.ticking;
  }

  /**
   * POST /v1/batches of a batch whose first line names a model with a `vendor` deployment: the batch
   * becomes a vendor-mode batch (`in_progress`) and its first chunk is taken at once. Null: the
   * batch runs in `queue` mode.
   */
  async tryStart(key: ApiKeyRecord, row: BatchRow, lines: BatchLine[]): Promise<BatchRow | null> {
    if (!vendorApiOf(row)) return null;
    const first = lines[0]?.body?.model;
    if (typeof first !== 'string') return null;
    const model = await this.door.deps.catalog.resolve(first);
    if (!model || !vendorDeployment(model, row.endpoint)) return null;
    const started = await startVendorMode(this.door.db, row.id, CLAIM_SECONDS);
    if (!started) return null;
    try {
      await this.work(started, key);
    } catch (err) {
      log.warn('vendor batch: first chunk not taken; the loop takes it again', { batch_id: row.id, err: err as Error });
    }
    await this.door.db.query('update batches set vendor_next_at = now() + make_interval(secs => $2::float8) where id = $1', [row.id, this.pollSeconds]);
    const { rows: now } = await this.door.db.query<BatchRow>('select * from batches where id = $1', [row.id]);
    return now[0] ?? started;
  }

  /** POST /v1/batches/{id}/cancel of a vendor-mode batch: the lines not submitted end `batch_cancelled`, the vendor is told. */
  async cancelled(row: BatchRow): Promise<void> {
    if ((row as BatchRow & { mode?: string }).mode !== 'vendor') return;
    await this.cancelWork(row.id).catch((err) => log.warn('vendor batch cancel: the loop retries', { batch_id: row.id, err: err as Error }));
    // the loop polls it next (the cancel's request renewed the claim)
    await this.door.db.query('update batches set vendor_next_at = now() where id = $1', [row.id]);
  }

  private get pollSeconds(): number {
    return Math.max(0.1, this.door.config.BATCH_VENDOR_POLL_MS / 1000);
  }

  /**
   * One pass: every due vendor-mode batch claimed (by this door alone) and worked on; with `only`,
   * that batch alone, due or not (a loop sharing its database with loops of other catalogs, as the
   * tests' do, works on a batch no other loop finds due).
   */
  async tick(only?: string): Promise<void> {
    for (let n = 0; n < (only ? 1 : 50) && !this.stopped; n++) {
      const { rows } = await this.door.db.query<BatchRow>(
        `update batches set vendor_next_at = now() + make_interval(secs => $1::int)
          where id = (select id from batches where mode = 'vendor' and status in ('in_progress', 'cancelling')
                         and ($2::text is null and vendor_next_at <= now() or id = $2)
                       order by vendor_next_at limit 1 for update skip locked)
          returning *`,
        [CLAIM_SECONDS, only ?? null],
      );
      const batch = rows[0];
      if (!batch) return;
      try {
        const key = await getKey(this.door.db, batch.key_id);
        if (batch.status === 'cancelling') await this.cancelWork(batch.id);
        await this.work(batch, key);
      } catch (err) {
        log.warn('vendor batch pass failed; retried at the next poll', { batch_id: batch.id, err: err as Error });
      }
      await this.door.db.query('update batches set vendor_next_at = now() + make_interval(secs => $2::float8) where id = $1', [batch.id, this.pollSeconds]);
    }
  }

  /** The running chunk polled (and mapped back when ended); then, with none running, the next chunk taken. */
  private async work(batch: BatchRow, key: ApiKeyRecord | null): Promise<void> {
    for (let round = 0; round < 3; round++) {
      const chunk = await this.runningChunk(batch.id);
      if (chunk) {
        if (!chunk.vendor_batch_id) {
          const { rows } = await this.door.db.query<{ status: string; expired: boolean }>(
            'select status, expires_at <= now() as expired from batches where id = $1',
            [batch.id],
          );
          if (rows[0]?.status === 'cancelling') {
            // cancelled before the vendor had it: its lines never ran, their holds go back
            await this.endChunk(batch.id, chunk, [], NOT_RUN_ERRORS.batch_cancelled);
            continue;
          }
          if (rows[0]?.expired) {
            // the batch's window passed and the vendor never took the chunk (its batch API down)
            await this.endChunk(batch.id, chunk, [], NOT_RUN_ERRORS.batch_expired);
            continue;
          }
          await this.submit(batch, chunk);
          return;
        }
        const ended = await this.poll(batch, chunk);
        if (!ended) return;
        continue; // its holds are settled or given back: the next chunk may be covered now
      }
      const { rows } = await this.door.db.query<BatchRow>('select * from batches where id = $1', [batch.id]);
      const current = rows[0];
      if (current?.status !== 'in_progress') break;
      const next = await this.nextChunk(current, key);
      if (!next) break;
      await this.submit(current, next);
      return;
    }
    await this.finalize(batch.id);
  }

  private async runningChunk(batchId: string): Promise<ChunkRow | null> {
    const { rows } = await this.door.db.query<ChunkRow>('select * from vendor_batch_chunks where batch_id = $1 and ended_at is null order by chunk limit 1', [
      batchId,
    ]);
    return rows[0] ?? null;
  }

  /**
   * The lines without a result yet, in order: each prepared as its route would (its validation, the
   * key's allowlist, its worst case); bad ones end as error lines now; the good ones are held one by
   * one until one is refused or the chunk is full. Null: nothing to submit (every line ended, or it
   * waits: a rate limit).
   */
  private async nextChunk(batch: BatchRow, key: ApiKeyRecord | null): Promise<ChunkRow | null> {
    const db = this.door.db;
    const lines = await this.linesOf(batch.input_file_id);
    const { rows: done } = await db.query<{ line: number }>('select line from batch_results where batch_id = $1', [batch.id]);
    const ended = new Set(done.map((r) => r.line));
    const pending = lines ? lines.map((_, i) => i).filter((i) => !ended.has(i)) : [];
    if (pending.length === 0) return null;
    if (batch.expires_at.getTime() <= Date.now()) {
      // the batch's 24 h window passed: the lines not submitted end `batch_expired` (not run), the batch `expired`
      for (const i of pending) await this.endLine(batch.id, i, lines![i].custom_id, null, null, null, NOT_RUN_ERRORS.batch_expired, false);
      return null;
    }
    if (!key || key.revoked_at || (key.expires_at && key.expires_at.getTime() <= Date.now())) {
      const e = !key || key.revoked_at ? errors.revokedKey() : errors.expiredKey();
      for (const i of pending) await this.endLine(batch.id, i, lines![i].custom_id, null, e.status, e.toJSON(), null, true);
      return null;
    }
    const model = await this.door.deps.catalog.resolve(String(lines![0].body.model));
    const d = model ? vendorDeployment(model, batch.endpoint) : null;
    const v = vendorApiOf(batch);
    if (!model || !d || !v) {
      // the catalog changed since the batch began: what is left runs nowhere
      const e = errors.badRequest('The model of this batch no longer takes vendor batches.', 'model', 'batch_not_supported');
      for (const i of pending) await this.endLine(batch.id, i, lines![i].custom_id, null, e.status, e.toJSON(), null, true);
      return null;
    }
    const max = this.door.config.BATCH_VENDOR_CHUNK_LINES;
    const taken: Array<{ line: number; requestId: string; vendor: VendorLine }> = [];
    let refusedAll: CatracaError | null = null;
    let bytes = 0;
    let inputs = 0;
    for (const i of pending) {
      if (taken.length >= max) break;
      const p = await this.prepare(v, key, model, d, i, lines![i]);
      if ('error' in p) {
        await this.endLine(batch.id, i, p.custom_id, null, p.error.status, p.error.toJSON(), null, true);
        continue;
      }
      // a chunk goes to the worker in one NATS message: bounded in bytes as well as in lines
      const size = Buffer.byteLength(JSON.stringify(p.ok.vendor));
      if (size > SUBMIT_BYTES) {
        const e = new CatracaError(
          413,
          'invalid_request_error',
          'request_too_large',
          `This request is larger than a vendor batch takes (${SUBMIT_BYTES} bytes).`,
        );
        await this.endLine(batch.id, i, p.custom_id, null, e.status, e.toJSON(), null, true);
        continue;
      }
      if (taken.length > 0 && bytes + size > SUBMIT_BYTES) break;
      // the vendor fails a whole batch over its bound on inputs (embeddings): the line waits for the next chunk
      if (taken.length > 0 && v.inputs && inputs + p.ok.inputs > v.inputs.max) break;
      bytes += size;
      inputs += p.ok.inputs;
      const requestId = newRequestId();
      // a hold of kind 'batch': in the balance and the key's limit, not in the key's max_concurrent
      const admit = () => admitVendorLine(db, { requestId, tenantId: key.tenant_id, keyId: key.id, amount: p.ok.hold, ttlMs: VENDOR_HOLD_TTL_MS });
      let result = await admit();
      // refused with none taken and no hold of an ended chunk left: metering may have settled the last
      // ones between that admission and the look, so the refusal is final only when asked again
      if (result.status !== 'ok' && taken.length === 0 && !(await this.unsettled(batch.id))) result = await admit();
      if (result.status === 'ok') {
        taken.push({ line: i, requestId, vendor: p.ok.vendor });
        continue;
      }
      if (taken.length > 0) break; // waits for the next chunk
      // a chunk that ended has holds metering has not settled yet: what they leave is not known, wait
      if (await this.unsettled(batch.id)) return null;
      if (result.status === 'insufficient_balance' || result.status === 'key_limit') {
        refusedAll =
          result.status === 'key_limit'
            ? errors.keyLimit(lineRefusal(result.available, p.ok.hold))
            : errors.insufficientBalance(lineRefusal(result.available, p.ok.hold));
      } else if (result.status === 'tenant_suspended') refusedAll = errors.tenantSuspended();
      else if (result.status === 'key_revoked') refusedAll = errors.revokedKey();
      else return null; // a rate limit: the next poll tries again
      // nothing running and this line cannot be covered: it and every line after it end here
      const from = pending.indexOf(i);
      for (const j of pending.slice(from)) await this.endLine(batch.id, j, lines![j].custom_id, null, refusedAll.status, refusedAll.toJSON(), null, true);
      return null;
    }
    if (taken.length === 0) return null;
    const client = await db.connect();
    try {
      await client.query('begin');
      const { rows: n } = await client.query<{ next: number }>('select coalesce(max(chunk) + 1, 0) as next from vendor_batch_chunks where batch_id = $1', [
        batch.id,
      ]);
      const { rows } = await client.query<ChunkRow>(
        `insert into vendor_batch_chunks (batch_id, chunk, model_id, deployment, pool, lines) values ($1, $2, $3, $4, $5, $6) returning *`,
        [batch.id, n[0].next, model.id, d.id, model.pool, taken.map((t) => t.line)],
      );
      for (const t of taken) {
        await client.query('insert into batch_results (batch_id, line, custom_id, request_id) values ($1, $2, $3, $4)', [
          batch.id,
          t.line,
          lines![t.line].custom_id,
          t.requestId,
        ]);
      }
      await client.query('commit');
      this.pendingLines.set(
        `${batch.id}/${rows[0].chunk}`,
        taken.map((t) => t.vendor),
      );
      return rows[0];
    } catch (err) {
      await client.query('rollback').catch(() => {});
      for (const t of taken) await releaseHold(db, t.requestId).catch(() => {});
      throw err;
    } finally {
      client.release();
    }
  }

  /** Whether lines of this batch still hold money (their debits not settled yet by metering). */
  private async unsettled(batchId: string): Promise<boolean> {
    const { rows } = await this.door.db.query(
      'select 1 from holds h join batch_results r on h.request_id = r.request_id where r.batch_id = $1 and r.request_id is not null limit 1',
      [batchId],
    );
    return rows.length > 0;
  }

  /** The lines of a chunk as prepared when it was taken (rebuilt from the file after a restart). */
  private readonly pendingLines = new Map<string, VendorLine[]>();

  private async prepare(
    { protocol, job, inputs }: VendorEndpoint,
    key: ApiKeyRecord,
    model: CatalogEntry,
    d: Deployment,
    line: number,
    l: BatchLine,
  ): Promise<Prepared> {
    try {
      if (l.body.stream === true) throw errors.badRequest("'stream' is not supported in a batch request.", 'stream');
      const req = protocol.parse(l.body);
      const named = await this.door.deps.catalog.resolve(req.model);
      if (!named) throw errors.modelNotFound(req.model);
      if (named.id !== model.id) {
        throw errors.badRequest(`A vendor batch runs one model (${model.id}); this request names ${named.id}.`, 'model', 'mismatched_model');
      }
      if (key.models && !key.models.includes(model.id)) throw errors.modelNotAllowed(model.id);
      if (model.kind !== protocol.kind) throw errors.wrongModelKind(model.id, model.kind, protocol.path);
      const refused = protocol.check(req, model);
      if (refused) throw errors.badRequest(refused.message, refused.param, refused.code);
      const inputTokens = protocol.inputBound(req, model);
      const { wanted } = outputTokens(protocol.outputCap(req), model);
      const hold = costMicros(inputTokens, wanted, holdPrices(d.batchPrices));
      // the body as the vendor deployment's protocol takes it (a deployment may speak another than the primary)
      const made = protocol.job(req, asDeployment(model, d));
      // the vendor's batch runs one endpoint: a line its deployment would have translated cannot go in it
      if (made.api !== job) throw errors.badRequest(`The model "${model.id}" cannot run this request in a vendor batch.`, 'model', 'batch_not_supported');
      const { body } = made;
      return { line, custom_id: l.custom_id, ok: { hold, vendor: { custom_id: `l${line}`, body, max_tokens: wanted }, inputs: inputs?.of(req) ?? 1 } };
    } catch (err) {
      return { line, custom_id: l.custom_id, error: lineError(err) };
    }
  }

  private async ask(pool: string, request: VendorBatchRequest, batchId: string): Promise<VendorBatchReply> {
    // the claim is renewed before each request: a door killed mid-pass leaves the batch to another within CLAIM_SECONDS
    await this.door.db.query('update batches set vendor_next_at = now() + make_interval(secs => $2::int) where id = $1', [batchId, CLAIM_SECONDS]);
    const msg = await this.nc.request(subjects.vendorBatch(pool), encode(request), { timeout: REQUEST_TIMEOUT_MS });
    return VendorBatchReplySchema.parse(decodeJson(msg.data));
  }

  private async modelRef(chunk: ChunkRow): Promise<{ ref: VendorBatchRequest['model']; model: CatalogEntry } | null> {
    const model = await this.door.deps.catalog.get(chunk.model_id);
    const d = model?.deployments.find((x) => x.id === chunk.deployment);
    if (!model || !d) return null;
    return { ref: { id: model.id, deployment: d.id, prices: priceStrings(d.batchPrices) }, model };
  }

  /**
   * Sends the chunk to the vendor. Only the door that took the chunk, on its first attempt, knows the
   * vendor cannot have it yet; any other attempt (after a door or worker died, or a submit's answer
   * was lost, before the vendor's id was stored) asks the worker to look for the chunk at the vendor
   * first (`adopt_since`: OpenAI's batches carry the chunk's name in their metadata) and to adopt
   * the vendor's batch it finds rather than submit the chunk twice.
   */
  private async submit(batch: BatchRow, chunk: ChunkRow): Promise<void> {
    const m = await this.modelRef(chunk);
    if (!m) throw new Error(`model ${chunk.model_id} (${chunk.deployment}) is gone from the catalog`);
    let lines = this.pendingLines.get(`${batch.id}/${chunk.chunk}`);
    const first = lines !== undefined;
    this.pendingLines.delete(`${batch.id}/${chunk.chunk}`);
    if (!lines) {
      const key = await getKey(this.door.db, batch.key_id);
      const file = await this.linesOf(batch.input_file_id);
      const d = m.model.deployments.find((x) => x.id === chunk.deployment)!;
      lines = [];
      for (const i of chunk.lines) {
        const v = vendorApiOf(batch);
        const p = key && file && v ? await this.prepare(v, key, m.model, d, i, file[i]) : null;
        if (p && 'ok' in p) lines.push(p.ok.vendor);
      }
    }
    const reply = await this.ask(
      chunk.pool,
      {
        op: 'submit',
        model: m.ref,
        endpoint: batch.endpoint,
        lines,
        chunk: `${batch.id}:${chunk.chunk}`,
        // the vendor's clock and ours may disagree: ten minutes of slack
        ...(first ? {} : { adopt_since: Math.floor(chunk.created_at.getTime() / 1000) - ADOPT_SLACK_S }),
      },
      batch.id,
    );
    if (!reply.ok) {
      if (reply.code === 'invalid_job' || reply.code === 'batch_not_supported' || reply.code === 'upstream_not_configured') {
        // the vendor was never given these lines: they end as errors, their holds go back
        await this.endChunk(batch.id, chunk, [], { code: 'vendor_batch_failed', message: reply.message });
        await this.finalize(batch.id);
        return;
      }
      throw new Error(`vendor batch submit failed: ${reply.code}: ${reply.message}`);
    }
    if (reply.adopted) log.info('vendor batch: a chunk found at the vendor was adopted, not submitted again', { batch_id: batch.id, chunk: chunk.chunk });
    await this.door.db.query('update vendor_batch_chunks set vendor_batch_id = $3, vendor_status = $4 where batch_id = $1 and chunk = $2', [
      batch.id,
      chunk.chunk,
      reply.vendor_batch_id,
      reply.status,
    ]);
    // a cancel that came while the chunk was being submitted
    const { rows } = await this.door.db.query<{ status: string }>('select status from batches where id = $1', [batch.id]);
    if (rows[0]?.status === 'cancelling') await this.cancelWork(batch.id);
  }

  /** Polls the chunk's vendor batch; when it ended, maps its results back (true). */
  private async poll(batch: BatchRow, chunk: ChunkRow): Promise<boolean> {
    const m = await this.modelRef(chunk);
    if (!m) throw new Error(`model ${chunk.model_id} (${chunk.deployment}) is gone from the catalog`);
    const { rows } = await this.door.db.query<{ line: number; request_id: string }>(
      'select line, request_id from batch_results where batch_id = $1 and line = any($2::int[])',
      [batch.id, chunk.lines],
    );
    const requests = Object.fromEntries(rows.map((r) => [`l${r.line}`, r.request_id]));
    const poll = (offset?: number) =>
      this.ask(
        chunk.pool,
        {
          op: 'poll',
          model: m.ref,
          vendor_batch_id: chunk.vendor_batch_id!,
          tenant_id: batch.tenant_id,
          key_id: batch.key_id,
          batch_id: batch.id,
          requests,
          ...(offset ? { offset } : {}),
        },
        batch.id,
      );
    const reply = await poll();
    if (!reply.ok) throw new Error(`vendor batch poll failed: ${reply.code}: ${reply.message}`);
    // the results come in pages (a NATS message is bounded): every page before any is written
    const results = [...(reply.results ?? [])];
    for (let next = reply.next_offset; next; ) {
      const more = await poll(next);
      if (!more.ok) throw new Error(`vendor batch poll failed: ${more.code}: ${more.message}`);
      results.push(...(more.results ?? []));
      next = more.next_offset;
    }
    await this.door.db.query('update vendor_batch_chunks set vendor_status = $3 where batch_id = $1 and chunk = $2', [batch.id, chunk.chunk, reply.status]);
    if (!reply.ended) return false;
    const missing =
      reply.status === 'cancelled'
        ? { code: 'batch_cancelled', message: 'The batch was cancelled before this request ran.' }
        : reply.status === 'expired'
          ? { code: 'batch_expired', message: "The vendor's batch expired before this request ran." }
          : { code: 'vendor_batch_failed', message: reply.failure ?? `The vendor's batch ended ${reply.status} without an answer for this request.` };
    await this.endChunk(batch.id, chunk, results, missing, m.model.id);
    return true;
  }

  /**
   * The chunk's results written, line by line, once: a 200 is an output line (its debit comes from
   * the worker's usage message); anything else an error line whose hold goes back; a line the
   * vendor did not answer ends with `missing`.
   */
  private async endChunk(
    batchId: string,
    chunk: ChunkRow,
    results: VendorResult[],
    missing: { code: string; message: string },
    modelId?: string,
  ): Promise<void> {
    const byId = new Map(results.map((r) => [r.custom_id, r]));
    const { rows } = await this.door.db.query<{ line: number; custom_id: string; request_id: string }>(
      'select line, custom_id, request_id from batch_results where batch_id = $1 and line = any($2::int[]) and ok is null',
      [batchId, chunk.lines],
    );
    for (const row of rows) {
      const r = byId.get(`l${row.line}`);
      if (r && r.status_code === 200) {
        const body = modelId && r.body && typeof r.body === 'object' ? { ...(r.body as object), model: modelId } : r.body;
        await this.endLine(batchId, row.line, row.custom_id, row.request_id, 200, body, null, true);
        // a 200 without usage publishes nothing to settle it: its hold goes back
        if (!usageOfBody(r.body)) await releaseHold(this.door.db, row.request_id);
      } else {
        // not run: absent after a cancel or expiry (OpenAI), or said so (Anthropic's canceled and expired results)
        const notRun = r ? r.status_code === null && NOT_RUN.includes(r.error?.code ?? '') : NOT_RUN.includes(missing.code);
        await this.endLine(batchId, row.line, row.custom_id, row.request_id, r?.status_code ?? null, r?.body ?? null, r ? r.error : missing, !notRun);
        await releaseHold(this.door.db, row.request_id);
      }
    }
    await this.door.db.query('update vendor_batch_chunks set ended_at = now() where batch_id = $1 and chunk = $2', [batchId, chunk.chunk]);
  }

  /** A line's result row written (or completed, when claimed) once; the batch's counts follow (`counted` false: a line not run). */
  private async endLine(
    batchId: string,
    line: number,
    customId: string,
    requestId: string | null,
    status: number | null,
    body: unknown,
    error: { code: string; message: string } | null,
    counted: boolean,
  ): Promise<void> {
    const ok = status === 200;
    await this.door.db.query(
      `with r as (
         insert into batch_results (batch_id, line, custom_id, request_id, status_code, body, error, ok) values ($1, $2, $3, $4, $5, $6, $7, $8)
         on conflict (batch_id, line) do update set status_code = excluded.status_code, body = excluded.body, error = excluded.error, ok = excluded.ok
           where batch_results.ok is null
         returning ok)
       update batches set completed = completed + (select count(*) from r where ok and $9::boolean), failed = failed + (select count(*) from r where not ok and $9::boolean) where id = $1`,
      [batchId, line, customId, requestId, status, body === null ? null : JSON.stringify(body), error, ok, counted],
    );
  }

  /** A cancel: lines never submitted end `batch_cancelled` (not counted); a running chunk's vendor batch is told once. */
  private async cancelWork(batchId: string): Promise<void> {
    const db = this.door.db;
    const { rows } = await db.query<BatchRow>('select * from batches where id = $1', [batchId]);
    const batch = rows[0];
    if (batch?.status !== 'cancelling') return;
    const lines = await this.linesOf(batch.input_file_id);
    const { rows: done } = await db.query<{ line: number }>('select line from batch_results where batch_id = $1', [batchId]);
    const ended = new Set(done.map((r) => r.line));
    for (let i = 0; i < batch.total; i++) {
      if (ended.has(i)) continue;
      await this.endLine(
        batchId,
        i,
        lines?.[i]?.custom_id ?? `line-${i + 1}`,
        null,
        null,
        null,
        {
          code: 'batch_cancelled',
          message: 'The batch was cancelled before this request ran.',
        },
        false,
      );
    }
    const chunk = await this.runningChunk(batchId);
    if (chunk?.vendor_batch_id && !chunk.cancel_sent) {
      const m = await this.modelRef(chunk);
      if (m) {
        const reply = await this.ask(chunk.pool, { op: 'cancel', model: m.ref, vendor_batch_id: chunk.vendor_batch_id }, batchId);
        if (!reply.ok) throw new Error(`vendor batch cancel failed: ${reply.code}: ${reply.message}`);
        await db.query('update vendor_batch_chunks set cancel_sent = true, vendor_status = $3 where batch_id = $1 and chunk = $2', [
          batchId,
          chunk.chunk,
          reply.status,
        ]);
      }
    }
  }

  private readonly files = new Map<string, BatchLine[]>();

  private async linesOf(fileId: string): Promise<BatchLine[] | null> {
    const cached = this.files.get(fileId);
    if (cached) return cached;
    const { rows } = await this.door.db.query<{ content: Buffer }>('select content from batch_files where id = $1', [fileId]);
    if (!rows[0]) return null;
    const lines = parseBatchFile(rows[0].content, Number.MAX_SAFE_INTEGER, RunnableLineSchema);
    if (this.files.size >= 8) this.files.delete(this.files.keys().next().value as string);
    this.files.set(fileId, lines);
    return lines;
  }
}

function lineRefusal(available: bigint, hold: bigint): string {
  return `This batch request requires more credits: its worst case at the batch prices is R$ ${formatBrl(hold)}, more than the available R$ ${formatBrl(available)}.`;
}
