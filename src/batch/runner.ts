import {
  AckPolicy,
  type Consumer,
  type ConsumerMessages,
  DeliverPolicy,
  DiscardPolicy,
  type JsMsg,
  type NatsConnection,
  RetentionPolicy,
  StorageType,
} from 'nats';
import { z } from 'zod';
import { subjects } from '../bus/subjects.ts';
import { natsClusterSize } from '../bus/usage-stream.ts';
import type { Config } from '../config.ts';
import { type ApiKeyRecord, getKey } from '../db/keys.ts';
import type { Db } from '../db/pool.ts';
import { CatracaError, errors } from '../errors.ts';
import { Exchange, type ExchangeDeps, newRequestId } from '../gateway/exchange.ts';
import type { ResponseState } from '../gateway/respond.ts';
import type { HttpResponse } from '../gateway/uws.ts';
import { createLogger } from '../log.ts';
import { chat } from '../protocols/chat/index.ts';
import { completions } from '../protocols/completions/index.ts';
import { embeddings } from '../protocols/embeddings/index.ts';
import { messages } from '../protocols/messages/index.ts';
import { responses } from '../protocols/responses/index.ts';
import type { ParsedRequest, Protocol } from '../protocols/types.ts';
import { type BatchRow, batchObject, batchUsage, cancelBatch, insertBatch } from './batches.ts';
import { batchAckWaitMs, endBatch, LINE_INTERRUPTED, NOT_RUN } from './ending.ts';
import { BatchFileIndex, type BatchLine } from './files.ts';
import { batchNotSupported, VendorBatches } from './vendor.ts';

export { batchAckWaitMs, endBatch, LINE_INTERRUPTED, NOT_RUN, type ResultRow, resultLine } from './ending.ts';

const log = createLogger('gateway');

// `queue` mode: the lines of a batch on the JetStream work queue BATCH, one message a line, taken by
// the front doors' runners. A line runs through the ordinary path — an Exchange, as if its body had
// been POSTed to its url with the batch's key: the key's allowlist, admission and its worst-case
// hold, dispatch to a worker, one debit settled by metering — and its answer (or error) becomes a
// row of batch_results. The line is claimed (its row inserted) before it runs, so a line delivered
// twice runs once. A runner takes lines only while its door's interactive requests in flight stay
// under BATCH_PAUSE_IN_FLIGHT, and at most BATCH_CONCURRENCY at once. The runner that ends the last
// line writes the output and error files and ends the batch.

export const BATCH_STREAM = 'BATCH';
export const BATCH_DURABLE = 'batch-runner';

const PROTOCOLS: Record<string, Protocol<ParsedRequest>> = {
  '/v1/chat/completions': chat as Protocol<ParsedRequest>,
  '/v1/embeddings': embeddings as Protocol<ParsedRequest>,
  '/v1/completions': completions as Protocol<ParsedRequest>,
  '/v1/responses': responses as Protocol<ParsedRequest>,
  '/v1/messages': messages as Protocol<ParsedRequest>,
};

const LineMessageSchema = z.object({ batch_id: z.string(), line: z.number().int().nonnegative() });

/** BATCH (work-queue retention, replicas min(3, cluster)) and the runners' shared durable consumer. */
export async function ensureBatchQueue(nc: NatsConnection, ackWaitMs: number): Promise<void> {
  const jsm = await nc.jetstreamManager();
  try {
    await jsm.streams.info(BATCH_STREAM);
  } catch (err) {
    if (!/not found/i.test(String((err as Error).message))) throw err;
    await jsm.streams
      .add({
        name: BATCH_STREAM,
        subjects: [subjects.batchLines],
        retention: RetentionPolicy.Workqueue,
        storage: StorageType.File,
        discard: DiscardPolicy.New,
        duplicate_window: 2 * 60 * 1e9,
        num_replicas: Math.max(1, Math.min(3, natsClusterSize(nc))),
      })
      .catch((e) => {
        if (!/already in use/i.test(String(e.message))) throw e;
      });
  }
  try {
    const info = await jsm.consumers.info(BATCH_STREAM, BATCH_DURABLE);
    // the ack wait follows the configuration (BATCH_ACK_WAIT_MS, the timeouts) the doors start with
    if (info.config.ack_wait !== ackWaitMs * 1e6) await jsm.consumers.update(BATCH_STREAM, BATCH_DURABLE, { ack_wait: ackWaitMs * 1e6 });
  } catch {
    await jsm.consumers
      .add(BATCH_STREAM, {
        durable_name: BATCH_DURABLE,
        ack_policy: AckPolicy.Explicit,
        deliver_policy: DeliverPolicy.All,
        ack_wait: ackWaitMs * 1e6,
        max_deliver: -1,
      })
      .catch((e) => {
        if (!/already/i.test(String(e.message))) throw e;
      });
  }
}

interface LineAnswer {
  requestId: string | null;
  status: number;
  body: unknown;
  /** the code of the error that answered it (`insufficient_balance`, `key_limit_exceeded`, …), whatever the protocol's error shape */
  refused?: string;
  /** set when the refusal passes with time and nothing was charged: the line runs again */
  retry?: LineRetry;
}

interface LineRetry {
  /** no sooner than this (the refusal's retry-after) */
  afterMs: number;
  /** the refusal was the key's own limit (rate, concurrency, tokens per minute), whose retry-after is exact */
  keyLimit: boolean;
}

const KEY_LIMITS = new Set(['rate_limit_exceeded', 'concurrency_limit_exceeded', 'tpm_limit_exceeded']);

/**
 * Refusals that pass with time, given before anything ran or by a vendor that ran nothing: a key's
 * rate, concurrency and per-minute token limits, no worker free or serving, the billing database
 * busy, the vendor's own 429 or no vendor reached. A batch line so refused is not an error line: it
 * goes back to the queue and runs again (the batch's window bounds the waiting), unless its request
 * was charged or the refusal is one the same request always meets (`CatracaError.permanent`).
 */
const PASSING_REFUSALS = new Set([
  'rate_limit_exceeded',
  'concurrency_limit_exceeded',
  'tpm_limit_exceeded',
  'no_worker_available',
  'overloaded',
  'model_changed',
  'shutting_down',
  'database_unavailable',
  'database_timeout',
  'upstream_rate_limited',
  'upstream_unreachable',
]);

/** The longest wait before a refused line runs again (its retry-after, doubled with each refusal). */
const LINE_RETRY_MAX_MS = 60_000;

/** The parts of a front door the runner uses. */
export interface RunnerDoor {
  config: Config;
  db: Db;
  deps: ExchangeDeps;
  /** interactive requests in flight at this door */
  inFlight(): number;
}

const queueUnavailable = () =>
  new CatracaError(503, 'service_unavailable', 'batch_queue_unavailable', 'The batch queue is unavailable; the batch was not started. Try again later.');

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

export class BatchRunner {
  private running = 0;
  private stopped = false;
  private consumer?: Consumer;
  private looping?: Promise<void>;
  private connecting?: Promise<boolean>;
  private messages?: ConsumerMessages;
  private readonly files = new Map<string, BatchFileIndex>();
  private readonly keys = new Map<string, { record: ApiKeyRecord | null; at: number }>();
  /** `vendor` mode: batches sent to a deployment's own batch API (src/batch/vendor.ts) */
  readonly vendor: VendorBatches;

  constructor(
    private readonly door: RunnerDoor,
    private readonly nc: NatsConnection,
  ) {
    this.vendor = new VendorBatches(door, nc, (id) => this.finalizeIfDone(id));
  }

  /**
   * Starts taking lines, the queue made when missing — in the background: a door whose JetStream is
   * slow or whose NATS user may not is up all the same, and answers batches 503 until the queue is there.
   */
  start(): void {
    this.connecting = this.connect();
    this.looping = this.connecting.then(() => this.loop());
    this.vendor.start();
  }

  private async connect(): Promise<boolean> {
    try {
      await ensureBatchQueue(this.nc, batchAckWaitMs(this.door.config));
      this.consumer = await this.nc.jetstream().consumers.get(BATCH_STREAM, BATCH_DURABLE);
      return true;
    } catch (err) {
      log.warn('batch queue unavailable; batches are refused until it is', { err: err as Error });
      return false;
    }
  }

  async stop(): Promise<void> {
    this.stopped = true;
    await this.vendor.stop();
    await this.messages?.close().catch(() => {});
    await this.looping;
    const deadline = Date.now() + 5000;
    while (this.running > 0 && Date.now() < deadline) await sleep(20);
  }

  /** POST /v1/batches: stored, its lines queued, `in_progress`; a queue that refuses them fails it. */
  async create(key: ApiKeyRecord, rawBody: Buffer) {
    if (!this.consumer) await this.connecting;
    if (!this.consumer) throw queueUnavailable();
    const { BATCH_MAX_LINES, BATCH_MAX_IN_FLIGHT, BATCH_MAX_LINES_IN_FLIGHT } = this.door.config;
    const { row, lines } = await insertBatch(this.door.db, key, rawBody, BATCH_MAX_LINES, {
      maxBatches: BATCH_MAX_IN_FLIGHT,
      maxLines: BATCH_MAX_LINES_IN_FLIGHT,
    });
    const vendor = await this.vendor.tryStart(key, row, lines);
    if (vendor) return batchObject(vendor);
    return batchObject(await this.enqueue(row, lines.length));
  }

  /** A stored batch (`validating`) made `in_progress` and its `count` lines queued; a queue that refuses them fails it. */
  async enqueue(row: BatchRow, count: number): Promise<BatchRow> {
    if (!this.consumer) await this.connecting;
    if (!this.consumer) throw queueUnavailable();
    // in_progress before the first line is queued: a runner skips the lines of a batch in any other state
    const { rows } = await this.door.db.query<BatchRow>(
      "update batches set status = 'in_progress', in_progress_at = now() where id = $1 and status = 'validating' returning *",
      [row.id],
    );
    const js = this.nc.jetstream();
    // an ack that times out (a busy server) is asked again with the same message id: JetStream's
    // duplicate window (2 min) keeps one copy, and a line delivered twice would run once all the same
    const publish = async (line: number) => {
      for (let attempt = 1; ; attempt++) {
        try {
          return await js.publish(subjects.batchLines, JSON.stringify({ batch_id: row.id, line }), { msgID: `${row.id}.${line}`, timeout: 10_000 });
        } catch (err) {
          if (attempt >= 3 || (err as { code?: string }).code !== 'TIMEOUT') throw err;
        }
      }
    };
    try {
      for (let at = 0; at < count; at += 256) {
        await Promise.all(Array.from({ length: Math.min(256, count - at) }, (_, i) => publish(at + i)));
      }
    } catch (err) {
      log.warn('batch lines not queued: the batch failed', { batch_id: row.id, err: err as Error });
      await this.door.db.query("update batches set status = 'failed' where id = $1", [row.id]);
      throw queueUnavailable();
    }
    return rows[0] ?? row;
  }

  /** POST /v1/batches/{id}/cancel: `cancelling`, and ended at once when no line is left to run. */
  async cancel(key: ApiKeyRecord, id: string) {
    const row = await cancelBatch(this.door.db, key, id);
    await this.vendor.cancelled(row);
    return batchObject((await this.finalizeIfDone(id)) ?? row, (await batchUsage(this.door.db, key.tenant_id, [id])).get(id));
  }

  /**
   * A continuous pull (nats.js `consume`: a one-off `fetch` drops the messages that arrive as its
   * request expires, which then wait out the ack wait), one line buffered; a line starts only with a
   * free slot and the door's interactive traffic under BATCH_PAUSE_IN_FLIGHT.
   */
  private async loop(): Promise<void> {
    const { BATCH_CONCURRENCY, BATCH_PAUSE_IN_FLIGHT } = this.door.config;
    const ackWaitMs = batchAckWaitMs(this.door.config);
    while (!this.stopped) {
      if (!this.consumer) {
        for (let waited = 0; waited < 5000 && !this.stopped; waited += 100) await sleep(100);
        if (!this.stopped) await this.connect();
        continue;
      }
      try {
        // one line pulled at a time: the line this loop holds (below) is the only one delivered and
        // not started, so it alone needs telling the server it is in progress
        this.messages = await this.consumer.consume({ max_messages: 1 });
        for await (const m of this.messages) {
          // a line held here while interactive traffic keeps the door busy is told to the server as
          // in progress, or its ack wait would pass and it be delivered again while this copy waits
          let heldSince = Date.now();
          while (!this.stopped && (this.running >= BATCH_CONCURRENCY || this.door.inFlight() >= BATCH_PAUSE_IN_FLIGHT)) {
            await sleep(10);
            if (Date.now() - heldSince >= ackWaitMs / 3) {
              m.working();
              heldSince = Date.now();
            }
          }
          if (this.stopped) {
            m.nak();
            break;
          }
          this.running++;
          void this.take(m).finally(() => this.running--);
        }
      } catch (err) {
        if (!this.stopped) log.warn('batch queue consumer failed', { err: err as Error });
        await sleep(500);
      }
    }
  }

  private async take(m: JsMsg): Promise<void> {
    const parsed = LineMessageSchema.safeParse(JSON.parse(new TextDecoder().decode(m.data)));
    if (!parsed.success) return void m.term();
    try {
      const retry = await this.runLine(parsed.data.batch_id, parsed.data.line);
      if (!retry) m.ack();
      else {
        // a key's own limit says when it lets the line in; any other refusal backs off with each delivery
        const backoffMs = retry.keyLimit ? 0 : 1000 * 2 ** Math.min(m.info.redeliveryCount - 1, 6);
        const waitMs = Math.min(LINE_RETRY_MAX_MS, Math.max(retry.afterMs, backoffMs));
        m.nak(Math.round(waitMs * (1 + Math.random() / 4))); // spread, so lines refused together are not all asked again at once
      }
    } catch (err) {
      log.warn('batch line failed; it will be taken again', { batch_id: parsed.data.batch_id, line: parsed.data.line, err: err as Error });
      m.nak(1000);
    }
  }

  /** Runs the line once; when to run it again if its refusal passes with time (undefined: it ended). */
  private async runLine(batchId: string, line: number): Promise<LineRetry | undefined> {
    const db = this.door.db;
    const { rows } = await db.query<BatchRow>('select * from batches where id = $1', [batchId]);
    const batch = rows[0];
    if (!batch || !['in_progress', 'cancelling'].includes(batch.status)) return;
    const lines = await this.linesOf(batch.input_file_id);
    const request = lines?.line(line) ?? null;
    const custom_id = request?.custom_id ?? `line-${line + 1}`;
    const notRun = batch.status === 'cancelling' ? NOT_RUN.cancelled : batch.expires_at.getTime() <= Date.now() ? NOT_RUN.expired : null;
    if (notRun) {
      // every line not started yet ends now, in one statement (its custom_id from the input file): the
      // batch's other queued lines then find their row and are acked without a statement of their own
      // or a count of the batch's ended lines each (50,000 of them after a cancel)
      const ended = await db.query(
        `insert into batch_results (batch_id, line, custom_id, error, ok)
         select $1, g, coalesce(($3::text[])[g + 1], 'line-' || (g + 1)), $4, false from generate_series(0, $2::int - 1) g
         on conflict do nothing`,
        [batchId, batch.total, lines?.customIds() ?? [], notRun],
      );
      if (ended.rowCount) await this.finalizeIfDone(batchId);
      return;
    }
    const requestId = newRequestId();
    // not claimed once the batch is out of balance: its lines not started then already have their 402
    // (written in the transaction that marked it), so a line delivered after that never runs
    const claimed = await db.query(
      `insert into batch_results (batch_id, line, custom_id, request_id)
       select $1, $2, $3, $4 where not exists (select 1 from batches where id = $1 and out_of_balance_at is not null)
       on conflict do nothing`,
      [batchId, line, custom_id, requestId],
    );
    if (claimed.rowCount !== 1) {
      // delivered again while claimed without a result: the runner that claimed it died (its ack wait
      // outlasts any request) or could not write the result. It is not run twice: an error line,
      // naming the request it was (/v1/generation tells whether it ran and was billed).
      // the message names the request: the error file's line has no `response` to carry its request_id
      await db.query(
        `with r as (update batch_results set ok = false, error = ${LINE_INTERRUPTED} where batch_id = $1 and line = $2 and ok is null returning ok)
         update batches set failed = failed + (select count(*) from r) where id = $1`,
        [batchId, line],
      );
      await this.finalizeIfDone(batchId);
      return;
    }
    const answer = request
      ? await this.answer(batch, request, requestId)
      : {
          requestId: null,
          status: 400,
          body: errors.badRequest('The batch input file is gone (deleted or expired).', 'input_file_id', 'invalid_file').toJSON(),
        };
    if (answer.retry) {
      // not ended: the claim goes, and the line is taken again as if it had not run (nothing was charged).
      // The batch's row is locked first: a line released while another marks the batch out of balance
      // would have neither its claim nor the mark's 402, and no runner would end it; once marked, the
      // line keeps its refusal as its answer.
      const released = await db.query(
        `with b as (select id from batches where id = $1 and out_of_balance_at is null for share)
         delete from batch_results r using b where r.batch_id = b.id and r.line = $2 and r.ok is null and r.request_id = $3`,
        [batchId, line, requestId],
      );
      if (released.rowCount === 1) return answer.retry;
    }
    const ok = answer.status === 200;
    if (answer.refused === 'insufficient_balance') await this.outOfBalance(batch, line, custom_id, answer, lines);
    else
      await db.query(
        `with r as (update batch_results set request_id = $3, status_code = $4, body = $5, ok = $6 where batch_id = $1 and line = $2 and ok is null returning ok)
         update batches set completed = completed + (select count(*) from r where ok), failed = failed + (select count(*) from r where not ok) where id = $1`,
        [batchId, line, answer.requestId, answer.status, answer.body, ok],
      );
    await this.finalizeIfDone(batchId);
  }

  /**
   * A line refused 402 for the tenant's balance (not a key's limit): its answer recorded and, in the
   * same transaction, the batch marked out of balance (the first such line only) and every line not
   * started yet (no results row) ended as an error line, 402 `insufficient_balance`, never run.
   * Lines already claimed run on and are billed; a line delivered later finds its row (or the mark) and is not claimed.
   */
  private async outOfBalance(batch: BatchRow, line: number, custom_id: string, answer: LineAnswer, lines: BatchFileIndex | null): Promise<void> {
    const client = await this.door.db.connect();
    try {
      await client.query('begin');
      await client.query(
        `with r as (update batch_results set request_id = $3, status_code = $4, body = $5, ok = false where batch_id = $1 and line = $2 and ok is null returning ok)
         update batches set failed = failed + (select count(*) from r) where id = $1`,
        [batch.id, line, answer.requestId, answer.status, answer.body],
      );
      const marked = await client.query(
        'update batches set out_of_balance_at = now(), out_of_balance_line = $2 where id = $1 and out_of_balance_at is null returning id',
        [batch.id, line],
      );
      if (marked.rowCount === 1) {
        const refusal = errors.insufficientBalance(
          `The balance ran out during this batch: request '${custom_id}' was refused for it, and this request was not run. Top up, then submit the requests not run in a new batch.`,
        );
        const protocol = PROTOCOLS[batch.endpoint] ?? chat;
        const { body } = protocol.errorBody(refusal);
        await client.query(
          `with r as (
             insert into batch_results (batch_id, line, custom_id, status_code, body, ok)
             select $1, g, coalesce(($3::text[])[g + 1], 'line-' || (g + 1)), 402, $4, false from generate_series(0, $2::int - 1) g
             on conflict do nothing returning 1)
           update batches set failed = failed + (select count(*) from r) where id = $1`,
          [batch.id, batch.total, lines?.customIds() ?? [], body],
        );
      }
      await client.query('commit');
    } catch (err) {
      await client.query('rollback').catch(() => {});
      throw err;
    } finally {
      client.release();
    }
  }

  /** The line run as a request of its url with the batch's key; its whole answer, whatever the status. */
  private async answer(batch: BatchRow, l: BatchLine, requestId: string): Promise<LineAnswer> {
    const key = await this.keyOf(batch.key_id);
    if (!key || key.revoked_at) return { requestId: null, status: 401, body: errors.revokedKey().toJSON() };
    if (key.expires_at && key.expires_at.getTime() <= Date.now()) return { requestId: null, status: 401, body: errors.expiredKey().toJSON() };
    if (l.body.stream === true) {
      return { requestId: null, status: 400, body: errors.badRequest("'stream' is not supported in a batch request.", 'stream').toJSON() };
    }
    const route = PROTOCOLS[l.url];
    const notSupported = typeof l.body.model === 'string' ? batchNotSupported(await this.door.deps.catalog.resolve(l.body.model)) : null;
    if (notSupported) return { requestId: null, status: notSupported.status, body: notSupported.toJSON() };
    let refusal: CatracaError | undefined;
    // the route's own protocol, its error noted on the way: an Anthropic error body does not carry the code
    const protocol: Protocol<ParsedRequest> = Object.create(route, {
      errorBody: {
        value: (e: CatracaError) => {
          refusal = e;
          return route.errorBody(e);
        },
      },
    });
    let exchange: Exchange<ParsedRequest> | undefined;
    const retry = (): LineRetry | undefined => {
      if (!refusal || !PASSING_REFUSALS.has(refusal.code) || refusal.permanent || exchange?.charged !== false) return undefined;
      return { afterMs: 1000 * Math.max(1, Number(refusal.headers['retry-after']) || 1), keyLimit: KEY_LIMITS.has(refusal.code) };
    };
    return new Promise<LineAnswer>((resolve) => {
      let status = 0;
      const answered = (body: unknown) =>
        resolve(status === 200 ? { requestId, status, body } : { requestId, status, body, refused: refusal?.code, retry: retry() });
      const res = {
        cork: (cb: () => void) => {
          cb();
          return res;
        },
        writeStatus: (line: string) => {
          status = Number.parseInt(line, 10);
          return res;
        },
        writeHeader: () => res,
        end: (body?: string | Uint8Array) => {
          const text = body === undefined ? '' : typeof body === 'string' ? body : Buffer.from(body).toString('utf8');
          try {
            answered(JSON.parse(text));
          } catch {
            answered({ error: { message: 'The answer was not JSON.', type: 'server_error', code: 'internal_error', param: null } });
          }
          return res;
        },
        write: () => true,
        tryEnd: () => [true, true],
        onWritable: () => res,
        getWriteOffset: () => 0,
        close: () => {
          status = status || 500;
          answered(errors.internal().toJSON());
          return res;
        },
      } as unknown as HttpResponse;
      const s: ResponseState = { res, requestId, aborted: false, done: false };
      exchange = new Exchange({ ...this.door.deps, onFinish: undefined }, protocol, s, undefined, batch.id);
      void exchange.run(Buffer.from(JSON.stringify(l.body)), Promise.resolve(key));
    });
  }

  private async keyOf(id: string): Promise<ApiKeyRecord | null> {
    const cached = this.keys.get(id);
    if (cached && Date.now() - cached.at < 5000) return cached.record;
    const record = await getKey(this.door.db, id);
    this.keys.set(id, { record, at: Date.now() });
    return record;
  }

  private async linesOf(fileId: string): Promise<BatchFileIndex | null> {
    const cached = this.files.get(fileId);
    if (cached) return cached;
    const { rows } = await this.door.db.query<{ content: Buffer }>('select content from batch_files where id = $1', [fileId]);
    if (!rows[0]) return null;
    const lines = new BatchFileIndex(rows[0].content);
    if (this.files.size >= 8) this.files.delete(this.files.keys().next().value as string);
    this.files.set(fileId, lines);
    return lines;
  }

  /**
   * When every line has ended: the output file (lines answered 200) and the error file (the others,
   * and lines a cancel kept from running) written, and the batch `completed` (or `cancelled`), in one
   * transaction on the batch's row; a runner that comes second finds it ended.
   */
  async finalizeIfDone(batchId: string): Promise<BatchRow | null> {
    return finalizeIfDone(this.door.db, batchId, this.door.config.BATCH_RETENTION_DAYS);
  }
}

/**
 * When every line of the batch has ended: the output and error files written and the batch ended,
 * in one transaction on the batch's row (endBatch); a runner that comes second finds it ended.
 */
export async function finalizeIfDone(db: Db, batchId: string, retentionDays: number): Promise<BatchRow | null> {
  // Called as each line ends: the counters first (one row), so a running batch of 50,000 lines is not
  // counted whole 50,000 times. In a queue-mode batch in progress and inside its window every ended
  // line is counted in completed or failed; only lines not run (a cancel, the window passed) and
  // vendor mode's are not, and those take the count of ended rows.
  const { rows: heads } = await db.query<{ total: number; counted: number; status: string; mode: string; live: boolean }>(
    'select total, completed + failed as counted, status, mode, expires_at > now() as live from batches where id = $1',
    [batchId],
  );
  const h = heads[0];
  if (!h || !['in_progress', 'cancelling'].includes(h.status)) return null;
  if (h.status === 'in_progress' && h.mode === 'queue' && h.live && h.counted < h.total) return null;
  if (h.counted < h.total) {
    const { rows } = await db.query<{ ended: number }>('select count(*)::int as ended from batch_results where batch_id = $1 and ok is not null', [batchId]);
    if (rows[0].ended < h.total) return null;
  }
  const client = await db.connect();
  try {
    await client.query('begin');
    const { rows } = await client.query<BatchRow>('select * from batches where id = $1 for update', [batchId]);
    const batch = rows[0];
    if (!['in_progress', 'cancelling'].includes(batch.status)) {
      await client.query('rollback');
      return null;
    }
    const ended = await endBatch(client, batch, retentionDays);
    await client.query('commit');
    return ended;
  } catch (err) {
    await client.query('rollback').catch(() => {});
    throw err;
  } finally {
    client.release();
  }
}
