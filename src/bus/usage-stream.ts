import { DiscardPolicy, ErrorCode, type NatsConnection, RetentionPolicy, type StreamConfig, type StreamInfo, StorageType } from 'nats';
import { ConfigSchema } from '../config.ts';
import { createLogger, type Logger } from '../log.ts';
import type { Gauge, Metrics } from '../metrics/registry.ts';
import { METERING_DURABLE, subjects, USAGE_STREAM } from './subjects.ts';

// The JetStream stream USAGE: one message per request a worker served (msgID = request id), kept
// until metering has settled it. Nothing else records what a request cost, so the stream must
// never drop an unsettled message, however long metering is away:
//
//   - retention `workqueue`: a message leaves the stream when metering acks it (after its ledger
//     commit), never because of its age or of newer messages; the stream holds exactly the
//     unsettled usage (its message count is the backlog);
//   - discard `new`, `max_bytes` = USAGE_MAX_BYTES (1 GiB, ~2.5 million messages), no max_age,
//     no max_msgs: when metering has been away that long, a publish is refused ("maximum bytes
//     exceeded") instead of an older message being discarded; the worker keeps the message and
//     retries (src/runner/usage-publisher.ts) until metering makes room;
//   - a backlog alarm: metering checks the backlog every USAGE_BACKLOG_INTERVAL_MS, exposes it as
//     `catraca_usage_backlog_messages` and logs at error level while it exceeds USAGE_BACKLOG_ALARM
//     (`catraca status` shows it too).
//
// Earlier versions created USAGE with retention `limits` (discard old, 7-day max_age): under it a
// metering outage longer than 7 days loses usage. JetStream cannot change a stream's retention in
// place, so such a stream is left as it is (its replicas still follow USAGE_REPLICAS) and an
// error names the migration: stop the workers, let metering drain the stream (backlog 0 in
// `catraca status`), delete it with an admin NATS user (`nats stream rm USAGE`; no catraca role
// may delete it) and restart metering, which creates it anew.

const log = createLogger('bus');

export type ReplicasSetting = 'auto' | number;

/** USAGE_REPLICAS from the environment (src/config.ts): `auto` (default) or 1–5. */
export function usageReplicasSetting(env: Record<string, string | undefined> = process.env): ReplicasSetting {
  return ConfigSchema.shape.USAGE_REPLICAS.parse(env.USAGE_REPLICAS);
}

/** USAGE_MAX_BYTES from the environment (src/config.ts). */
export function usageMaxBytesSetting(env: Record<string, string | undefined> = process.env): number {
  return ConfigSchema.shape.USAGE_MAX_BYTES.parse(env.USAGE_MAX_BYTES === '' ? undefined : env.USAGE_MAX_BYTES);
}

export interface UsageStreamResult {
  /** `retention_mismatch`: the stream exists with another retention, which JetStream cannot change (logged at error level). */
  action: 'created' | 'updated' | 'unchanged' | 'not_permitted' | 'retention_mismatch';
  replicas: number;
}

export interface UsageStreamSettings {
  replicas?: ReplicasSetting;
  /** USAGE_MAX_BYTES; default from the environment */
  maxBytes?: number;
}

/** The configuration catraca wants for USAGE (see the top of this file). */
export function usageStreamConfig(replicas: number, maxBytes: number): Partial<StreamConfig> & { name: string } {
  return {
    name: USAGE_STREAM,
    subjects: [subjects.usageWildcard],
    retention: RetentionPolicy.Workqueue,
    storage: StorageType.File,
    discard: DiscardPolicy.New,
    max_bytes: maxBytes,
    max_msgs: -1,
    max_age: 0,
    duplicate_window: 2 * 60 * 1e9,
    num_replicas: replicas,
  };
}

const isPermissionError = (err: unknown) => (err as { code?: string })?.code === ErrorCode.PermissionsViolation;
const isNotFound = (err: unknown) => /not found/i.test(String((err as Error)?.message));

function differs(have: StreamConfig, want: Partial<StreamConfig>): boolean {
  return (
    JSON.stringify(have.subjects ?? []) !== JSON.stringify(want.subjects) ||
    have.retention !== want.retention ||
    have.storage !== want.storage ||
    have.discard !== want.discard ||
    have.max_bytes !== want.max_bytes ||
    have.max_msgs !== want.max_msgs ||
    have.max_age !== want.max_age ||
    have.duplicate_window !== want.duplicate_window ||
    (have.num_replicas || 1) !== want.num_replicas
  );
}

/**
 * Creates the USAGE stream, or updates it when its configuration differs (see the top of this
 * file), with `replicas` copies:
 *   - `auto` (USAGE_REPLICAS unset): min(3, servers in the cluster), and never fewer than the
 *     stream already has — a stream created with 1 replica on a single server is scaled to 3 once
 *     the cluster has three nodes (its consumers follow), and a process that sees a node down
 *     never scales it back;
 *   - a number: exactly that many (scaling down included; more than the cluster has fails).
 * A NATS user without the right to create or update the stream (a worker, see
 * deploy/nats/auth.conf) leaves it as it is and says so: metering, which may, creates it, and
 * usage publishes are retried until it exists. A stream with another retention is left as it is
 * (only its replicas follow) and the migration is logged at error level.
 */
export async function ensureUsageStream(nc: NatsConnection, opts: UsageStreamSettings = {}): Promise<UsageStreamResult> {
  const setting = opts.replicas ?? usageReplicasSetting();
  const maxBytes = opts.maxBytes ?? usageMaxBytesSetting();
  const jsm = await nc.jetstreamManager();
  let existing: StreamInfo | undefined;
  try {
    existing = await jsm.streams.info(USAGE_STREAM);
  } catch (err) {
    if (!isNotFound(err)) throw err;
  }
  let replicas: number;
  if (setting === 'auto') {
    let size = natsClusterSize(nc);
    if (size === 0) {
      log.warn('NATS cluster size unknown (the server announces no client URLs); set USAGE_REPLICAS', { stream: USAGE_STREAM });
      size = 1;
    }
    replicas = Math.max(existing?.config.num_replicas || 1, Math.min(3, size));
  } else {
    replicas = setting;
  }
  let config = usageStreamConfig(replicas, maxBytes);

  if (!existing) {
    try {
      await jsm.streams.add(config);
      log.info('USAGE stream created', { replicas, retention: config.retention, max_bytes: maxBytes });
      return { action: 'created', replicas };
    } catch (err) {
      if (isPermissionError(err)) {
        log.warn('the USAGE stream does not exist and this NATS user may not create it: metering creates it; usage publishes are retried until then', {
          stream: USAGE_STREAM,
        });
        return { action: 'not_permitted', replicas: 0 };
      }
      // another process created it meanwhile (with a different configuration): update below
      if (!/already in use/i.test(String((err as Error).message))) throw err;
      existing = await jsm.streams.info(USAGE_STREAM);
    }
  }
  const mismatch = existing.config.retention !== config.retention;
  if (mismatch) {
    log.error(
      `the USAGE stream has retention "${existing.config.retention}" (discard ${existing.config.discard}, max_age ${existing.config.max_age / 1e9} s), not "${config.retention}": ` +
        "JetStream cannot change a stream's retention in place, and under this one a long metering outage can drop unsettled usage. Left as it is (only its replicas follow USAGE_REPLICAS). " +
        'To migrate: stop the workers, wait until `catraca status` shows a usage backlog of 0, delete the stream with an admin NATS user (`nats stream rm USAGE`), restart metering (it creates the stream anew), then the workers.',
      { stream: USAGE_STREAM, retention: existing.config.retention, wanted_retention: config.retention },
    );
    config = { ...existing.config, num_replicas: replicas };
    if ((existing.config.num_replicas || 1) === replicas) return { action: 'retention_mismatch', replicas };
  } else if (!differs(existing.config, config)) {
    return { action: 'unchanged', replicas: existing.config.num_replicas || 1 };
  }
  try {
    await jsm.streams.update(USAGE_STREAM, config);
  } catch (err) {
    if (isPermissionError(err)) {
      log.warn("the USAGE stream differs from this process's settings and this NATS user may not update it: left as it is (metering updates it)", {
        stream: USAGE_STREAM,
        replicas: existing.config.num_replicas,
        wanted_replicas: replicas,
      });
      return { action: 'not_permitted', replicas: existing.config.num_replicas || 1 };
    }
    throw err;
  }
  if ((existing.config.num_replicas || 1) !== replicas) log.info('USAGE stream replicas changed', { from: existing.config.num_replicas || 1, to: replicas });
  return { action: mismatch ? 'retention_mismatch' : 'updated', replicas };
}

// ------------------------------------------------------------------------------ backlog

export interface UsageBacklog {
  /** usage messages not yet settled: metering's pending plus unacknowledged (the stream's count without its consumer) */
  messages: number;
  /** the metering consumer: delivered to nobody yet / delivered and not yet acked; null without the consumer */
  pending: number | null;
  ackPending: number | null;
  /** the stream: messages and bytes stored, its byte limit (-1: none) and retention */
  streamMessages: number;
  streamBytes: number;
  maxBytes: number;
  retention: string;
}

/** The USAGE backlog now (stream and metering consumer info). Throws when the stream does not exist. */
export async function usageBacklog(nc: NatsConnection): Promise<UsageBacklog> {
  // no $JS.API.INFO probe: the cli NATS role may read only USAGE's stream and consumer info
  const jsm = await nc.jetstreamManager({ checkAPI: false });
  const stream = await jsm.streams.info(USAGE_STREAM);
  let pending: number | null = null;
  let ackPending: number | null = null;
  try {
    const c = await jsm.consumers.info(USAGE_STREAM, METERING_DURABLE);
    pending = c.num_pending;
    ackPending = c.num_ack_pending;
  } catch (err) {
    if (!isNotFound(err)) throw err;
  }
  const viaConsumer = pending === null ? null : pending + (ackPending ?? 0);
  return {
    // work-queue retention: every message in the stream is unsettled, consumer or not
    messages: stream.config.retention === RetentionPolicy.Workqueue || viaConsumer === null ? stream.state.messages : viaConsumer,
    pending,
    ackPending,
    streamMessages: stream.state.messages,
    streamBytes: stream.state.bytes,
    maxBytes: stream.config.max_bytes,
    retention: stream.config.retention,
  };
}

export interface BacklogWatch {
  /** checks now: updates the gauges, logs a crossing of the threshold */
  check(): Promise<UsageBacklog | null>;
  readonly backlog: number;
  readonly alarm: boolean;
  stop(): void;
}

/**
 * Checks the USAGE backlog every `intervalMs`: `catraca_usage_backlog_messages`,
 * `catraca_usage_backlog_alarm` (1 while above `threshold`; 0 = never) and the stream's bytes and
 * limit as gauges; an error line when it goes above the threshold and every minute while it
 * stays there, an info line when it is back under.
 */
export function watchUsageBacklog(
  nc: NatsConnection,
  opts: { threshold: number; intervalMs?: number; metrics?: Metrics; log?: Logger; repeatMs?: number },
): BacklogWatch {
  const logger = opts.log ?? log;
  const repeatMs = opts.repeatMs ?? 60_000;
  let last: UsageBacklog | null = null;
  let alarm = false;
  let lastAlarmLog = 0;
  const gauges: Gauge[] = [];
  if (opts.metrics) {
    const m = opts.metrics;
    gauges.push(
      m.gauge('catraca_usage_backlog_messages', 'USAGE messages not yet settled (metering consumer pending + unacknowledged)', {}, () => last?.messages ?? 0),
      m.gauge('catraca_usage_backlog_alarm', '1 while the usage backlog exceeds USAGE_BACKLOG_ALARM', {}, () => (alarm ? 1 : 0)),
      m.gauge('catraca_usage_stream_bytes', 'Bytes stored in the USAGE stream', {}, () => last?.streamBytes ?? 0),
      m.gauge('catraca_usage_stream_max_bytes', 'Byte limit of the USAGE stream (publishes are refused beyond it; -1: none)', {}, () => last?.maxBytes ?? 0),
    );
  }
  const check = async (): Promise<UsageBacklog | null> => {
    try {
      last = await usageBacklog(nc);
    } catch (err) {
      logger.warn('usage backlog check failed', { err: err as Error });
      return null;
    }
    const above = opts.threshold > 0 && last.messages > opts.threshold;
    const fields = {
      backlog: last.messages,
      threshold: opts.threshold,
      pending: last.pending,
      ack_pending: last.ackPending,
      stream_bytes: last.streamBytes,
      max_bytes: last.maxBytes,
    };
    if (above && (!alarm || Date.now() - lastAlarmLog >= repeatMs)) {
      logger.error('usage backlog above USAGE_BACKLOG_ALARM: usage is not being settled (is metering running and PostgreSQL reachable?)', fields);
      lastAlarmLog = Date.now();
    } else if (!above && alarm) {
      logger.info('usage backlog back under USAGE_BACKLOG_ALARM', fields);
    }
    alarm = above;
    return last;
  };
  const timer = setInterval(() => void check(), opts.intervalMs ?? 5000);
  timer.unref();
  return {
    check,
    get backlog() {
      return last?.messages ?? 0;
    },
    get alarm() {
      return alarm;
    },
    stop: () => clearInterval(timer),
  };
}

/**
 * How many servers the cluster we are connected to has, from the server's INFO: 1 when it is not
 * clustered, else the number of client URLs it announces (every node's, its own included).
 * 0 = clustered but unknown (`no_advertise`).
 */
export function natsClusterSize(nc: NatsConnection): number {
  const info = nc.info;
  if (!info?.cluster) return 1;
  return new Set(info.connect_urls ?? []).size;
}
