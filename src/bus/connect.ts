import { connect, type NatsConnection, RetentionPolicy, StorageType, DiscardPolicy } from 'nats';
import { createLogger } from '../log.ts';
import { subjects, USAGE_STREAM } from './subjects.ts';

const log = createLogger('bus');

/** Connects with unlimited reconnects: a NATS restart must not take a process down. */
export async function connectBus(url: string, name: string): Promise<NatsConnection> {
  const nc = await connect({
    servers: url.split(','),
    name,
    maxReconnectAttempts: -1,
    reconnectTimeWait: 250,
    pingInterval: 10000,
  });
  (async () => {
    for await (const s of nc.status()) {
      if (s.type === 'disconnect' || s.type === 'reconnect' || s.type === 'error') log.warn(`nats ${s.type}`, { name, data: String(s.data) });
    }
  })().catch(() => {});
  return nc;
}

/** Creates or updates the USAGE stream: file storage, 2-minute duplicate window keyed by msgID. */
export async function ensureUsageStream(nc: NatsConnection): Promise<void> {
  const jsm = await nc.jetstreamManager();
  const config = {
    name: USAGE_STREAM,
    subjects: [subjects.usageWildcard],
    retention: RetentionPolicy.Limits,
    storage: StorageType.File,
    discard: DiscardPolicy.Old,
    max_age: 7 * 24 * 3600 * 1e9,
    duplicate_window: 2 * 60 * 1e9,
  };
  try {
    await jsm.streams.info(USAGE_STREAM);
    await jsm.streams.update(USAGE_STREAM, config);
  } catch (err) {
    if (!String((err as Error).message).includes('not found')) throw err;
    await jsm.streams.add(config);
  }
}
