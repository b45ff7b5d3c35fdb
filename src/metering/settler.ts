import type { JsMsg } from 'nats';
import { settle, settleBatch, type Settlement, type SettleResult } from '../billing/ledger.ts';
import { costMicros } from '../billing/money.ts';
import { decodeJson, UsageMessageSchema, type UsageMessage } from '../bus/messages.ts';
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

type Item = { msg: JsMsg; usage: UsageMessage; settlement: Settlement; span?: Span };

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
  ) {
    const byStatus = 'Usage messages settled, by status: settled (debited once) or duplicate (already settled, a no-op)';
    this.mx = {
      jobs: metrics.counter(HEADLINE.jobs, 'Usage messages settled (acked)'),
      errors: metrics.counter(HEADLINE.errors, 'Settle failures (nak/term)'),
      lag: metrics.histogram(HEADLINE.latency, 'Metering lag: usage ended_at to ledger commit, seconds'),
      lagNamed: metrics.histogram('catraca_metering_lag_seconds', 'Usage ended_at to ledger row committed, seconds'),
      settled: metrics.counter('catraca_usage_settled_total', byStatus, { status: 'settled' }),
      duplicates: metrics.counter('catraca_usage_settled_total', byStatus, { status: 'duplicate' }),
    };
  }

  /**
   * Settles a batch in one transaction. If the batch fails as a whole, each message is retried
   * alone so one bad message cannot hold the others back.
   */
  async settle(msgs: JsMsg[]): Promise<void> {
    const items = msgs.map((m) => this.parse(m)).filter((x) => x !== null);
    if (items.length === 0) return;
    // one span per usage message (the request), child of the worker's job span
    for (const item of items) {
      item.span = this.tracer.startSpan('settle', {
        parent: item.msg.headers?.get('traceparent'),
        kind: 'consumer',
        attributes: { 'catraca.request_id': item.usage.request_id, 'catraca.tenant_id': item.usage.tenant_id, 'catraca.batch_size': items.length },
      });
    }
    try {
      const results =
        items.length === 1
          ? [await settle(this.db, items[0].settlement)]
          : await settleBatch(
              this.db,
              items.map((i) => i.settlement),
            );
      for (let i = 0; i < items.length; i++) this.conclude(items[i], results[i]);
      return;
    } catch (err) {
      if (items.length === 1) {
        this.stats.failures++;
        this.mx.errors.inc();
        this.log.warn('settlement failed; will be redelivered', { request_id: items[0].usage.request_id, err: err as Error });
        items[0].span?.setStatus('error', 'settlement failed; redelivered').end();
        items[0].msg.nak(1000);
        return;
      }
      this.log.warn('batch settlement failed; settling one by one', { size: items.length, err: err as Error });
    }
    for (const item of items) await this.settle([item.msg]);
  }

  /** Parses a message; an unreadable one is terminated (it can never settle). */
  private parse(msg: JsMsg): Item | null {
    try {
      const usage = UsageMessageSchema.parse(decodeJson(msg.data));
      return {
        msg,
        usage,
        settlement: {
          requestId: usage.request_id,
          tenantId: usage.tenant_id,
          keyId: usage.key_id,
          costMicros: costMicros(usage.prompt_tokens, usage.completion_tokens, { input: BigInt(usage.input_price), output: BigInt(usage.output_price) }),
          model: usage.model,
          inputTokens: usage.prompt_tokens,
          outputTokens: usage.completion_tokens,
          estimated: usage.estimated,
          outcome: usage.outcome,
          at: new Date(usage.ended_at),
          hold: usage.hold ?? null,
        },
      };
    } catch (err) {
      this.stats.poison++;
      this.mx.errors.inc();
      this.log.error('unreadable usage message: terminated', { seq: msg.seq, err: err as Error });
      msg.term();
      return null;
    }
  }

  /** Acks (after the commit) or terminates one message according to its settlement result. */
  private conclude(item: Item, result: SettleResult): void {
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
      if (result.debited < settlement.costMicros)
        this.log.warn('shortfall: cost exceeded available balance', {
          request_id: usage.request_id,
          cost: settlement.costMicros.toString(),
          debited: result.debited.toString(),
        });
    } else {
      stats.poison++;
      mx.errors.inc();
      this.log.error('usage for unknown tenant: terminated', { request_id: usage.request_id, tenant_id: usage.tenant_id });
      msg.term();
      return;
    }
    mx.jobs.inc();
    // A plain ack, not a confirmed one: a lost ack means a redelivery, and a redelivered message
    // settles as a 'duplicate' no-op, so waiting for the server's confirmation buys nothing.
    msg.ack();
  }
}
