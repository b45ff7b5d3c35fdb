import type { ConsumerMessages, JsMsg, NatsConnection } from 'nats';
import type pg from 'pg';
import { decodeJson } from '../../bus/messages.ts';
import { NOTIFY_DURABLE, NOTIFY_STREAM } from '../../bus/subjects.ts';
import { createLogger } from '../../log.ts';
import type { Mailer } from '../../mail/index.ts';
import type { PixService } from '../../pix/service.ts';
import { ensureNotifyConsumer, publishEvents } from '../../notify/bus.ts';
import {
  attemptContext,
  claimDue,
  DEFAULT_SCHEDULE_MS,
  type DeliveryRow,
  fanOut,
  nextAttempt,
  purgeOld,
  recordAttempt,
  signingSecrets,
  unpublishedEvents,
} from '../../notify/deliveries.ts';
import { eventBody, scanExpiringKeys, WireEventSchema } from '../../notify/events.ts';
import { sendEventMail } from './mail.ts';
import type { Resolver } from '../../notify/ssrf.ts';
import { type AttemptResult, delivered, WebhookSender } from '../../notify/webhook.ts';

// The notifier: delivers the notification events, at least once. It runs in the portal process,
// which already holds what the deliveries need — SMTP, the PSP (the low-balance e-mail's Pix charge),
// the tenants' users and their notification settings — and any number of portals may run it:
//   - a durable JetStream consumer of NOTIFY (shared) turns each event into its deliveries in
//     PostgreSQL (unique per event and endpoint), then acks: a crash before the commit is a redelivery;
//   - a loop claims due deliveries (`for update skip locked`, with a lease), attempts them (webhook:
//     src/notify/webhook.ts; e-mail: src/portal/notifier/mail.ts), logs each attempt and schedules the next
//     (NOTIFY_RETRY_SCHEDULE, about a day) until delivered, or failed once the schedule is spent.
//     The schedule lives in PostgreSQL: a restart loses nothing, a receiver that was down gets
//     every event once it is back;
//   - a relay publishes events that no process published (it died first, NATS was away, the CLI
//     made them); a scan makes key.expiring events and deletes what is past NOTIFY_RETENTION_DAYS.

const log = createLogger('notify');

export interface NotifierOptions {
  db: pg.Pool;
  nc: NatsConnection;
  mailer: Mailer;
  pix: PixService | null;
  site: { url: string };
  /** Development (the portal's dev mode; tests): http and private addresses allowed. */
  allowPrivate: boolean;
  /** The resolver of webhook hosts (default: the system's). */
  resolve?: Resolver;
  /** NOTIFY_WEBHOOK_TIMEOUT_MS */
  timeoutMs?: number;
  /** NOTIFY_WEBHOOK_MAX_RESPONSE_BYTES */
  maxResponseBytes?: number;
  /** Delays between attempts (NOTIFY_RETRY_SCHEDULE), ms. */
  schedule?: number[];
  /** ±10% on each delay (default on). */
  jitter?: boolean;
  /** NOTIFY_RETENTION_DAYS (0: forever) */
  retentionDays?: number;
  /** How often due deliveries are looked for when nothing woke the loop (default 1 s). */
  pollIntervalMs?: number;
  /** How often the relay runs, and how old an unpublished event must be for it (default 5 s, 5 s). */
  relayIntervalMs?: number;
  relayAfterMs?: number;
  /** How often key.expiring and the retention run (default 60 s). */
  scanIntervalMs?: number;
  /** Attempts at once (default 8). */
  concurrency?: number;
}

export interface Notifier {
  stop(): Promise<void>;
}

export async function startNotifier(o: NotifierOptions): Promise<Notifier> {
  await ensureNotifyConsumer(o.nc);
  const sender = new WebhookSender({
    policy: { allowPrivate: o.allowPrivate, resolve: o.resolve },
    timeoutMs: o.timeoutMs ?? 15_000,
    maxResponseBytes: o.maxResponseBytes ?? 65_536,
  });
  const loop = deliveryLoop(o, sender);
  const consuming = consumeEvents(o, loop.wake);
  const relay = every(o.relayIntervalMs ?? 5000, () => relayUnpublished(o));
  const scan = every(o.scanIntervalMs ?? 60_000, () => scanAndPurge(o));
  log.info('notifier running', { allow_private: o.allowPrivate, schedule_ms: (o.schedule ?? DEFAULT_SCHEDULE_MS).join(',') });
  return {
    async stop() {
      relay.stop();
      scan.stop();
      await consuming.stop();
      await loop.stop();
      await Promise.all([relay.idle(), scan.idle()]);
      await sender.close();
    },
  };
}

/** Runs `fn` now and every `ms`, never two at once. */
function every(ms: number, fn: () => Promise<unknown>) {
  let running: Promise<unknown> | null = null;
  const tick = () => {
    running ??= fn()
      .catch((err) => log.warn('notifier task failed', { err: err as Error }))
      .finally(() => (running = null));
  };
  const timer = setInterval(tick, ms);
  timer.unref();
  tick();
  return { stop: () => clearInterval(timer), idle: () => running ?? Promise.resolve() };
}

/** NOTIFY → deliveries. A message that is no event is terminated; one whose fan-out failed comes back in 5 s. */
function consumeEvents(o: NotifierOptions, wake: () => void) {
  let stopping = false;
  let messages: ConsumerMessages | undefined;
  const handle = async (msg: JsMsg) => {
    const parsed = WireEventSchema.safeParse(safeJson(msg.data));
    if (!parsed.success) {
      log.error('notification message unreadable: dropped', { subject: msg.subject });
      msg.term();
      return;
    }
    try {
      const made = await fanOut(o.db, parsed.data.id);
      msg.ack();
      if (made > 0) wake();
    } catch (err) {
      log.warn('notification fan-out failed; redelivered', { event_id: parsed.data.id, err: err as Error });
      msg.nak(5000);
    }
  };
  const looping = (async () => {
    while (!stopping) {
      try {
        const consumer = await o.nc.jetstream().consumers.get(NOTIFY_STREAM, NOTIFY_DURABLE);
        messages = await consumer.consume({ max_messages: 100, expires: 2000 });
        for await (const msg of messages) {
          await handle(msg);
          if (stopping) break;
        }
      } catch (err) {
        if (stopping) break;
        log.warn('notify consumer interrupted; resuming', { err: err as Error });
        await new Promise((r) => setTimeout(r, 500));
      }
    }
  })();
  return {
    async stop() {
      stopping = true;
      await messages?.close().catch(() => {});
      await Promise.race([looping.catch(() => {}), new Promise((r) => setTimeout(r, 2000))]);
    },
  };
}

function safeJson(data: Uint8Array): unknown {
  try {
    return decodeJson(data);
  } catch {
    return null;
  }
}

/** Claims due deliveries and attempts them, `concurrency` at once; sleeps until woken or the poll interval. */
function deliveryLoop(o: NotifierOptions, sender: WebhookSender) {
  const concurrency = o.concurrency ?? 8;
  const leaseMs = (o.timeoutMs ?? 15_000) + 60_000;
  let stopping = false;
  let wakeUp: (() => void) | null = null;
  // a wake-up while attempting (not sleeping) skips the next sleep
  let woken = false;
  const sleep = (ms: number) =>
    woken
      ? Promise.resolve()
      : new Promise<void>((resolve) => {
          const timer = setTimeout(resolve, ms);
          wakeUp = () => {
            clearTimeout(timer);
            resolve();
          };
        }).finally(() => (wakeUp = null));
  const looping = (async () => {
    while (!stopping) {
      let claimed: DeliveryRow[] = [];
      woken = false;
      try {
        claimed = await claimDue(o.db, concurrency, leaseMs);
        await Promise.all(claimed.map((d) => attempt(o, sender, d)));
      } catch (err) {
        log.warn('notification deliveries failed; retried', { err: err as Error });
      }
      if (!stopping && claimed.length < concurrency) await sleep(o.pollIntervalMs ?? 1000);
    }
  })();
  return {
    wake: () => {
      woken = true;
      wakeUp?.();
    },
    async stop() {
      stopping = true;
      wakeUp?.();
      await looping;
    },
  };
}

/** One attempt of one delivery, logged; never throws (a failure to log leaves the lease to expire). */
async function attempt(o: NotifierOptions, sender: WebhookSender, d: DeliveryRow): Promise<void> {
  try {
    const { event, endpoint } = await attemptContext(o.db, d);
    if (!event) return void (await recordAttempt(o.db, d, { status: null, durationMs: 0, error: 'event no longer exists', state: 'failed' }));
    let result: AttemptResult;
    let final = false;
    let gone: string | undefined;
    if (d.channel === 'email') {
      const started = performance.now();
      const mailed = await sendEventMail(o, d, event);
      result = { status: null, durationMs: Math.round(performance.now() - started), error: mailed.error, retryAfterMs: null };
      final = mailed.error !== null && mailed.final;
    } else if (!endpoint?.enabled) {
      return void (await recordAttempt(o.db, d, { status: null, durationMs: 0, error: 'endpoint disabled', state: 'failed' }));
    } else {
      result = await sender.send({ url: endpoint.url, secrets: signingSecrets(endpoint), eventId: event.id, body: eventBody(event) });
      if (result.status === 410) {
        final = true;
        gone = `410 Gone on ${new Date().toISOString()}`;
      }
    }
    const ok = d.channel === 'email' ? result.error === null : delivered(result.status);
    const next = ok || final ? null : nextAttempt(d.attempts, o.schedule ?? DEFAULT_SCHEDULE_MS, { retryAfterMs: result.retryAfterMs, jitter: o.jitter });
    const state = ok ? 'delivered' : next ? 'pending' : 'failed';
    await recordAttempt(o.db, d, {
      status: result.status,
      durationMs: result.durationMs,
      error: result.error,
      state,
      next: next ?? undefined,
      disableEndpoint: gone,
    });
    const fields = { delivery_id: d.id, event_id: d.event_id, channel: d.channel, attempt: d.attempts, status: result.status, state };
    if (ok) log.info('notification delivered', fields);
    else log.warn('notification attempt failed', { ...fields, error: result.error, next_attempt_at: next?.toISOString() ?? null });
  } catch (err) {
    log.warn('notification attempt could not be recorded; tried again after its lease', { delivery_id: d.id, err: err as Error });
  }
}

async function relayUnpublished(o: NotifierOptions): Promise<void> {
  const events = await unpublishedEvents(o.db, o.relayAfterMs ?? 5000);
  if (events.length > 0) log.info('relaying unpublished notification events', { count: events.length });
  await publishEvents(o.nc, o.db, events, log);
}

async function scanAndPurge(o: NotifierOptions): Promise<void> {
  const expiring = await scanExpiringKeys(o.db);
  for (const e of expiring) log.info('notification event', { event_id: e.id, type: e.type, tenant_id: e.tenant_id });
  await publishEvents(o.nc, o.db, expiring, log);
  const purged = await purgeOld(o.db, o.retentionDays ?? 35);
  if (purged.attempts + purged.events > 0) log.info('notification log purged', purged);
}
