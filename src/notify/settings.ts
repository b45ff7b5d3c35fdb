import { createId } from '@paralleldrive/cuid2';
import type { DbClient } from '../db/pool.ts';
import { DUST_MICROS, EVENT_TYPES, type EventType } from './events.ts';
import { newSecret } from './webhook.ts';

// A tenant's notification settings as the portal edits them: its webhook endpoints (the secret
// returned once, at creation and rotation, never read back by these functions), the low-balance
// threshold and the events it e-mails; the delivery log and its replays. Every query is scoped by
// the tenant: another tenant's endpoint or delivery is "not found".

/** Endpoints a tenant may have. */
export const MAX_ENDPOINTS = 10;
/** How long the previous secret keeps signing after a rotation. */
export const ROTATION_GRACE_MS = 24 * 3_600_000;

export interface TenantSettings {
  lowBalanceMicros: bigint | null;
  emailEvents: EventType[];
}

export interface EndpointView {
  id: string;
  url: string;
  events: EventType[];
  enabled: boolean;
  disabled_reason: string | null;
  created_at: Date;
  /** the previous secret signs too until then (after a rotation) */
  previous_until: Date | null;
}

export async function getSettings(db: DbClient, tenantId: string): Promise<TenantSettings> {
  const { rows } = await db.query('select low_balance_micros, email_events from notify_tenants where tenant_id = $1', [tenantId]);
  return rows[0]
    ? { lowBalanceMicros: rows[0].low_balance_micros, emailEvents: rows[0].email_events }
    : { lowBalanceMicros: null, emailEvents: [...EVENT_TYPES] };
}

/**
 * Saves the settings. A new threshold starts as the balance is now — already below it counts as
 * announced — so saving fires nothing: balance.low comes when a debit next takes the balance from at
 * or above the threshold to below it (the portal shows the balance the user sets it against).
 */
export async function saveSettings(db: DbClient, tenantId: string, s: TenantSettings): Promise<void> {
  await db.query(
    `insert into notify_tenants (tenant_id, low_balance_micros, email_events, low_fired, depleted_fired, updated_at)
     select t.id, $2, $3, coalesce(t.balance_micros < $2, false), t.balance_micros < $4, now() from tenants t where t.id = $1
     on conflict (tenant_id) do update set
       low_balance_micros = excluded.low_balance_micros, email_events = excluded.email_events, updated_at = now(),
       low_fired = case when notify_tenants.low_balance_micros is distinct from excluded.low_balance_micros then excluded.low_fired else notify_tenants.low_fired end`,
    [tenantId, s.lowBalanceMicros, s.emailEvents, DUST_MICROS],
  );
}

export async function listEndpoints(db: DbClient, tenantId: string): Promise<EndpointView[]> {
  const { rows } = await db.query(
    `select id, url, events, enabled, disabled_reason, created_at, case when previous_until > now() then previous_until end as previous_until
       from notify_endpoints where tenant_id = $1 order by created_at, id`,
    [tenantId],
  );
  return rows;
}

export async function getEndpoint(db: DbClient, tenantId: string, id: string): Promise<EndpointView | null> {
  return (await listEndpoints(db, tenantId)).find((e) => e.id === id) ?? null;
}

/** A new endpoint and its secret (to show once); null when the tenant has MAX_ENDPOINTS already. */
export async function createEndpoint(db: DbClient, tenantId: string, url: string, events: EventType[]): Promise<{ id: string; secret: string } | null> {
  const id = `ep_${createId()}`;
  const secret = newSecret();
  const { rowCount } = await db.query(
    `insert into notify_endpoints (id, tenant_id, url, events, secret)
     select $1, $2, $3, $4, $5 where (select count(*) from notify_endpoints where tenant_id = $2) < $6`,
    [id, tenantId, url, events, secret, MAX_ENDPOINTS],
  );
  return rowCount ? { id, secret } : null;
}

/** A new secret (to show once); the previous one keeps signing for ROTATION_GRACE_MS. Null: no such endpoint. */
export async function rotateSecret(db: DbClient, tenantId: string, id: string): Promise<string | null> {
  const secret = newSecret();
  const { rowCount } = await db.query(
    `update notify_endpoints set previous_secret = secret, previous_until = now() + make_interval(secs => $4::double precision / 1000), secret = $3, updated_at = now()
      where id = $1 and tenant_id = $2`,
    [id, tenantId, secret, ROTATION_GRACE_MS],
  );
  return rowCount ? secret : null;
}

export async function setEnabled(db: DbClient, tenantId: string, id: string, enabled: boolean): Promise<boolean> {
  const { rowCount } = await db.query('update notify_endpoints set enabled = $3, disabled_reason = null, updated_at = now() where id = $1 and tenant_id = $2', [
    id,
    tenantId,
    enabled,
  ]);
  return (rowCount ?? 0) > 0;
}

export async function deleteEndpoint(db: DbClient, tenantId: string, id: string): Promise<boolean> {
  const { rowCount } = await db.query('delete from notify_endpoints where id = $1 and tenant_id = $2', [id, tenantId]);
  return (rowCount ?? 0) > 0;
}

export interface LogRow {
  created_at: Date;
  attempt: number;
  status_code: number | null;
  duration_ms: number;
  error: string | null;
  delivery_id: string;
  channel: 'webhook' | 'email';
  state: 'pending' | 'delivered' | 'failed';
  event_id: string;
  type: EventType;
  url: string | null;
}

/** The newest attempts of the tenant's deliveries. */
export async function deliveryLog(db: DbClient, tenantId: string, limit = 50): Promise<LogRow[]> {
  const { rows } = await db.query(
    `select a.created_at, a.attempt, a.status_code, a.duration_ms, a.error, d.id as delivery_id, d.channel, d.state, d.event_id, e.type, ep.url
       from notify_attempts a join notify_deliveries d on d.id = a.delivery_id join notify_events e on e.id = d.event_id
       left join notify_endpoints ep on ep.id = d.endpoint_id
      where a.tenant_id = $1 order by a.created_at desc, a.id desc limit $2`,
    [tenantId, limit],
  );
  return rows;
}

/** Replay: the delivery is attempted again now — the same event, the same webhook-id. False: no such webhook delivery of the tenant. */
export async function replayDelivery(db: DbClient, tenantId: string, deliveryId: string): Promise<boolean> {
  const { rowCount } = await db.query(
    `update notify_deliveries set state = 'pending', next_attempt_at = now(), updated_at = now()
      where id = $1 and tenant_id = $2 and channel = 'webhook'`,
    [deliveryId, tenantId],
  );
  return (rowCount ?? 0) > 0;
}
