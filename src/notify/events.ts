import { z } from 'zod';
import type { DbClient } from '../db/pool.ts';

// The notification events (docs/notifications.md). Each is made once, by a catraca_notify_* SQL
// function in the transaction that decided it, as a row of notify_events (the outbox); its body is
// Standard Webhooks' {type, timestamp, data}, amounts as exact BRL decimal strings with 6 decimals
// (the ledger's unit), ids of the tenant, key and charge.

export const EVENT_TYPES = [
  'balance.low',
  'balance.depleted',
  'topup.credited',
  'topup.recurring_failed',
  'key.limit_reached',
  'key.revoked',
  'key.expiring',
  'invoice.issued',
] as const;
export type EventType = (typeof EVENT_TYPES)[number];
export const EventTypeSchema = z.enum(EVENT_TYPES);

/** Below this balance (R$ 0,01) a tenant is depleted; below this much left of its limit a key has reached it (the SQL functions' v_dust). */
export const DUST_MICROS = 10_000n;

/** A row of notify_events. */
export interface NotifyEvent {
  /** msg_…: the webhook-id, the same for every attempt and replay */
  id: string;
  tenant_id: string;
  type: EventType;
  data: Record<string, unknown>;
  created_at: Date;
  published_at: Date | null;
}

/** The body every endpoint gets, byte for byte the same at every attempt (the row never changes). */
export function eventBody(e: Pick<NotifyEvent, 'type' | 'data' | 'created_at'>): string {
  return JSON.stringify({ type: e.type, timestamp: e.created_at.toISOString(), data: e.data });
}

/** What goes on the JetStream stream NOTIFY (subject catraca.notify.<type>, msgID = id). */
export const WireEventSchema = z.object({
  v: z.literal(1),
  id: z.string().regex(/^msg_[A-Za-z0-9]{8,64}$/),
  tenant_id: z.string().min(1),
  type: EventTypeSchema,
  timestamp: z.string(),
  data: z.record(z.string(), z.unknown()),
});
export type WireEvent = z.infer<typeof WireEventSchema>;

export const toWire = (e: NotifyEvent): WireEvent => ({
  v: 1,
  id: e.id,
  tenant_id: e.tenant_id,
  type: e.type,
  timestamp: e.created_at.toISOString(),
  data: e.data,
});

// The functions that make events (src/db/functions/catraca_notify_*.sql); each returns what it made.

/** Balance crossings of these tenants (balance.low, balance.depleted), made or re-armed. */
export async function checkBalances(db: DbClient, tenantIds: string[]): Promise<NotifyEvent[]> {
  if (tenantIds.length === 0) return [];
  return (await db.query('select * from catraca_notify_balance($1::text[])', [tenantIds])).rows;
}

/** key.limit_reached of these keys (once per key and window). */
export async function checkKeyLimits(db: DbClient, keyIds: string[]): Promise<NotifyEvent[]> {
  if (keyIds.length === 0) return [];
  return (await db.query('select * from catraca_notify_keys($1::text[])', [keyIds])).rows;
}

/**
 * The reconciling sweep: the next page of tenants and limited keys whose notification state
 * disagrees with their balance or spend, checked (catraca_notify_reconcile); what it made.
 */
export async function reconcileNotifications(db: DbClient, limit: number): Promise<NotifyEvent[]> {
  return (await db.query('select * from catraca_notify_reconcile($1)', [limit])).rows;
}

/** key.revoked of a key just revoked (once per key): in the revocation's own transaction, so a crash after its commit loses nothing. */
export async function keyRevokedEvent(db: DbClient, keyId: string): Promise<NotifyEvent[]> {
  return (await db.query('select * from catraca_notify_key_revoked($1)', [keyId])).rows;
}

/** key.revoked of each of these keys, in order (the transaction that revoked them). */
export async function keysRevokedEvents(db: DbClient, keyIds: readonly string[]): Promise<NotifyEvent[]> {
  const out: NotifyEvent[] = [];
  for (const id of keyIds) out.push(...(await keyRevokedEvent(db, id)));
  return out;
}

/** topup.recurring_failed of a recurring charge's failed attempt (once per charge and attempt): in the transaction that records it. */
export async function recurringFailedEvent(db: DbClient, txid: string, attempt: number, reason: string, willRetry: boolean): Promise<NotifyEvent[]> {
  return (await db.query('select * from catraca_notify_recurring_failed($1, $2, $3, $4)', [txid, attempt, reason, willRetry])).rows;
}

/** topup.credited of a credited charge (once per charge): in the credit's transaction. */
export async function topUpEvent(db: DbClient, txid: string): Promise<NotifyEvent[]> {
  return (await db.query('select * from catraca_notify_topup($1)', [txid])).rows;
}

/** key.expiring of keys within 7 days of their expiry (once per key), at most `limit`. */
export async function scanExpiringKeys(db: DbClient, limit = 500): Promise<NotifyEvent[]> {
  return (await db.query('select * from catraca_notify_expiring($1)', [limit])).rows;
}

/** invoice.issued of a nota fiscal just issued (once per invoice): in the transaction that stored it (src/nfse/issuer.ts). */
export async function invoiceIssuedEvent(db: DbClient, invoiceId: string, xmlUrl: string): Promise<NotifyEvent[]> {
  return (await db.query('select * from catraca_notify_invoice($1, $2)', [invoiceId, xmlUrl])).rows;
}
