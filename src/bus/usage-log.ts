import { randomBytes } from 'node:crypto';
import { AckPolicy, DeliverPolicy, DiscardPolicy, type JsMsg, type NatsConnection, RetentionPolicy, type StreamConfig, StorageType } from 'nats';
import { createLogger } from '../log.ts';
import { subjects, USAGE_LOG_STREAM } from './subjects.ts';

// The JetStream stream USAGE_LOG: a copy of every usage message metering has settled, published
// by metering after its ledger commit and before it acks the message on USAGE (work-queue
// retention: an acked message leaves USAGE at once). It is what lets a ledger restored from a
// backup settle again the usage that had settled after the backup point — `catraca usage replay`
// puts the messages of a period back on USAGE, and metering settles each request once by its id
// (those the restored ledger already holds are 'duplicate' no-ops). docs/operations.md, "Backup
// and restore".
//
//   - retention `limits`: max_age USAGE_LOG_RETENTION_DAYS (8: a week between base backups and a
//     day to restore), max_bytes USAGE_LOG_MAX_BYTES, discard old: it is a copy, never the only
//     record of unsettled usage (USAGE is), so when full its oldest copies go;
//   - msgID = the USAGE message's own (request id or a worker's batch id): a redelivered message
//     settled again within the 2-minute window is stored once;
//   - replicas: those of USAGE.

const log = createLogger('bus');

export interface UsageLogSettings {
  replicas: number;
  retentionDays: number;
  maxBytes: number;
}

export function usageLogConfig(s: UsageLogSettings): Partial<StreamConfig> & { name: string } {
  return {
    name: USAGE_LOG_STREAM,
    subjects: [subjects.usageLogWildcard],
    retention: RetentionPolicy.Limits,
    storage: StorageType.File,
    discard: DiscardPolicy.Old,
    max_bytes: s.maxBytes,
    max_msgs: -1,
    max_age: s.retentionDays * 86_400 * 1e9,
    duplicate_window: 2 * 60 * 1e9,
    num_replicas: s.replicas,
  };
}

/** Creates USAGE_LOG, or updates it when its limits or replicas differ (metering, at start). */
export async function ensureUsageLog(nc: NatsConnection, s: UsageLogSettings): Promise<'created' | 'updated' | 'unchanged'> {
  const jsm = await nc.jetstreamManager();
  const want = usageLogConfig(s);
  let have: StreamConfig | undefined;
  try {
    have = (await jsm.streams.info(USAGE_LOG_STREAM)).config;
  } catch (err) {
    if (!/not found/i.test(String((err as Error).message))) throw err;
  }
  if (!have) {
    try {
      await jsm.streams.add(want);
      log.info('USAGE_LOG stream created', { replicas: s.replicas, retention_days: s.retentionDays, max_bytes: s.maxBytes });
      return 'created';
    } catch (err) {
      if (!/already in use/i.test(String((err as Error).message))) throw err;
      have = (await jsm.streams.info(USAGE_LOG_STREAM)).config;
    }
  }
  if (have.max_age === want.max_age && have.max_bytes === want.max_bytes && (have.num_replicas || 1) === want.num_replicas) return 'unchanged';
  await jsm.streams.update(USAGE_LOG_STREAM, { ...have, max_age: want.max_age, max_bytes: want.max_bytes, num_replicas: want.num_replicas });
  return 'updated';
}

/** The pool a USAGE or USAGE_LOG subject names (`catraca.usage.<pool>`, `catraca.usagelog.<pool>`). */
function poolOf(subject: string): string {
  return subject.slice(subject.indexOf('.', 'catraca.'.length) + 1);
}

/**
 * Copies settled USAGE messages into USAGE_LOG and waits for JetStream to store them (metering,
 * after the commit, before the acks): a message is never acked on USAGE without its copy.
 */
export async function journalUsage(nc: NatsConnection, msgs: JsMsg[]): Promise<void> {
  if (msgs.length === 0) return;
  const js = nc.jetstream();
  await Promise.all(
    msgs.map((m) =>
      js.publish(subjects.usageLog(poolOf(m.subject)), m.data, {
        msgID: m.headers?.get('Nats-Msg-Id') || `${m.info.stream}-${m.seq}`,
      }),
    ),
  );
}

export interface ReplayResult {
  /** messages put back on USAGE (each one request's usage, or a worker's batch of them) */
  replayed: number;
  /** USAGE_LOG sequence numbers replayed (0 when none) */
  first_seq: number;
  last_seq: number;
  /** when the first and last replayed messages were settled (their copy stored), ISO */
  first_at: string | null;
  last_at: string | null;
  /** the oldest copy the log still holds, ISO (null: the log is empty) */
  log_starts_at: string | null;
  /** the log reaches back to `since`: nothing settled after it is missing from the replay */
  covered: boolean;
}

/**
 * Puts every USAGE_LOG message stored at or after `since` (and before the call) back on USAGE,
 * with msgID `replay-<log sequence>`, for metering to settle: each request once by its id, so
 * replaying more than needed costs only 'duplicate' no-ops.
 */
export async function replayUsageLog(nc: NatsConnection, since: Date, onProgress?: (n: number) => void): Promise<ReplayResult> {
  const jsm = await nc.jetstreamManager({ checkAPI: false });
  const js = nc.jetstream();
  const info = await jsm.streams.info(USAGE_LOG_STREAM);
  const logStartsAt = info.state.messages > 0 ? new Date(info.state.first_ts) : null;
  const result: ReplayResult = {
    replayed: 0,
    first_seq: 0,
    last_seq: 0,
    first_at: null,
    last_at: null,
    log_starts_at: logStartsAt?.toISOString() ?? null,
    covered: false,
  };
  // The log misses nothing settled after `since` if it existed then, and either never dropped a
  // copy (age, bytes) or still holds one from before `since`.
  const dropped = info.state.first_seq > 1;
  result.covered = new Date(info.created).getTime() <= since.getTime() && (!dropped || (logStartsAt !== null && logStartsAt.getTime() <= since.getTime()));
  const name = `replay-${randomBytes(6).toString('hex')}`;
  const created = await jsm.consumers.add(USAGE_LOG_STREAM, {
    name,
    ack_policy: AckPolicy.None,
    deliver_policy: DeliverPolicy.StartTime,
    opt_start_time: since.toISOString(),
    inactive_threshold: 60 * 1e9,
  });
  let pending = created.num_pending;
  try {
    const consumer = await js.consumers.get(USAGE_LOG_STREAM, name);
    while (pending > 0) {
      const batch = await consumer.fetch({ max_messages: Math.min(pending, 256), expires: 5000 });
      const acks: Array<Promise<unknown>> = [];
      let got = 0;
      for await (const m of batch) {
        got++;
        acks.push(js.publish(subjects.usage(poolOf(m.subject)), m.data, { msgID: `replay-${m.seq}` }));
        if (result.first_seq === 0) {
          result.first_seq = m.seq;
          result.first_at = new Date(Math.floor(m.info.timestampNanos / 1e6)).toISOString();
        }
        result.last_seq = m.seq;
        result.last_at = new Date(Math.floor(m.info.timestampNanos / 1e6)).toISOString();
      }
      await Promise.all(acks);
      if (got === 0) throw new Error(`USAGE_LOG: ${pending} message(s) announced but none delivered within 5 s`);
      pending -= got;
      result.replayed += got;
      onProgress?.(result.replayed);
    }
  } finally {
    await jsm.consumers.delete(USAGE_LOG_STREAM, name).catch(() => {});
  }
  return result;
}
