import type { NatsConnection } from 'nats';
import type { Db } from '../db/pool.ts';
import type { Logger } from '../log.ts';
import { publishEvents } from './bus.ts';
import { checkBalances, checkKeyLimits, reconcileNotifications } from './events.ts';

/**
 * At most one check per this long: under load a batch settles every few milliseconds, and each
 * check costs PostgreSQL two function calls whatever it finds (measured: a check per batch was
 * ~0.08 ms of PostgreSQL CPU per request at 500 req/s); an event waits at most this much longer.
 */
export const CHECK_EVERY_MS = 250;

/** Tenants and limited keys the reconciling sweep reads per call (each, by index; a page of the cursor). */
export const RECONCILE_PAGE = 1000;

/**
 * Metering's side of the notifications: after each settlement commit, the tenants and keys it
 * debited are checked for balance.low, balance.depleted and key.limit_reached (the
 * catraca_notify_* functions decide, on durable state), and what they made is published to NOTIFY.
 * Off the settlement path: `add` returns at once, one check runs at a time, at most one per
 * CHECK_EVERY_MS, and the ids that arrive meanwhile are merged into the next. A check that fails
 * (PostgreSQL away) keeps its ids for `retry`, which the sweeper calls: a depleted tenant whose
 * check failed gets no further settlement to trigger another. Ids still in memory when the process
 * dies are lost, so the sweeper also calls `reconcile`, which walks every tenant and limited key a
 * page at a time (catraca_notify_reconcile) and checks those whose notification state disagrees
 * with their balance or spend.
 */
export class SettlementWatch {
  private tenants = new Set<string>();
  private keys = new Set<string>();
  private failed = { tenants: new Set<string>(), keys: new Set<string>() };
  private running: Promise<void> | null = null;
  private reconciling: Promise<void> | null = null;
  private lastCheck = 0;

  constructor(
    private readonly db: Db,
    private readonly nc: NatsConnection | null,
    private readonly log: Logger,
  ) {}

  add(tenantIds: Iterable<string>, keyIds: Iterable<string>): void {
    for (const t of tenantIds) this.tenants.add(t);
    for (const k of keyIds) this.keys.add(k);
    this.running ??= this.drain().finally(() => (this.running = null));
  }

  /** The ids of failed checks, again. */
  retry(): void {
    if (this.failed.tenants.size === 0 && this.failed.keys.size === 0) return;
    const { tenants, keys } = this.failed;
    this.failed = { tenants: new Set(), keys: new Set() };
    this.add(tenants, keys);
  }

  private async drain(): Promise<void> {
    while (this.tenants.size > 0 || this.keys.size > 0) {
      const wait = this.lastCheck + CHECK_EVERY_MS - Date.now();
      if (wait > 0) await new Promise((r) => setTimeout(r, wait));
      this.lastCheck = Date.now();
      const tenants = [...this.tenants].sort();
      const keys = [...this.keys].sort();
      this.tenants.clear();
      this.keys.clear();
      try {
        const events = [...(await checkBalances(this.db, tenants)), ...(await checkKeyLimits(this.db, keys))];
        for (const e of events) this.log.info('notification event', { event_id: e.id, type: e.type, tenant_id: e.tenant_id });
        await publishEvents(this.nc, this.db, events, this.log);
      } catch (err) {
        this.log.warn('notification check failed; retried by the sweeper', { tenants: tenants.length, keys: keys.length, err: err as Error });
        for (const t of tenants) this.failed.tenants.add(t);
        for (const k of keys) this.failed.keys.add(k);
      }
    }
  }

  /** One page of the reconciling sweep, unless one is in progress; never throws (logged). */
  reconcile(page = RECONCILE_PAGE): Promise<void> {
    this.reconciling ??= (async () => {
      try {
        const events = await reconcileNotifications(this.db, page);
        for (const e of events) this.log.info('notification event (reconciling sweep)', { event_id: e.id, type: e.type, tenant_id: e.tenant_id });
        await publishEvents(this.nc, this.db, events, this.log);
      } catch (err) {
        this.log.warn('notification reconciling sweep failed; the next sweep tries again', { err: err as Error });
      }
    })().finally(() => (this.reconciling = null));
    return this.reconciling;
  }

  /** Waits for the check and the sweep in progress. */
  async idle(): Promise<void> {
    await this.running;
    await this.reconciling;
  }
}
