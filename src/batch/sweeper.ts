import type { Db } from '../db/pool.ts';
import { createLogger } from '../log.ts';
import type { BatchRow } from './batches.ts';
import { parseBatchFile, RunnableLineSchema } from './files.ts';
import { endBatch, LINE_INTERRUPTED, NOT_RUN } from './ending.ts';

const log = createLogger('metering');

// Metering's sweeper, for batches (docs/batch.md "Retention and expiry"):
//  - a batch still unfinished (`validating`, `in_progress`, `cancelling`) when its window ended
//    (`expires_at`) more than the line ack wait ago — its lines all taken and some stuck, or its
//    queue messages lost — is ended: every line claimed and never answered `line_interrupted`
//    (failed; it may have run: its request id is named), every line never taken `batch_expired`
//    (`batch_cancelled` for a batch being cancelled), its output and error files written, the batch
//    `expired` (`cancelled`). The runners expire a line they take after `expires_at` themselves;
//    this ends what no runner will take again. Queue mode only: a vendor-mode batch's lines may run at
//    the vendor past catraca's window (each chunk has the vendor's own 24 h), and the front doors'
//    vendor loop ends it when the vendor has (src/batch/vendor.ts).
//  - the rows of a batch (batches, batch_results: each line's answer, vendor_batch_chunks) ended more than
//    BATCH_RETENTION_DAYS ago are deleted, as its files expire then.

export interface BatchSweepSettings {
  retentionDays: number;
  /** the BATCH queue's ack wait (batchAckWaitMs): past expires_at plus this, a claimed line without an answer is stuck */
  ackWaitMs: number;
}

/** Ends at most `limit` batches past their window that no runner will end; returns how many. */
export async function expireStuckBatches(db: Db, settings: BatchSweepSettings, limit = 10): Promise<number> {
  const { rows: due } = await db.query<{ id: string }>(
    `select id from batches where status in ('validating', 'in_progress', 'cancelling') and mode = 'queue'
        and expires_at <= now() - make_interval(secs => $1::double precision / 1000) order by expires_at limit $2`,
    [settings.ackWaitMs, limit],
  );
  let ended = 0;
  for (const { id } of due) {
    const client = await db.connect();
    try {
      await client.query('begin');
      const { rows } = await client.query<BatchRow>(
        "select * from batches where id = $1 and status in ('validating', 'in_progress', 'cancelling') for update skip locked",
        [id],
      );
      const batch = rows[0];
      if (!batch) {
        await client.query('rollback');
        continue;
      }
      const { rows: file } = await client.query<{ content: Buffer }>('select content from batch_files where id = $1', [batch.input_file_id]);
      const customIds = file[0] ? parseBatchFile(file[0].content, Number.MAX_SAFE_INTEGER, RunnableLineSchema).map((l) => l.custom_id) : [];
      await client.query(
        `with r as (update batch_results set ok = false, error = ${LINE_INTERRUPTED} where batch_id = $1 and ok is null returning 1)
         update batches set failed = failed + (select count(*) from r) where id = $1`,
        [id],
      );
      const cancelling = batch.status === 'cancelling';
      await client.query(
        `insert into batch_results (batch_id, line, custom_id, error, ok)
         select $1, g, coalesce(($3::text[])[g + 1], 'line-' || (g + 1)), $4, false from generate_series(0, $2::int - 1) g
         on conflict do nothing`,
        [id, batch.total, customIds, cancelling ? NOT_RUN.cancelled : NOT_RUN.expired],
      );
      await endBatch(client, batch, settings.retentionDays, cancelling ? 'cancelled' : 'expired');
      await client.query('commit');
      ended++;
      log.warn('batch past its window ended by the sweeper', { batch_id: id, status: cancelling ? 'cancelled' : 'expired' });
    } catch (err) {
      await client.query('rollback').catch(() => {});
      throw err;
    } finally {
      client.release();
    }
  }
  return ended;
}

/** Deletes the rows (batch_results, then batches) of at most `limit` batches ended more than `retentionDays` ago; returns how many batches. */
export async function deleteOldBatches(db: Db, retentionDays: number, limit = 100): Promise<number> {
  const { rows } = await db.query<{ n: number }>(
    `with old as (
       select id from batches
        where status in ('completed', 'expired', 'cancelled', 'failed')
          and coalesce(completed_at, expired_at, cancelled_at, finalizing_at, in_progress_at, created_at) <= now() - make_interval(days => $1::int)
        order by id limit $2 for update skip locked),
     r as (delete from batch_results where batch_id in (select id from old)),
     c as (delete from vendor_batch_chunks where batch_id in (select id from old)),
     b as (delete from batches where id in (select id from old) returning 1)
     select count(*)::int as n from b`,
    [retentionDays, limit],
  );
  return rows[0].n;
}
