import { connect as natsConnect } from 'nats';
import { natsOptions } from '../../bus/connect.ts';
import { replayUsageLog } from '../../bus/usage-log.ts';
import { parseFlags, str } from '../args.ts';
import { CliError, type CliContext, UsageError } from '../context.ts';

/**
 * `catraca usage replay --since TIME`: after a restore of the ledger, puts the usage settled since
 * TIME (kept in the USAGE_LOG stream) back on USAGE, for metering to settle against the restored
 * database — each request once by its id; what the restored ledger already holds is a no-op.
 */
export async function usageReplay(ctx: CliContext, args: string[]): Promise<number> {
  const flags = parseFlags(args, { values: ['since'] }, 'usage replay');
  const raw = str(flags, 'since');
  if (!raw) throw new UsageError("usage replay: --since is required (an ISO date-time with its zone, e.g. the base backup's START TIME)");
  const since = new Date(raw);
  if (!/\d{4}-\d{2}-\d{2}T\d{2}:\d{2}/.test(raw) || !/(Z|[+-]\d{2}:?\d{2})$/.test(raw) || Number.isNaN(since.getTime()))
    throw new UsageError(`usage replay: --since ${JSON.stringify(raw)} is not an ISO date-time with its zone (2026-11-27T21:00:00Z)`);
  const natsUrl = ctx.natsUrl();
  if (!natsUrl) throw new CliError('usage replay: no NATS to read USAGE_LOG from: set NATS_URL');
  const nc = await natsConnect({ ...natsOptions(natsUrl), timeout: 5000, name: 'catraca-cli usage replay' }).catch((err: Error) => {
    throw new CliError(`usage replay: cannot reach NATS (${err.message})`);
  });
  try {
    const result = await replayUsageLog(nc, since);
    const human = [
      `usage replay: ${result.replayed} usage message(s) settled since ${since.toISOString()} put back on USAGE` +
        (result.replayed ? ` (USAGE_LOG ${result.first_seq}–${result.last_seq}, settled ${result.first_at} – ${result.last_at})` : ''),
      'metering settles each request once by its id; watch the backlog with `catraca status`, then run `catraca ledger check`',
      ...(result.covered
        ? []
        : [
            `WARNING: USAGE_LOG does not reach back to ${since.toISOString()} (oldest copy: ${result.log_starts_at ?? 'none'}): usage settled before then and after the backup is not in this replay`,
          ]),
    ].join('\n');
    ctx.out({ since: since.toISOString(), ...result }, human);
    return result.covered ? 0 : 1;
  } finally {
    await nc.drain().catch(() => {});
  }
}
