import type { DbClient } from '../db/pool.ts';
import { EVENT_TYPES, type NotifyEvent } from './events.ts';

// The deliveries of events (PostgreSQL): made from NOTIFY by the notifier (one per enabled endpoint
// that takes the event's type, and one e-mail when the tenant e-mails that type and has someone to
// send it to), claimed when due, their attempts logged, their next attempt scheduled.

export interface DeliveryRow {
  id: string;
  event_id: string;
  tenant_id: string;
  endpoint_id: string | null;
  channel: 'webhook' | 'email';
  state: 'pending' | 'delivered' | 'failed';
  /** attempts made, this one included once claimed */
  attempts: number;
  next_attempt_at: Date;
  pix_txid: string | null;
}

/** The attempt schedule of Standard Webhooks' example, over about a day: after the first attempt, 5 s, 30 s, 2 min, 10 min, 1 h, 3 h, 6 h, 12 h. */
export const DEFAULT_SCHEDULE_MS = [5_000, 30_000, 120_000, 600_000, 3_600_000, 10_800_000, 21_600_000, 43_200_000];

/** Who receives a tenant's notification e-mails: its owners and billing members with a verified address. */
export const RECIPIENTS_SQL = `select email from portal_users where tenant_id = $1 and role in ('owner', 'billing') and email_verified_at is not null order by email`;

/** The deliveries of an event (none twice, whoever runs this how often); returns how many were made. */
export async function fanOut(db: DbClient, eventId: string): Promise<number> {
  const { rowCount } = await db.query(
    `with ev as (select id, tenant_id, type from notify_events where id = $1)
     insert into notify_deliveries (event_id, tenant_id, endpoint_id, channel)
     select ev.id, ev.tenant_id, e.id, 'webhook' from ev join notify_endpoints e on e.tenant_id = ev.tenant_id and e.enabled and ev.type = any(e.events)
     union all
     select ev.id, ev.tenant_id, null, 'email' from ev left join notify_tenants n on n.tenant_id = ev.tenant_id
      where ev.type = any(coalesce(n.email_events, $2::text[]))
        and exists (select 1 from portal_users u where u.tenant_id = ev.tenant_id and u.role in ('owner', 'billing') and u.email_verified_at is not null)
     on conflict (event_id, coalesce(endpoint_id, '')) do nothing`,
    [eventId, [...EVENT_TYPES]],
  );
  return rowCount ?? 0;
}

/**
 * Takes up to `limit` due deliveries (skipping those another notifier holds), counts the attempt and
 * pushes their next_attempt_at `leaseMs` ahead: a notifier that dies mid-attempt leaves them to be
 * tried again then.
 */
export async function claimDue(db: DbClient, limit: number, leaseMs: number): Promise<DeliveryRow[]> {
  const { rows } = await db.query(
    `update notify_deliveries d set attempts = d.attempts + 1, next_attempt_at = now() + make_interval(secs => $2::double precision / 1000), updated_at = now()
      where d.id in (select id from notify_deliveries where state = 'pending' and next_attempt_at <= now()
                      order by next_attempt_at limit $1 for update skip locked)
     returning d.*`,
    [limit, leaseMs],
  );
  return rows;
}

export interface EndpointSecrets {
  url: string;
  enabled: boolean;
  secret: string;
  previous_secret: string | null;
  previous_until: Date | null;
}

/** What an attempt needs: the event, and the endpoint for a webhook (null when deleted meanwhile). */
export async function attemptContext(db: DbClient, d: DeliveryRow): Promise<{ event: NotifyEvent | null; endpoint: EndpointSecrets | null }> {
  const { rows } = await db.query('select * from notify_events where id = $1', [d.event_id]);
  if (!d.endpoint_id) return { event: rows[0] ?? null, endpoint: null };
  const ep = await db.query('select url, enabled, secret, previous_secret, previous_until from notify_endpoints where id = $1', [d.endpoint_id]);
  return { event: rows[0] ?? null, endpoint: ep.rows[0] ?? null };
}

/** The secrets that sign now: the current one, and the previous one until its grace ends. */
export function signingSecrets(ep: EndpointSecrets, now = new Date()): string[] {
  return ep.previous_secret && ep.previous_until && ep.previous_until > now ? [ep.secret, ep.previous_secret] : [ep.secret];
}

export interface AttemptRecord {
  status: number | null;
  durationMs: number;
  error: string | null;
  /** delivered, failed for good, or pending until `next` */
  state: DeliveryRow['state'];
  next?: Date;
  /** The receiver answered 410 Gone (Standard Webhooks): the endpoint is disabled, saying why. */
  disableEndpoint?: string;
}

/**
 * Logs an attempt and moves its delivery on (and disables its endpoint after a 410), in one
 * statement: no one sees the endpoint disabled while its delivery still looks pending.
 */
export async function recordAttempt(db: DbClient, d: DeliveryRow, r: AttemptRecord): Promise<void> {
  await db.query(
    `with attempt as (
       insert into notify_attempts (delivery_id, tenant_id, attempt, status_code, duration_ms, error) values ($1, $2, $3, $4, $5, $6)
     ), delivery as (
       update notify_deliveries set state = $7, next_attempt_at = coalesce($8, next_attempt_at), updated_at = now() where id = $1
     )
     update notify_endpoints set enabled = false, disabled_reason = $10, updated_at = now() where id = $9 and $10::text is not null`,
    [d.id, d.tenant_id, d.attempts, r.status, r.durationMs, r.error?.slice(0, 500) ?? null, r.state, r.next ?? null, d.endpoint_id, r.disableEndpoint ?? null],
  );
}

/**
 * When the next attempt is due after `attempts` failed ones: the schedule's next delay (±10% jitter
 * so that many failures do not come back together), at least what the receiver's Retry-After asked
 * (at most 12 h); null once the schedule is spent.
 */
export function nextAttempt(attempts: number, schedule: number[], o: { retryAfterMs?: number | null; jitter?: boolean; now?: number } = {}): Date | null {
  if (attempts > schedule.length) return null;
  let delay = schedule[attempts - 1];
  if (o.jitter !== false) delay = Math.round(delay * (0.9 + Math.random() * 0.2));
  if (o.retryAfterMs) delay = Math.max(delay, Math.min(o.retryAfterMs, 12 * 3_600_000));
  return new Date((o.now ?? Date.now()) + delay);
}

/** Events no process published (it died first, NATS was away, the CLI made them): the relay's. */
export async function unpublishedEvents(db: DbClient, olderThanMs: number, limit = 200): Promise<NotifyEvent[]> {
  const { rows } = await db.query(
    `select * from notify_events where published_at is null and created_at <= now() - make_interval(secs => $1::double precision / 1000)
      order by created_at limit $2`,
    [olderThanMs, limit],
  );
  return rows;
}

/** Deletes what is older than the retention (at most `batch` rows each): attempts, then finished events with their deliveries. */
export async function purgeOld(db: DbClient, retentionDays: number, batch = 5000): Promise<{ attempts: number; events: number }> {
  if (retentionDays <= 0) return { attempts: 0, events: 0 };
  const attempts = await db.query(
    `delete from notify_attempts where id in (select id from notify_attempts where created_at < now() - make_interval(days => $1) limit $2)`,
    [retentionDays, batch],
  );
  const events = await db.query(
    `delete from notify_events where id in (
       select e.id from notify_events e
        where e.created_at < now() - make_interval(days => $1) and e.published_at is not null
          and not exists (select 1 from notify_deliveries d where d.event_id = e.id and d.state = 'pending')
        limit $2)`,
    [retentionDays, batch],
  );
  return { attempts: attempts.rowCount ?? 0, events: events.rowCount ?? 0 };
}
