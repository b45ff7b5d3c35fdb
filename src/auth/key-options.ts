// The options of an API key that the admin CLI and the portal both take as text: the request
// rate limit ("60/1m") and the expiry ("30d" or an ISO date). The gateway enforces both (rate:
// inside catraca_admit; expiry: the key cache refuses a key past its expires_at).

const UNIT_SECONDS: Record<string, number> = { s: 1, m: 60, h: 3600, d: 86400 };

/** "60/60s", "100/1m", "10/s", "1000/1h", "5000/1d" → requests per interval (seconds); null when malformed. */
export function parseRateLimit(text: string): { requests: number; intervalS: number } | null {
  const m = /^(\d+)\/(\d*)([smhd])$/.exec(text.trim());
  if (!m) return null;
  const requests = Number(m[1]);
  const intervalS = Number(m[2] || '1') * UNIT_SECONDS[m[3]];
  if (requests < 1 || intervalS < 1 || !Number.isSafeInteger(requests) || !Number.isSafeInteger(intervalS) || intervalS > 2_147_483_647) return null;
  return { requests, intervalS };
}

/** 100, 60 → "100/1m"; the largest whole unit that divides the interval. */
export function formatRateLimit(requests: number, intervalS: number): string {
  for (const [unit, s] of [
    ['d', 86400],
    ['h', 3600],
    ['m', 60],
  ] as const) {
    if (intervalS % s === 0) return `${requests}/${intervalS / s}${unit}`;
  }
  return `${requests}/${intervalS}s`;
}

const DURATION_SECONDS: Record<string, number> = { m: 60, h: 3600, d: 86400, w: 7 * 86400 };
/** The longest expiry accepted (10 years): a typo like 3650000d is refused rather than stored. */
const MAX_EXPIRY_MS = 3653 * 86400_000;

export type ExpiryResult = { ok: true; at: Date } | { ok: false; message: string };

/**
 * When a key expires, from a duration counted from `now` ("90m", "12h", "30d", "2w") or an ISO
 * 8601 date ("2026-12-31": 00:00 UTC that day) or date-time with a zone ("2026-12-31T23:59:59Z",
 * "2026-12-31T20:00-03:00"). It must lie in the future and within 10 years.
 */
export function parseExpiry(text: string, now = new Date()): ExpiryResult {
  const t = text.trim();
  let at: Date;
  const d = /^(\d{1,7})([mhdw])$/.exec(t);
  if (d) {
    at = new Date(now.getTime() + Number(d[1]) * DURATION_SECONDS[d[2]] * 1000);
  } else if (/^\d{4}-\d{2}-\d{2}$/.test(t)) {
    at = new Date(`${t}T00:00:00Z`);
    if (Number.isNaN(at.getTime()) || at.toISOString().slice(0, 10) !== t) return { ok: false, message: `${JSON.stringify(t)} is not a calendar date` };
  } else if (/^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}(:\d{2}(\.\d{1,3})?)?(Z|[+-]\d{2}:\d{2})$/.test(t)) {
    at = new Date(t);
    if (Number.isNaN(at.getTime())) return { ok: false, message: `${JSON.stringify(t)} is not a valid date-time` };
  } else {
    return {
      ok: false,
      message: `${JSON.stringify(t)} is neither a duration like 30d, 12h, 2w, 90m nor an ISO date like 2026-12-31 or 2026-12-31T23:59:59Z (a time needs its zone)`,
    };
  }
  if (at.getTime() <= now.getTime()) return { ok: false, message: `${at.toISOString()} is not in the future` };
  if (at.getTime() - now.getTime() > MAX_EXPIRY_MS) return { ok: false, message: `${at.toISOString()} is more than 10 years away` };
  return { ok: true, at };
}
