import { describe, expect, it } from 'vitest';
import { runSoak } from '../bench/soak.ts';

// The short form of `bench/soak.ts` (docs/benchmarks.md, "Soak"): SOAK_SECONDS (10 in `npm test`,
// 120 with `npm run test:soak`) of the same mixed load — streamed and
// not, three tenants (one of them short of balance: 402s), clients that leave after the first
// token, slow readers — against real processes (front door, worker, metering, nats-server of its
// own with monitoring) and this run's PostgreSQL. Exact at the end: no 5xx, every 200 debited
// once and nothing else, no hold or lease left, NATS subscriptions back to the baseline, the
// ledger consistent. Flat-ish meanwhile: subscriptions never more than 2 above the baseline.
const SOAK_SECONDS = Number(process.env.SOAK_SECONDS ?? 10);

describe('soak', () => {
  it(
    'holds a mixed load without 5xx, leaks of holds or subscriptions, or ledger drift',
    async () => {
      const r = await runSoak({
        durationMs: SOAK_SECONDS * 1000,
        rate: 25,
        sampleMs: 3000,
        databaseUrl: process.env.DATABASE_URL,
        resultsDir: null,
        plotsDir: null,
        slowTokens: 600,
        log: () => {},
      });
      expect(r.server_5xx).toBe(0);
      expect(r.client_errors).toEqual({});
      expect(Object.keys(r.by_status).sort()).toEqual(['200', '402']);
      expect(r.by_kind.poor.by_status['402']).toBeGreaterThan(0);
      expect(r.by_kind.disconnect.sent).toBeGreaterThan(0);
      expect(r.by_kind.slow.sent).toBeGreaterThan(0);
      expect(r.missing_debits).toBe(0);
      expect(r.unexpected_debits).toBe(0);
      expect(r.debits).toBe(r.debited_expected);
      expect(r.debited_expected).toBe(r.by_status['200'] + 2); // + the two warm-up requests
      expect(r.holds_end).toEqual({ request: 0, lease: 0 });
      expect(r.nats_subscriptions.baseline).not.toBe(null);
      expect(r.nats_subscriptions.end).toBe(r.nats_subscriptions.baseline);
      expect(r.nats_subscriptions.max! - r.nats_subscriptions.baseline!).toBeLessThanOrEqual(2);
      expect(r.ledger_check).toEqual({ ok: true, tenants_checked: 3, mismatches: [] });
      for (const [name, v] of Object.entries(r.rss_mib)) expect(v.end, `${name} RSS`).toBeLessThan(600);
    },
    120_000 + SOAK_SECONDS * 1000,
  );
});
