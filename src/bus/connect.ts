import {
  connect,
  type ConnectionOptions,
  DiscardPolicy,
  ErrorCode,
  type NatsConnection,
  RetentionPolicy,
  type StreamConfig,
  type StreamInfo,
  StorageType,
} from 'nats';
import { ConfigSchema } from '../config.ts';
import { createLogger } from '../log.ts';
import { subjects, USAGE_STREAM } from './subjects.ts';

const log = createLogger('bus');

// ------------------------------------------------------------------------------ NATS_URL parsing
//
// NATS_URL is one server or a comma-separated list (`nats://nats-1:4222,nats://nats-2:4222`): the
// client connects to one of them (nats.js shuffles the list, which spreads processes over the
// cluster's nodes) and on a disconnect reconnects to another, for ever. Servers a cluster
// announces (its `connect_urls`) are added to the list as they are learnt.
//
// Credentials go in the URL, percent-encoded: `nats://worker:secret@nats-1:4222`. nats.js itself
// ignores user info in a server URL, so it is taken out here and passed as `user`/`pass` (a
// lone `nats://token@host` is a token). Every entry of the list may repeat it or only the first
// may carry it; two different credentials in one list are refused. With a user name, the
// process's reply inbox is `_INBOX.<user>.…` instead of `_INBOX.…`, so the server's permissions
// can let each role subscribe to its own replies only (deploy/nats/auth.conf).

export interface NatsTarget {
  /** host:port (or scheme://host:port) of every server, without credentials */
  servers: string[];
  user?: string;
  pass?: string;
  token?: string;
}

const USER_INFO = /^([a-z][a-z0-9+.-]*:\/\/)?([^@/]*)@(.*)$/i;

export function parseNatsUrl(url: string): NatsTarget {
  const servers: string[] = [];
  let creds: { user?: string; pass?: string; token?: string } | undefined;
  let credsKey: string | undefined;
  for (const raw of url.split(',')) {
    const entry = raw.trim();
    if (!entry) continue;
    const m = USER_INFO.exec(entry);
    if (!m) {
      servers.push(entry);
      continue;
    }
    servers.push(`${m[1] ?? ''}${m[3]}`);
    const info = m[2]!;
    const colon = info.indexOf(':');
    const these =
      colon < 0
        ? { token: decodeURIComponent(info) }
        : { user: decodeURIComponent(info.slice(0, colon)), pass: decodeURIComponent(info.slice(colon + 1)) };
    const key = JSON.stringify(these);
    if (credsKey !== undefined && credsKey !== key) throw new Error('NATS_URL: the servers of one list must all use the same credentials');
    creds = these;
    credsKey = key;
  }
  if (servers.length === 0) throw new Error('NATS_URL names no server');
  return { servers, ...creds };
}

/** Subject tokens may not contain `.`, `*`, `>` or whitespace; a user name that could is not used as an inbox prefix. */
const SUBJECT_TOKEN = /^[A-Za-z0-9_-]+$/;

/** nats.js options for NATS_URL: servers, credentials and, with a user, the inbox prefix `_INBOX.<user>`. */
export function natsOptions(url: string): ConnectionOptions {
  const t = parseNatsUrl(url);
  const opts: ConnectionOptions = { servers: t.servers };
  if (t.user !== undefined) {
    opts.user = t.user;
    opts.pass = t.pass;
    if (SUBJECT_TOKEN.test(t.user)) opts.inboxPrefix = `_INBOX.${t.user}`;
  }
  if (t.token !== undefined) opts.token = t.token;
  return opts;
}

/** Every `//user:password@` of a NATS_URL becomes `//user:***@` (a token becomes `***`), for logs and messages. */
export function redactNatsUrl(url: string): string {
  return url.replace(/\/\/([^@/,]*)@/g, (_m, info: string) => {
    const colon = info.indexOf(':');
    return colon < 0 ? '//***@' : `//${info.slice(0, colon)}:***@`;
  });
}

/** Connects with unlimited reconnects: a NATS restart, or the loss of a cluster node, must not take a process down. */
export async function connectBus(url: string, name: string): Promise<NatsConnection> {
  const nc = await connect({
    ...natsOptions(url),
    name,
    maxReconnectAttempts: -1,
    reconnectTimeWait: 250,
    pingInterval: 10000,
    // nats.js otherwise captures a stack trace (new Error()) on every request, JetStream publish
    // and ack, to enrich the rare timeout error: measurable CPU on the hot path.
    noAsyncTraces: true,
  });
  (async () => {
    for await (const s of nc.status()) {
      // `data` is the server's host:port (never credentials) or an error code.
      if (s.type === 'disconnect' || s.type === 'reconnect' || s.type === 'error') log.warn(`nats ${s.type}`, { name, data: String(s.data) });
    }
  })().catch(() => {});
  return nc;
}

// ------------------------------------------------------------------------------- USAGE stream

export type ReplicasSetting = 'auto' | number;

/** USAGE_REPLICAS from the environment (src/config.ts): `auto` (default) or 1–5. */
export function usageReplicasSetting(env: Record<string, string | undefined> = process.env): ReplicasSetting {
  return ConfigSchema.shape.USAGE_REPLICAS.parse(env.USAGE_REPLICAS);
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

export interface UsageStreamResult {
  action: 'created' | 'updated' | 'unchanged' | 'not_permitted';
  replicas: number;
}

const isPermissionError = (err: unknown) => (err as { code?: string })?.code === ErrorCode.PermissionsViolation;
const isNotFound = (err: unknown) => /not found/i.test(String((err as Error)?.message));

function differs(have: StreamConfig, want: Partial<StreamConfig>): boolean {
  return (
    JSON.stringify(have.subjects ?? []) !== JSON.stringify(want.subjects) ||
    have.retention !== want.retention ||
    have.storage !== want.storage ||
    have.discard !== want.discard ||
    have.max_age !== want.max_age ||
    have.duplicate_window !== want.duplicate_window ||
    (have.num_replicas || 1) !== want.num_replicas
  );
}

/**
 * Creates the USAGE stream, or updates it when its configuration differs: file storage, 7-day
 * retention, 2-minute duplicate window keyed by msgID, and `replicas` copies:
 *   - `auto` (USAGE_REPLICAS unset): min(3, servers in the cluster), and never fewer than the
 *     stream already has — a stream created with 1 replica on a single server is scaled to 3 once
 *     the cluster has three nodes (its consumers follow), and a process that sees a node down
 *     never scales it back;
 *   - a number: exactly that many (scaling down included; more than the cluster has fails).
 * A NATS user without the right to create or update the stream (a worker, see
 * deploy/nats/auth.conf) leaves it as it is and says so: metering, which may, creates it, and
 * usage publishes are retried until it exists.
 */
export async function ensureUsageStream(nc: NatsConnection, opts: { replicas?: ReplicasSetting } = {}): Promise<UsageStreamResult> {
  const setting = opts.replicas ?? usageReplicasSetting();
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
  const config: Partial<StreamConfig> & { name: string } = {
    name: USAGE_STREAM,
    subjects: [subjects.usageWildcard],
    retention: RetentionPolicy.Limits,
    storage: StorageType.File,
    discard: DiscardPolicy.Old,
    max_age: 7 * 24 * 3600 * 1e9,
    duplicate_window: 2 * 60 * 1e9,
    num_replicas: replicas,
  };

  if (!existing) {
    try {
      await jsm.streams.add(config);
      log.info('USAGE stream created', { replicas });
      return { action: 'created', replicas };
    } catch (err) {
      if (isPermissionError(err)) {
        log.warn('the USAGE stream does not exist and this NATS user may not create it: metering creates it; usage publishes are retried until then', { stream: USAGE_STREAM });
        return { action: 'not_permitted', replicas: 0 };
      }
      // another process created it meanwhile (with a different configuration): update below
      if (!/already in use/i.test(String((err as Error).message))) throw err;
      existing = await jsm.streams.info(USAGE_STREAM);
    }
  }
  if (!differs(existing.config, config)) return { action: 'unchanged', replicas: existing.config.num_replicas || 1 };
  try {
    await jsm.streams.update(USAGE_STREAM, config);
  } catch (err) {
    if (isPermissionError(err)) {
      log.warn('the USAGE stream differs from this process\'s settings and this NATS user may not update it: left as it is (metering updates it)', {
        stream: USAGE_STREAM, replicas: existing.config.num_replicas, wanted_replicas: replicas,
      });
      return { action: 'not_permitted', replicas: existing.config.num_replicas || 1 };
    }
    throw err;
  }
  if ((existing.config.num_replicas || 1) !== replicas) log.info('USAGE stream replicas changed', { from: existing.config.num_replicas || 1, to: replicas });
  return { action: 'updated', replicas };
}
