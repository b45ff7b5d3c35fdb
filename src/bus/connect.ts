import { connect, type ConnectionOptions, type NatsConnection } from 'nats';
import { createLogger } from '../log.ts';

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
      colon < 0 ? { token: decodeURIComponent(info) } : { user: decodeURIComponent(info.slice(0, colon)), pass: decodeURIComponent(info.slice(colon + 1)) };
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
