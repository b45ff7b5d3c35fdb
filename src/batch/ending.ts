import type { Config } from '../config.ts';
import type { DbClient } from '../db/pool.ts';
import type { BatchRow } from './batches.ts';
import { newFileId } from './files.ts';

// How a batch's lines and the batch itself end, shared by the runners (src/batch/runner.ts) and
// metering's sweeper (src/batch/sweeper.ts): the errors of lines not run or interrupted, and the
// output and error files written as the batch ends.

/** How long a line's queue message waits for its runner's ack: BATCH_ACK_WAIT_MS, else longer than any line can run. */
export function batchAckWaitMs(config: Pick<Config, 'BATCH_ACK_WAIT_MS' | 'DISPATCH_WAIT_MS' | 'REQUEST_TIMEOUT_MS'>): number {
  return config.BATCH_ACK_WAIT_MS || config.DISPATCH_WAIT_MS + config.REQUEST_TIMEOUT_MS + 60_000;
}

/** The error of a line a cancel or the end of the window kept from running (counted in neither `completed` nor `failed`). */
export const NOT_RUN = {
  cancelled: { code: 'batch_cancelled', message: 'The batch was cancelled before this request ran.' },
  expired: { code: 'batch_expired', message: 'The batch expired (its completion window passed) before this request ran.' },
};

/** SQL: the error of a claimed line whose runner stopped before recording its answer, naming its request (the error file's line has no `response` to carry it). */
export const LINE_INTERRUPTED = `jsonb_build_object('code', 'line_interrupted', 'message',
  'The runner of this request stopped before recording its answer. It was request ' || request_id ||
  ': /v1/generation?id=' || request_id || ' tells whether it ran and was billed.')`;

/**
 * In a transaction holding the batch's row (`for update`), every line having its results row: the
 * output file (lines answered 200) and the error file (the others) written, and the batch ended —
 * `ending`, else `cancelled` after a cancel, `expired` when a line was not run for the window, `completed`.
 */
export async function endBatch(client: DbClient, batch: BatchRow, retentionDays: number, ending?: BatchRow['status']): Promise<BatchRow> {
  const { rows: results } = await client.query<ResultRow>('select * from batch_results where batch_id = $1 order by line', [batch.id]);
  // an Anthropic message batch has no files: its results are read from batch_results
  const output = batch.api === 'anthropic' ? [] : results.filter((r) => r.ok).map(resultLine);
  const failed = batch.api === 'anthropic' ? [] : results.filter((r) => !r.ok).map(resultLine);
  const outputId = output.length ? await writeFile(client, batch, `${batch.id}_output.jsonl`, output, retentionDays) : null;
  const errorId = failed.length ? await writeFile(client, batch, `${batch.id}_error.jsonl`, failed, retentionDays) : null;
  const status = ending ?? (batch.status === 'cancelling' ? 'cancelled' : results.some((r) => r.error?.code === 'batch_expired') ? 'expired' : 'completed');
  const { rows: ended } = await client.query<BatchRow>(
    `update batches set status = $2, output_file_id = $3, error_file_id = $4, finalizing_at = now(),
            completed_at = case when $2 = 'completed' then now() end, cancelled_at = case when $2 = 'cancelled' then now() end,
            expired_at = case when $2 = 'expired' then now() end
      where id = $1 returning *`,
    [batch.id, status, outputId, errorId],
  );
  return ended[0];
}

export interface ResultRow {
  batch_id: string;
  line: number;
  custom_id: string;
  request_id: string | null;
  status_code: number | null;
  body: unknown;
  error: { code: string; message: string } | null;
  ok: boolean;
}

/** A line of the output or error file, in OpenAI's format. */
export function resultLine(r: ResultRow): string {
  return JSON.stringify({
    id: `batch_req_${r.batch_id.slice('batch_'.length)}_${r.line + 1}`,
    custom_id: r.custom_id,
    response: r.status_code === null ? null : { status_code: r.status_code, request_id: r.request_id, body: r.body },
    error: r.error,
  });
}

async function writeFile(client: DbClient, batch: BatchRow, filename: string, lines: string[], retentionDays: number): Promise<string> {
  const content = Buffer.from(`${lines.join('\n')}\n`);
  const id = newFileId();
  await client.query(
    `insert into batch_files (id, tenant_id, key_id, purpose, filename, bytes, lines, content, expires_at)
     values ($1, $2, $3, 'batch_output', $4, $5, $6, $7,
             now() + least(make_interval(days => $8::int), coalesce(make_interval(secs => $9::int), make_interval(days => $8::int))))`,
    [id, batch.tenant_id, batch.key_id, filename, content.byteLength, lines.length, content, retentionDays, batch.output_expires_seconds ?? null],
  );
  return id;
}
