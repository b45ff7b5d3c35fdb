import type { JsMsg } from 'nats';
import { settle, settleBatch, type Settlement, type SettleResult, suspendTenant } from '../billing/ledger.ts';
import { pricesOfStrings, usageCostMicros } from '../billing/money.ts';
import { decodeJson, UsageBatchSchema, UsageMessageSchema, type UsageMessage } from '../bus/messages.ts';
import { HEADLINE } from '../bus/monitoring.ts';
import type { Db } from '../db/pool.ts';
import type { Logger } from '../log.ts';
import type { Metrics } from '../metrics/registry.ts';
import type { Span, Tracer } from '../tracing/tracer.ts';

export interface MeteringStats {
  settled: number;
  duplicates: number;
  failures: number;
  poison: number;
  swept: number;
  inFlight: number;
  /** ms from the worker's end of request to the ledger commit, last settled message */
  lastLagMs: number;
  maxLagMs: number;
  openHolds: number;
  openLeases: number;
}

type Item = { msg: JsMsg; usage: UsageMessage; settlement: Settlement; traceparent?: string; span?: Span };
/** one message and the requests it carries (one, or a worker's batch) */
type Received = { msg: JsMsg; items: Item[] };

/** requests per catraca_settle_batch call, at most (a call's cost grows faster than its size) */
const MAX_ITEMS_PER_CALL = 512;

/**
 * Settles batches of usage messages: one PostgreSQL transaction per batch (catraca_settle_batch,
 * idempotent on request id), each message acked only after the commit — so a crash at any point
 * means redelivery, and a redelivery is at most a 'duplicate' no-op. A message that can never
 * settle (unreadable, unknown tenant) is terminated.
 */
export class UsageSettler {
  private readonly mx;

  constructor(
    private readonly db: Db,
    private readonly tracer: Tracer,
    private readonly stats: MeteringStats,
    metrics: Metrics,
    private readonly log: Logger,
    /** a tenant's admission was suspended after a shortfall: front doors must stop admitting it from leases */
    private readonly onSuspended: (tenantId: string) => void = () => {},
    /** after a commit: the tenants and keys it debited (notifications, src/notify/settled.ts) */
    private readonly onSettled: (tenantIds: Set<string>, keyIds: Set<string>) => void = () => {},
    /** after a commit, before the acks: the messages settled (copied to USAGE_LOG); a failure is a failed settlement (redelivered) */
    private readonly journal: (msgs: JsMsg[]) => Promise<void> = async () => {},
  ) {
    const byStatus = 'Usage messages settled, by status: settled (debited once) or duplicate (already settled, a no-op)';
    this.mx = {
      jobs: metrics.counter(HEADLINE.jobs, 'Usage messages settled (acked)'),
      errors: metrics.counter(HEADLINE.errors, 'Settle failures (nak/term)'),
      lag: metrics.histogram(HEADLINE.latency, 'Metering lag: usage ended_at to ledger commit, seconds'),
      lagNamed: metrics.histogram('catraca_metering_lag_seconds', 'Usage ended_at to ledger row committed, seconds'),
      settled: metrics.counter('catraca_usage_settled_total', byStatus, { status: 'settled' }),
      duplicates: metrics.counter('catraca_usage_settled_total', byStatus, { status: 'duplicate' }),
      shortfalls: metrics.counter(
        'catraca_shortfalls_total',
        'Settlements that could not debit their whole cost (the tenant is suspended until an operator looks)',
      ),
    };
  }

  /**
   * Settles the requests of these messages, one transaction per at most MAX_ITEMS_PER_CALL
   * requests; a message is acked once all of its requests are committed. If a group fails as a
   * whole, its messages are retried one by one so one bad message cannot hold the others back.
   */
  async settle(msgs: JsMsg[]): Promise<void> {
    const received = msgs.map((msg) => ({ msg, items: this.parse(msg) })).filter((r) => r.items.length > 0);
    const size = received.reduce((n, r) => n + r.items.length, 0);
    // one span per request, child of the worker's job span
    for (const r of received) {
      for (const item of r.items) {
        item.span = this.tracer.startSpan('settle', {
          parent: item.traceparent,
          kind: 'consumer',
          attributes: { 'catraca.request_id': item.usage.request_id, 'catraca.tenant_id': item.usage.tenant_id, 'catraca.batch_size': size },
        });
      }
    }
    let group: Received[] = [];
    let count = 0;
    for (const r of received) {
      if (group.length > 0 && count + r.items.length > MAX_ITEMS_PER_CALL) {
        await this.settleGroup(group);
        group = [];
        count = 0;
      }
      group.push(r);
      count += r.items.length;
    }
    if (group.length > 0) await this.settleGroup(group);
  }

  private async settleGroup(group: Received[]): Promise<void> {
    const items = group.flatMap((r) => r.items);
    try {
      const results =
        items.length === 1
          ? [await settle(this.db, items[0].settlement)]
          : await settleBatch(
              this.db,
              items.map((i) => i.settlement),
            );
      const known = new Set<JsMsg>();
      for (let i = 0; i < items.length; i++) if (this.conclude(items[i], results[i])) known.add(items[i].msg);
      this.settled(items, results);
      await this.journal(group.filter((r) => known.has(r.msg)).map((r) => r.msg));
      // A plain ack, not a confirmed one: a lost ack means a redelivery, and a redelivered message
      // settles as 'duplicate' no-ops, so waiting for the server's confirmation buys nothing.
      for (const r of group) {
        if (known.has(r.msg)) {
          this.mx.jobs.inc();
          r.msg.ack();
        } else r.msg.term(); // every request of it names an unknown tenant: it can never settle
      }
      return;
    } catch (err) {
      if (group.length === 1) {
        this.stats.failures++;
        this.mx.errors.inc();
        this.log.warn('settlement failed; will be redelivered', { request_ids: items.map((i) => i.usage.request_id), err: err as Error });
        for (const item of items) item.span?.setStatus('error', 'settlement failed; redelivered').end();
        group[0].msg.nak(1000);
        return;
      }
      this.log.warn('batch settlement failed; settling one message at a time', { size: items.length, err: err as Error });
    }
    for (const r of group) await this.settleGroup([r]);
  }

  /** Tells onSettled which tenants and keys this commit debited. */
  private settled(items: Item[], results: SettleResult[]): void {
    const tenants = new Set<string>();
    const keys = new Set<string>();
    for (let i = 0; i < items.length; i++) {
      if (results[i].status !== 'settled') continue;
      tenants.add(items[i].settlement.tenantId);
      keys.add(items[i].settlement.keyId);
    }
    if (tenants.size > 0) this.onSettled(tenants, keys);
  }

  /** The requests of a message (a lone usage message or a worker's batch); an unreadable message is terminated (it can never settle). */
  private parse(msg: JsMsg): Item[] {
    try {
      const data = decodeJson(msg.data) as { v?: unknown };
      if (data?.v === 2) {
        const batch = UsageBatchSchema.parse(data);
        return batch.items.map(({ traceparent, ...usage }) => this.item(msg, usage, traceparent));
      }
      return [this.item(msg, UsageMessageSchema.parse(data), msg.headers?.get('traceparent'))];
    } catch (err) {
      this.stats.poison++;
      this.mx.errors.inc();
      this.log.error('unreadable usage message: terminated', { seq: msg.seq, err: err as Error });
      msg.term();
      return [];
    }
  }

  private item(msg: JsMsg, usage: UsageMessage, traceparent?: string): Item {
    return {
      msg,
      usage,
      traceparent: traceparent || undefined,
      settlement: {
        requestId: usage.request_id,
        tenantId: usage.tenant_id,
        keyId: usage.key_id,
        // what failed attempts on other deployments or models may have cost is part of the one debit
        costMicros: usageCostMicros(usage, pricesOfStrings(usage)) + BigInt(usage.extra_cost ?? '0'),
        model: usage.model,
        inputTokens: usage.prompt_tokens,
        outputTokens: usage.completion_tokens,
        estimated: usage.estimated,
        outcome: usage.outcome,
        at: new Date(usage.ended_at),
        hold: usage.hold ?? null,
        detail: {
          cachedTokens: usage.cached_tokens,
          cacheWriteTokens: usage.cache_write_tokens,
          cacheWrite1hTokens: usage.cache_write_1h_tokens,
          reasoningTokens: usage.reasoning_tokens,
          route: usage.route ?? 'chat',
          endUser: usage.end_user,
          deployment: usage.ran_on ?? 'primary',
          region: usage.region,
          country: usage.country,
          batchId: usage.batch_id,
        },
      },
    };
  }

  /**
   * A request cost more than could be debited: something was held too little. An alert (an error
   * line, a metric) and the tenant's admission suspended until an operator has looked
   * (`catraca tenant reactivate`).
   */
  private shortfall(usage: UsageMessage, cost: bigint, debited: bigint): void {
    this.mx.shortfalls.inc();
    this.log.error('shortfall: cost exceeded available balance; tenant suspended', {
      request_id: usage.request_id,
      tenant_id: usage.tenant_id,
      model: usage.model,
      cost: cost.toString(),
      debited: debited.toString(),
    });
    const reason = `shortfall: request ${usage.request_id} cost ${cost} µBRL, ${debited} debited`;
    suspendTenant(this.db, usage.tenant_id, reason).then(
      (now) => now && this.onSuspended(usage.tenant_id),
      (err) => this.log.error('could not suspend the tenant after a shortfall', { tenant_id: usage.tenant_id, err: err as Error }),
    );
  }

  /** Records one request's settlement result; false when its tenant is unknown (it can never settle). */
  private conclude(item: Item, result: SettleResult): boolean {
    const { msg, usage, settlement } = item;
    const { stats, mx } = this;
    item.span?.setAttributes({
      'catraca.settle_status': result.status,
      'catraca.debited_micros': Number(result.debited ?? 0),
      'catraca.redelivered': msg.redelivered,
    });
    if (result.status === 'unknown_tenant') item.span?.setStatus('error', 'unknown tenant');
    item.span?.end();
    if (result.status === 'duplicate') {
      stats.duplicates++;
      mx.duplicates.inc();
    } else if (result.status === 'settled') {
      stats.settled++;
      mx.settled.inc();
      stats.lastLagMs = Date.now() - usage.ended_at;
      mx.lag.observe(stats.lastLagMs / 1000);
      mx.lagNamed.observe(stats.lastLagMs / 1000);
      if (stats.lastLagMs > stats.maxLagMs) stats.maxLagMs = stats.lastLagMs;
      if (result.debited < settlement.costMicros) this.shortfall(usage, settlement.costMicros, result.debited);
    } else {
      stats.poison++;
      mx.errors.inc();
      this.log.error('usage for unknown tenant: dropped', { request_id: usage.request_id, tenant_id: usage.tenant_id });
      return false;
    }
    return true;
  }
}
