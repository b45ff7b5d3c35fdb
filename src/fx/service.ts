import type { NatsConnection } from 'nats';
import type pg from 'pg';
import { announceCatalogChange } from '../catalog/catalog.ts';
import { withTransaction, type DbClient } from '../db/pool.ts';
import { createLogger } from '../log.ts';
import type { Metrics } from '../metrics/registry.ts';
import { todayInSaoPaulo } from '../billing/tenant-days.ts';
import { brlFromUsd, fetchLastPtax } from './ptax.ts';

// The dollar's rate and the BRL prices of USD-priced models (docs/billing.md, "Prices in
// dollars"). Runs in the console process (the operator's process, which may write sale prices):
// once a business day at PTAX_HOUR (São Paulo) it takes the last published PTAX, records it in
// fx_rates when it changed, recomputes every USD-priced model's and deployment's BRL prices and
// announces each changed model on NATS like any price change (front doors price a request when
// they admit it, so one admitted before keeps the old price). When the service cannot be reached
// the last rate stays: fx_status.failing_since, the metric catraca_ptax_failing_since_seconds and
// the console's banner say since when. An operator may pin a rate (it wins until cleared).

const log = createLogger('fx');
const STATUS = 'ptax';

export interface FxRate {
  micros: bigint;
  date: string;
  source: 'ptax' | 'pinned';
  validFrom: Date;
}

export interface FxStatus {
  lastOkAt: Date | null;
  failingSince: Date | null;
  lastError: string | null;
  pinnedMicros: bigint | null;
  lastRunDate: string | null;
}

export interface UsdPrice {
  model_id: string;
  deployment: string;
  input_usd: bigint;
  output_usd: bigint;
  cached_input_usd: bigint | null;
  cache_write_usd: bigint | null;
  cache_write_1h_usd: bigint | null;
  markup_ppm: bigint;
}

/** The five BRL prices of a USD price at a rate (null cache prices stay null: the input price applies). */
export function brlPrices(p: UsdPrice, rateMicros: bigint) {
  const f = (v: bigint | null) => (v === null ? null : brlFromUsd(BigInt(v), rateMicros, BigInt(p.markup_ppm)));
  return {
    input_price: f(p.input_usd)!,
    output_price: f(p.output_usd)!,
    cached_input_price: f(p.cached_input_usd),
    cache_write_price: f(p.cache_write_usd),
    cache_write_1h_price: f(p.cache_write_1h_usd),
  };
}

/** The rate prices are computed at now: the pinned one, else the last recorded. */
export async function currentRate(db: DbClient): Promise<FxRate | null> {
  const { rows } = await db.query(
    `select r.usd_brl_micros, r.rate_date::text as rate_date, r.source, r.valid_from
       from fx_rates r order by r.valid_from desc, r.id desc limit 1`,
  );
  const r = rows[0];
  return r ? { micros: BigInt(r.usd_brl_micros), date: r.rate_date, source: r.source, validFrom: r.valid_from } : null;
}

export async function fxStatus(db: DbClient): Promise<FxStatus> {
  const { rows } = await db.query(`select *, last_run_date::text as last_run_date from fx_status where name = $1`, [STATUS]);
  const r = rows[0];
  return {
    lastOkAt: r?.last_ok_at ?? null,
    failingSince: r?.failing_since ?? null,
    lastError: r?.last_error ?? null,
    pinnedMicros: r?.pinned_micros == null ? null : BigInt(r.pinned_micros),
    lastRunDate: r?.last_run_date ?? null,
  };
}

/** Writes the BRL prices of every USD-priced entry at `rate`; returns the models whose prices changed. */
export async function recomputePrices(db: DbClient, rate: { micros: bigint; date: string }, only?: { model: string; deployment: string }): Promise<string[]> {
  const { rows } = await db.query<UsdPrice>(
    only ? 'select * from model_usd_prices where model_id = $1 and deployment = $2' : 'select * from model_usd_prices order by model_id, deployment',
    only ? [only.model, only.deployment] : [],
  );
  const changed = new Set<string>();
  for (const p of rows) {
    const b = brlPrices(p, rate.micros);
    const values = [p.model_id, b.input_price, b.output_price, b.cached_input_price, b.cache_write_price, b.cache_write_1h_price];
    const res =
      p.deployment === 'primary'
        ? await db.query(
            `update models set input_price = $2, output_price = $3, cached_input_price = $4, cache_write_price = $5, cache_write_1h_price = $6, updated_at = now()
              where id = $1 and (input_price, output_price, cached_input_price, cache_write_price, cache_write_1h_price)
                      is distinct from ($2::bigint, $3::bigint, $4::bigint, $5::bigint, $6::bigint)`,
            values,
          )
        : await db.query(
            `update model_deployments set input_price = $2, output_price = $3, cached_input_price = $4, cache_write_price = $5, cache_write_1h_price = $6
              where model_id = $1 and name = $7 and (input_price, output_price, cached_input_price, cache_write_price, cache_write_1h_price)
                      is distinct from ($2::bigint, $3::bigint, $4::bigint, $5::bigint, $6::bigint)`,
            [...values, p.deployment],
          );
    // priced_at: when the BRL prices last changed (the portal's model page shows it)
    await db.query(
      `update model_usd_prices set rate_micros = $3, rate_date = $4, priced_at = case when $5 or priced_at is null then now() else priced_at end
        where model_id = $1 and deployment = $2`,
      [p.model_id, p.deployment, rate.micros, rate.date, (res.rowCount ?? 0) > 0],
    );
    if (res.rowCount) changed.add(p.model_id);
  }
  return [...changed];
}

/**
 * Whether the PTAX job fetches at `now`: at once without a rate or when a pinned rate was just
 * cleared; else on a business day (Monday to Friday in São Paulo; on a holiday the last published
 * rate is the same one, nothing changes) once `hour` (São Paulo) has passed, once that day. While
 * the service fails, only on the quarter hours.
 */
export function ptaxDue(
  now: Date,
  hour: number,
  status: Pick<FxStatus, 'failingSince' | 'pinnedMicros' | 'lastRunDate'>,
  rate: Pick<FxRate, 'source'> | null,
): boolean {
  const sp = new Intl.DateTimeFormat('en-US', {
    timeZone: 'America/Sao_Paulo',
    hourCycle: 'h23',
    weekday: 'short',
    hour: 'numeric',
    minute: 'numeric',
  }).formatToParts(now);
  const part = (type: string) => sp.find((p) => p.type === type)!.value;
  const weekday = part('weekday');
  const unpinned = status.pinnedMicros === null && rate?.source === 'pinned';
  const due = !rate || unpinned || (weekday !== 'Sat' && weekday !== 'Sun' && Number(part('hour')) >= hour && status.lastRunDate !== todayInSaoPaulo(now));
  return due && (!status.failingSince || Number(part('minute')) % 15 === 0);
}

export class FxService {
  private timer: NodeJS.Timeout | null = null;
  private running: Promise<unknown> | null = null;

  constructor(
    private readonly db: pg.Pool,
    private readonly o: { ptaxUrl: string; hour: number; nc: NatsConnection | null; metrics?: Metrics; now?: () => Date },
  ) {
    o.metrics?.gauge(
      'catraca_ptax_failing_since_seconds',
      'Unix time since which the PTAX service cannot be fetched (0 while it can); prices keep the last rate',
      {},
      () => this.failingSince / 1000,
    );
    o.metrics?.gauge('catraca_ptax_rate_micros', 'The USD→BRL rate prices are computed at (micro-BRL per USD)', {}, () => Number(this.rateMicros));
  }

  private failingSince = 0;
  private rateMicros = 0n;

  private now(): Date {
    return this.o.now?.() ?? new Date();
  }

  private announce(models: string[]): void {
    if (!this.o.nc) return;
    for (const m of models) announceCatalogChange(this.o.nc, m);
  }

  /** Fetches the last PTAX and applies it (unless a rate is pinned); on failure the last rate stays. */
  async refresh(): Promise<{ ok: boolean; rate: FxRate | null; changed: string[]; error?: string }> {
    const today = todayInSaoPaulo(this.now());
    let quote: Awaited<ReturnType<typeof fetchLastPtax>>;
    try {
      quote = await fetchLastPtax(this.o.ptaxUrl, today);
    } catch (err) {
      const message = (err as Error).message.slice(0, 400);
      const { rows } = await this.db.query(
        `insert into fx_status (name, failing_since, last_error) values ($1, $2, $3)
         on conflict (name) do update set failing_since = coalesce(fx_status.failing_since, excluded.failing_since), last_error = excluded.last_error
         returning failing_since`,
        [STATUS, this.now(), message],
      );
      this.failingSince = (rows[0].failing_since as Date).getTime();
      log.error('PTAX fetch failed: prices keep the last rate', { error: message, failing_since: rows[0].failing_since });
      return { ok: false, rate: await currentRate(this.db), changed: [], error: message };
    }
    const result = await withTransaction(this.db, async (c) => {
      await c.query('select pg_advisory_xact_lock(7261106)');
      await c.query(
        `insert into fx_status (name, last_ok_at, failing_since, last_error, last_run_date) values ($1, $2, null, null, $3)
         on conflict (name) do update set last_ok_at = excluded.last_ok_at, failing_since = null, last_error = null, last_run_date = excluded.last_run_date`,
        [STATUS, this.now(), today],
      );
      const status = await fxStatus(c);
      const current = await currentRate(c);
      if (status.pinnedMicros !== null) return { rate: current, changed: [] as string[] };
      let rate = current;
      if (current?.source !== 'ptax' || current.micros !== quote.sellMicros || current.date !== quote.date) {
        await c.query(`insert into fx_rates (rate_date, usd_brl_micros, source, published_at, valid_from) values ($1, $2, 'ptax', $3, $4)`, [
          quote.date,
          quote.sellMicros,
          quote.publishedAt,
          this.now(),
        ]);
        rate = await currentRate(c);
      }
      return { rate, changed: rate ? await recomputePrices(c, rate) : [] };
    });
    this.failingSince = 0;
    this.rateMicros = result.rate?.micros ?? 0n;
    this.announce(result.changed);
    log.info('PTAX applied', { rate_micros: String(result.rate?.micros), date: result.rate?.date, models_changed: result.changed.length });
    return { ok: true, ...result };
  }

  /** An operator pins a rate (null: back to the PTAX, fetched at once). */
  async pin(micros: bigint | null, by: string): Promise<{ rate: FxRate | null; changed: string[] }> {
    if (micros === null) {
      await this.db.query('update fx_status set pinned_micros = null, pinned_by = $2, pinned_at = $3 where name = $1', [STATUS, by, this.now()]);
      const r = await this.refresh();
      return { rate: r.rate, changed: r.changed };
    }
    const out = await pinRate(this.db, micros, by, this.now());
    this.rateMicros = micros;
    this.announce(out.changed);
    return out;
  }

  /** Every minute: the day's recompute once PTAX_HOUR has passed on a business day; while failing, again every 15 minutes. */
  start(everyMs = 60_000): void {
    if (this.timer) return;
    const tick = async () => {
      const status = await fxStatus(this.db);
      const rate = await currentRate(this.db);
      this.rateMicros = rate?.micros ?? 0n;
      this.failingSince = status.failingSince?.getTime() ?? 0;
      if (ptaxDue(this.now(), this.o.hour, status, rate)) await this.refresh();
    };
    const run = () => {
      this.running ??= tick()
        .catch((err) => log.warn('PTAX job failed', { err }))
        .finally(() => (this.running = null));
    };
    run();
    this.timer = setInterval(run, everyMs);
    this.timer.unref();
  }

  async stop(): Promise<void> {
    if (this.timer) clearInterval(this.timer);
    this.timer = null;
    await this.running;
  }
}

/** Clears a pinned rate: the console's PTAX job takes the last published rate within a minute. */
export async function unpinRate(db: DbClient, by: string, at = new Date()): Promise<void> {
  await db.query('update fx_status set pinned_micros = null, pinned_by = $2, pinned_at = $3 where name = $1', [STATUS, by, at]);
}

/** Pins a rate (the CLI and the console): recorded as a rate of its own, prices recomputed; the caller announces `changed`. */
export async function pinRate(db: pg.Pool, micros: bigint, by: string, at = new Date()): Promise<{ rate: FxRate | null; changed: string[] }> {
  return withTransaction(db, (c) => pinRateIn(c, micros, by, at));
}

/** pinRate inside the caller's transaction (the console audits the pin in it). */
export async function pinRateIn(c: DbClient, micros: bigint, by: string, at = new Date()): Promise<{ rate: FxRate | null; changed: string[] }> {
  await c.query('select pg_advisory_xact_lock(7261106)');
  await c.query(
    `insert into fx_status (name, pinned_micros, pinned_by, pinned_at) values ($1, $2, $3, $4)
     on conflict (name) do update set pinned_micros = excluded.pinned_micros, pinned_by = excluded.pinned_by, pinned_at = excluded.pinned_at`,
    [STATUS, micros, by, at],
  );
  await c.query(`insert into fx_rates (rate_date, usd_brl_micros, source, valid_from, set_by) values ($1, $2, 'pinned', $3, $4)`, [
    todayInSaoPaulo(at),
    micros,
    at,
    by,
  ]);
  const rate = await currentRate(c);
  return { rate, changed: await recomputePrices(c, rate!) };
}
