import type { DbClient } from './pool.ts';

// The table of stored responses (POST /v1/responses, src/protocols/responses/store.ts) as metering's
// sweeper sees it: rows past their retention go.

/** Deletes at most `limit` expired responses (metering's sweeper, every HOLD_SWEEP_INTERVAL_MS); how many it deleted. */
export async function sweepExpiredResponses(db: DbClient, limit = 1000): Promise<number> {
  const { rowCount } = await db.query(
    'delete from responses where id in (select id from responses where expires_at <= now() order by expires_at limit $1 for update skip locked)',
    [limit],
  );
  return rowCount ?? 0;
}
