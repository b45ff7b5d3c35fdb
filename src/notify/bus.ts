import { AckPolicy, DeliverPolicy, DiscardPolicy, type NatsConnection, RetentionPolicy, StorageType } from 'nats';
import { natsClusterSize } from '../bus/usage-stream.ts';
import { encode } from '../bus/messages.ts';
import { NOTIFY_DURABLE, NOTIFY_STREAM, subjects } from '../bus/subjects.ts';
import type { DbClient } from '../db/pool.ts';
import type { Logger } from '../log.ts';
import { checkBalances, type NotifyEvent, toWire } from './events.ts';

// The JetStream stream NOTIFY: each event of the outbox (notify_events) once (msgID = event id,
// duplicates within 2 minutes dropped by the server), kept until the notifier has turned it into
// deliveries (work-queue retention). When it is full or away, a publish fails and the event stays
// unpublished in PostgreSQL, where the notifier's relay finds it again: nothing is lost either way.

/** 256 MiB: events are small (< 1 KiB) and drained within seconds while the notifier runs. */
const NOTIFY_MAX_BYTES = 256 * 1024 ** 2;

/** Creates NOTIFY when it does not exist (the notifier, at start); replicas min(3, cluster). */
export async function ensureNotifyStream(nc: NatsConnection): Promise<void> {
  const jsm = await nc.jetstreamManager();
  try {
    await jsm.streams.info(NOTIFY_STREAM);
    return;
  } catch (err) {
    if (!/not found/i.test(String((err as Error).message))) throw err;
  }
  await jsm.streams
    .add({
      name: NOTIFY_STREAM,
      subjects: [subjects.notifyWildcard],
      retention: RetentionPolicy.Workqueue,
      storage: StorageType.File,
      discard: DiscardPolicy.New,
      max_bytes: NOTIFY_MAX_BYTES,
      duplicate_window: 2 * 60 * 1e9,
      num_replicas: Math.max(1, Math.min(3, natsClusterSize(nc))),
    })
    .catch((err) => {
      if (!/already in use/i.test(String(err.message))) throw err;
    });
}

/** The notifier's durable consumer (shared by every portal process). */
export async function ensureNotifyConsumer(nc: NatsConnection, ackWaitMs = 30_000): Promise<void> {
  await ensureNotifyStream(nc);
  const jsm = await nc.jetstreamManager();
  try {
    await jsm.consumers.info(NOTIFY_STREAM, NOTIFY_DURABLE);
    return;
  } catch {
    // created below
  }
  await jsm.consumers
    .add(NOTIFY_STREAM, {
      durable_name: NOTIFY_DURABLE,
      ack_policy: AckPolicy.Explicit,
      deliver_policy: DeliverPolicy.All,
      filter_subject: subjects.notifyWildcard,
      ack_wait: ackWaitMs * 1e6,
      max_deliver: -1,
    })
    .catch((err) => {
      if (!/already/i.test(String(err.message))) throw err;
    });
}

/**
 * Publishes events to NOTIFY and marks those the server acknowledged. Never throws: what could not
 * be published stays unpublished for the relay (logged). Returns how many were published.
 */
export async function publishEvents(nc: NatsConnection | null, db: DbClient, events: NotifyEvent[], log: Logger): Promise<number> {
  if (!nc || events.length === 0) return 0;
  const js = nc.jetstream();
  const published: string[] = [];
  for (const e of events) {
    try {
      await js.publish(subjects.notify(e.type), encode(toWire(e)), { msgID: e.id, timeout: 5000 });
      published.push(e.id);
    } catch (err) {
      log.warn('notification event not published yet; the relay retries', { event_id: e.id, type: e.type, err: err as Error });
      break;
    }
  }
  if (published.length > 0) {
    try {
      await db.query('update notify_events set published_at = now() where id = any($1) and published_at is null', [published]);
    } catch (err) {
      // published twice at worst: the server drops the duplicate, the notifier's deliveries are unique per event
      log.warn('could not mark notification events published', { err: err as Error });
    }
  }
  return published.length;
}

/**
 * After a tenant's balance changed outside settlement (a Pix credit or refund, a grant, a new
 * threshold): its balance crossings are checked (and re-armed), and these events with theirs are
 * published. Never throws (logged): the crossing state is level-triggered, so the next check makes
 * good a failed one. Returns every event made or given.
 */
export async function afterBalanceChange(
  db: DbClient,
  nc: NatsConnection | null,
  tenantId: string,
  events: NotifyEvent[],
  log: Logger,
): Promise<NotifyEvent[]> {
  let all = events;
  try {
    all = [...events, ...(await checkBalances(db, [tenantId]))];
  } catch (err) {
    log.warn('notification check failed after a balance change', { tenant_id: tenantId, err: err as Error });
  }
  for (const e of all) log.info('notification event', { event_id: e.id, type: e.type, tenant_id: e.tenant_id });
  await publishEvents(nc, db, all, log);
  return all;
}

/**
 * Publishes events made in a transaction that has committed (e.g. key.revoked with its revocation),
 * each logged. Never throws: what is not published stays for the notifier's relay.
 */
export async function publishMade(db: DbClient, nc: NatsConnection | null, events: NotifyEvent[], log: Logger): Promise<void> {
  for (const e of events) log.info('notification event', { event_id: e.id, type: e.type, tenant_id: e.tenant_id });
  await publishEvents(nc, db, events, log);
}

/** Makes events (a catraca_notify_* call) and publishes them; never throws (logged): e.g. key.revoked after a revocation. */
export async function emitEvents(db: DbClient, nc: NatsConnection | null, make: (db: DbClient) => Promise<NotifyEvent[]>, log: Logger): Promise<NotifyEvent[]> {
  try {
    const events = await make(db);
    for (const e of events) log.info('notification event', { event_id: e.id, type: e.type, tenant_id: e.tenant_id });
    await publishEvents(nc, db, events, log);
    return events;
  } catch (err) {
    log.warn('notification event not made', { err: err as Error });
    return [];
  }
}
