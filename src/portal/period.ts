import { z } from 'zod';
import { TENANT_TIME_ZONE, todayInSaoPaulo } from '../billing/tenant-days.ts';
import type { MessageKey } from './i18n/index.ts';

// The period a tenant reads or exports: whole days in São Paulo time (TENANT_TIME_ZONE, the days
// GET /v1/activity uses), `from` and `to` both included. In SQL a period is a half-open range of
// instants, [from 00:00 São Paulo, the day after `to` 00:00 São Paulo), so the ledger's
// (tenant_id, created_at) index serves it; a row's day is `(created_at at time zone tz)::date`.

export { TENANT_TIME_ZONE, todayInSaoPaulo };

/** The longest period a dashboard or an export covers: a year and a month, so any calendar year fits. */
export const MAX_PERIOD_DAYS = 400;
/** The dashboard's presets (days up to today, today included). */
export const PERIOD_PRESETS = [7, 30, 90] as const;
export const DEFAULT_PERIOD_DAYS = 30;

export interface Period {
  /** First day, YYYY-MM-DD (São Paulo). */
  from: string;
  /** Last day, included. */
  to: string;
}

const day = z.iso.date();
const DAY_MS = 86_400_000;

/** A calendar date plus n days (a date has no time zone: UTC arithmetic is exact). */
export function addDays(date: string, n: number): string {
  return new Date(Date.parse(`${date}T00:00:00Z`) + n * DAY_MS).toISOString().slice(0, 10);
}

/** How many days a period covers, both ends included. */
export function periodDays(p: Period): number {
  return Math.round((Date.parse(`${p.to}T00:00:00Z`) - Date.parse(`${p.from}T00:00:00Z`)) / DAY_MS) + 1;
}

/** Every day of the period, in order. */
export function daysOf(p: Period): string[] {
  return Array.from({ length: periodDays(p) }, (_, i) => addDays(p.from, i));
}

/** The last n days up to today (São Paulo), today included. */
export function lastDays(n: number, now: Date = new Date()): Period {
  const to = todayInSaoPaulo(now);
  return { from: addDays(to, -(n - 1)), to };
}

export type PeriodResult = { ok: true; period: Period; preset: number | null } | { ok: false; error: MessageKey };

/**
 * The period of a request's query: `days=7|30|90`, or `from` and `to` (YYYY-MM-DD, São Paulo days,
 * both included; a missing end defaults to today, a missing start to DEFAULT_PERIOD_DAYS before the
 * end), or else the last DEFAULT_PERIOD_DAYS days. Refused (with the message to show): a date that
 * is not a real YYYY-MM-DD day, `from` after `to`, a period longer than MAX_PERIOD_DAYS, an unknown preset.
 */
export function parsePeriod(q: URLSearchParams, now: Date = new Date()): PeriodResult {
  const preset = q.get('days');
  const fromText = q.get('from') || null;
  const toText = q.get('to') || null;
  if (preset !== null && fromText === null && toText === null) {
    const n = Number(preset);
    if (!(PERIOD_PRESETS as readonly number[]).includes(n)) return { ok: false, error: 'period.bad_preset' };
    return { ok: true, period: lastDays(n, now), preset: n };
  }
  if (fromText === null && toText === null) return { ok: true, period: lastDays(DEFAULT_PERIOD_DAYS, now), preset: DEFAULT_PERIOD_DAYS };
  if ((fromText !== null && !day.safeParse(fromText).success) || (toText !== null && !day.safeParse(toText).success))
    return { ok: false, error: 'period.bad_date' };
  const to = toText ?? todayInSaoPaulo(now);
  const period = { from: fromText ?? addDays(to, -(DEFAULT_PERIOD_DAYS - 1)), to };
  if (period.from > period.to) return { ok: false, error: 'period.reversed' };
  if (periodDays(period) > MAX_PERIOD_DAYS) return { ok: false, error: 'period.too_long' };
  return { ok: true, period, preset: null };
}

/**
 * SQL that keeps a period's rows of `ledger` aliased `alias`, with the time zone, first and last day as
 * parameters $tz, $from, $to (numbers given): an index range on created_at, never a function of it.
 */
export function periodFilter(alias: string, tz: number, from: number, to: number): string {
  return `${alias}.created_at >= ($${from}::date)::timestamp at time zone $${tz}
        and ${alias}.created_at < ($${to}::date + 1)::timestamp at time zone $${tz}`;
}

/** The São Paulo day of a ledger row, as SQL (the expression GET /v1/activity groups by). */
export const saoPauloDay = (alias: string, tz: number) => `(${alias}.created_at at time zone $${tz})::date`;
