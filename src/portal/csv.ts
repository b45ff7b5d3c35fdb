import { type Readable, Transform, pipeline } from 'node:stream';
import { stringify } from 'csv-stringify';
import type pg from 'pg';
import QueryStream from 'pg-query-stream';

// CSV files streamed from PostgreSQL: a cursor (pg-query-stream) reads the rows in batches, each row
// becomes a record, csv-stringify writes it (RFC 4180: CRLF, fields quoted when they hold a comma,
// a quote or a line break), and the bytes go to the HTTP response as the client reads them. Nothing
// holds more than a batch: a year of ledger never sits in memory.

/** Rows PostgreSQL sends per round trip of the cursor. */
export const CSV_BATCH_ROWS = 500;

/** The formula guard of a text cell (src/web/csv.ts). */

/** A count as text (empty when the ledger has none). */
export const count = (v: number | bigint | null | undefined): string => (v === null || v === undefined ? '' : String(v));

/**
 * pg-query-stream whose destroy does not wait on a connection that is gone: its cursor's close waits
 * for PostgreSQL's answer, which never comes once the connection is lost, and the download would hang.
 */
class RowStream extends QueryStream {
  private lost: Error | null = null;
  private closing: ((err: Error) => void) | null = null;
  connectionLost(err: Error) {
    this.lost = err;
    this.closing?.(err);
    this.destroy(err);
  }
  override _destroy(err: Error | null, cb: (err?: Error | null) => void) {
    if (this.lost) return cb(err ?? this.lost);
    let settled = false;
    const settle = (e?: Error | null) => {
      if (settled) return;
      settled = true;
      this.closing = null;
      cb(err ?? e);
    };
    this.closing = settle;
    super._destroy(err as Error, settle);
  }
}

export interface CsvQuery<Row> {
  sql: string;
  params: unknown[];
  header: readonly string[];
  /** One row of the query as the CSV's cells, in `header`'s order. */
  record(row: Row): string[];
}

export interface CsvStreamOptions {
  /** Ends the download (and frees its connection) when the client has read nothing for this long, ms. */
  stallMs: number;
  /** Called once when the export is over: complete, failed, or abandoned by the client. */
  onDone(err: Error | null): void;
  /**
   * Cuts the client's connection, when the export fails after its first bytes: the response is not
   * ended as if the file were whole (default: none; the body's stream errors in any case).
   */
  cut?(err: Error): void;
}

/**
 * The CSV of a query, as the body of a response. Resolves once the first bytes are ready, so that a
 * query that fails at once rejects (an error page, not a cut download); an error after that errors
 * the stream, and the server cuts the connection: a client never takes a truncated file for a whole one.
 */
export async function csvBody<Row>(db: pg.Pool, q: CsvQuery<Row>, o: CsvStreamOptions): Promise<ReadableStream<Uint8Array>> {
  let client: pg.PoolClient;
  try {
    client = await db.connect();
  } catch (err) {
    o.onDone(err as Error);
    throw err;
  }
  let finished = false;
  /** Why the export was ended early by us (the streams then report a mere abort). */
  const ended: { failure: Error | null } = { failure: null };
  const done = (streamErr: Error | null) => {
    if (finished) return;
    finished = true;
    const err = ended.failure ?? streamErr;
    client.off('error', onClientError);
    // a connection whose cursor did not run to its end is not reused
    client.release(err ?? undefined);
    o.onDone(err);
  };
  const rows = client.query(new RowStream(q.sql, q.params, { batchSize: CSV_BATCH_ROWS }));
  // a connection lost while it is checked out: the download fails (and the process stays up)
  const onClientError = (err: Error) => rows.connectionLost(err);
  client.on('error', onClientError);
  const records = new Transform({
    objectMode: true,
    transform(row: Row, _enc, cb) {
      cb(null, q.record(row));
    },
  });
  // a line break inside a field is quoted too (csv-stringify alone quotes only the whole CRLF)
  const csv = stringify({ header: true, columns: [...q.header], record_delimiter: '\r\n', quoted_match: /[\r\n]/ });
  const out: Readable = pipeline(rows, records, csv, (err) => done(err ?? null));
  const chunks = out[Symbol.asyncIterator]() as AsyncIterator<Buffer>;
  const first = await chunks.next();
  return responseBody(chunks, first, o, ended);
}

/** The chunks as a web stream the server pulls from (backpressure), ending a download whose client stopped reading. */
function responseBody(
  chunks: AsyncIterator<Buffer>,
  first: IteratorResult<Buffer>,
  o: CsvStreamOptions,
  ended: { failure: Error | null },
): ReadableStream<Uint8Array> {
  let stall: NodeJS.Timeout | undefined;
  const fail = (controller: ReadableStreamDefaultController<Uint8Array>, err: Error) => {
    clearTimeout(stall);
    ended.failure = err;
    void chunks.return?.();
    // with the connection cut, the stream just ends (the server would print an errored one's error: onDone logs it)
    if (o.cut) {
      o.cut(err);
      controller.close();
    } else controller.error(err);
  };
  // armed after each chunk handed over, disarmed when the next is asked for
  const armStall = (controller: ReadableStreamDefaultController<Uint8Array>) => {
    stall = setTimeout(() => fail(controller, new Error('export abandoned: the client stopped reading')), o.stallMs);
    stall.unref();
  };
  return new ReadableStream<Uint8Array>(
    {
      start(controller) {
        if (first.done) return controller.close();
        controller.enqueue(first.value);
        armStall(controller);
      },
      async pull(controller) {
        clearTimeout(stall);
        let next: IteratorResult<Buffer>;
        try {
          next = await chunks.next();
        } catch (err) {
          return fail(controller, err as Error);
        }
        if (next.done) return controller.close();
        controller.enqueue(next.value);
        armStall(controller);
      },
      cancel() {
        clearTimeout(stall);
        void chunks.return?.();
      },
    },
    { highWaterMark: 0 },
  );
}
