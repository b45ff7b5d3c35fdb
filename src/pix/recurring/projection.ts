import { CENTAVO_MICROS } from '../limits.ts';

// What a Pix Automático charge of a recurring top-up should be (docs/billing.md, "Recarga
// automática"). Integer micro-BRL throughout; the only roundings are up: the expected spend up to
// the micro-real, the amount up to the centavo (Pix moves centavos).
//
//   daily rate     = spend of the last 7 days / 7
//   expected spend = ceil(spend of the last 7 days × days until the due date / 7)
//   projected      = balance − expected spend
//   amount         = none when projected ≥ target, else
//                    min(max per charge, max(R$ 1,00, ceil_centavo(target − projected)))

/** A charge is never below R$ 1,00. */
export const RECURRING_MIN_MICROS = 1_000_000n;
/** Days of spend the rate is taken from. */
export const RATE_WINDOW_DAYS = 7;
/** BCB rule: a cobr is sent 2 to 10 days before its due date. */
export const LEAD_MIN_DAYS = 2;
export const LEAD_MAX_DAYS = 10;
/** How far ahead catraca schedules a charge (inside the 2–10 days window). */
export const LEAD_DAYS = 3;

export type Periodicity = 'SEMANAL' | 'MENSAL';

export interface ProjectionInput {
  /** Tenant balance now, micro-BRL. */
  balanceMicros: bigint;
  /** Debits of the last RATE_WINDOW_DAYS days, micro-BRL. */
  spentWindowMicros: bigint;
  /** Whole days from today to the due date (São Paulo calendar). */
  daysUntilDue: number;
  targetMicros: bigint;
  maxMicros: bigint;
}

export interface Projection {
  expectedSpendMicros: bigint;
  projectedMicros: bigint;
  /** null: the balance is expected to stay at or above the target, no charge. */
  amountMicros: bigint | null;
  /** Why the amount is what it is. */
  rule: 'above_target' | 'projection' | 'capped' | 'floor';
}

const ceilDiv = (a: bigint, b: bigint) => (a <= 0n ? -(-a / b) : (a + b - 1n) / b);

export function projectCharge(i: ProjectionInput): Projection {
  if (i.daysUntilDue < 0 || !Number.isInteger(i.daysUntilDue)) throw new RangeError('daysUntilDue is a whole number of days, not negative');
  if (i.maxMicros < RECURRING_MIN_MICROS) throw new RangeError('the maximum per charge is at least R$ 1,00');
  const spent = i.spentWindowMicros < 0n ? 0n : i.spentWindowMicros;
  const expectedSpendMicros = ceilDiv(spent * BigInt(i.daysUntilDue), BigInt(RATE_WINDOW_DAYS));
  const projectedMicros = i.balanceMicros - expectedSpendMicros;
  if (projectedMicros >= i.targetMicros) return { expectedSpendMicros, projectedMicros, amountMicros: null, rule: 'above_target' };
  const needed = ceilDiv(i.targetMicros - projectedMicros, CENTAVO_MICROS) * CENTAVO_MICROS;
  if (needed > i.maxMicros) return { expectedSpendMicros, projectedMicros, amountMicros: i.maxMicros, rule: 'capped' };
  if (needed < RECURRING_MIN_MICROS) return { expectedSpendMicros, projectedMicros, amountMicros: RECURRING_MIN_MICROS, rule: 'floor' };
  return { expectedSpendMicros, projectedMicros, amountMicros: needed, rule: 'projection' };
}

// ---- calendar (São Paulo dates as YYYY-MM-DD strings) ----

const toUtcDay = (d: string) => Date.parse(`${d}T00:00:00Z`);

export function addDays(date: string, days: number): string {
  return new Date(toUtcDay(date) + days * 86_400_000).toISOString().slice(0, 10);
}

/** Next period's date: +7 days, or the same day next month (clamped to the month's last day). */
export function addPeriod(date: string, p: Periodicity): string {
  if (p === 'SEMANAL') return addDays(date, 7);
  const [y, m, d] = date.split('-').map(Number);
  const ny = m === 12 ? y + 1 : y;
  const nm = m === 12 ? 1 : m + 1;
  const last = new Date(Date.UTC(ny, nm, 0)).getUTCDate();
  return `${ny}-${String(nm).padStart(2, '0')}-${String(Math.min(d, last)).padStart(2, '0')}`;
}

export function daysBetween(from: string, to: string): number {
  return Math.round((toUtcDay(to) - toUtcDay(from)) / 86_400_000);
}

/**
 * The due date of the charge a pass at `today` schedules for a period whose due date is
 * `periodDue`: the period's own date while it is still at least LEAD_MIN_DAYS away, otherwise
 * today + LEAD_DAYS (a late pass never sends a cobr inside the 2-day window).
 */
export function dueDateFor(today: string, periodDue: string): string {
  const lead = daysBetween(today, periodDue);
  if (lead > LEAD_MAX_DAYS) throw new RangeError(`too early: a charge due ${periodDue} cannot be sent before ${addDays(periodDue, -LEAD_MAX_DAYS)}`);
  return lead >= LEAD_MIN_DAYS ? periodDue : addDays(today, LEAD_DAYS);
}

/** True when a pass at `today` should schedule the charge of the period due `periodDue`. */
export function timeToSchedule(today: string, periodDue: string): boolean {
  return daysBetween(today, periodDue) <= LEAD_DAYS;
}
