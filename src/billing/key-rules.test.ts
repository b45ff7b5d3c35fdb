import { describe, expect, test } from 'vitest';
import { checkNewKey, type KeyInput } from './key-rules.ts';

const known = new Set(['sim/echo', 'sim/lorem']);
const now = new Date('2026-11-25T12:00:00Z');
const base: KeyInput = { label: 'agente', models: '*' };

describe('checkNewKey: one rule for the portal and the CLI', () => {
  test('a full key: label trimmed, models deduplicated, limit in micro-BRL, rate and expiry parsed', () => {
    const r = checkNewKey(
      { label: '  bot  ', models: ['sim/echo', ' sim/echo', 'sim/lorem'], limit: 'R$ 12,50', limitReset: 'weekly', rateLimit: '100/1m', expires: '30d' },
      known,
      now,
    );
    expect(r).toEqual({
      ok: true,
      key: {
        label: 'bot',
        models: ['sim/echo', 'sim/lorem'],
        limitMicros: 12_500_000n,
        limitReset: 'weekly',
        rateLimitRequests: 100,
        rateLimitIntervalS: 60,
        expiresAt: new Date('2026-12-25T12:00:00Z'),
        maxConcurrent: null,
        tpm: null,
        endUserDailyLimit: null,
      },
    });
  });

  test.each([
    [{ label: '' }, 'label', 'bad_label'],
    [{ label: 'x'.repeat(101) }, 'label', 'bad_label'],
    [{ label: 'a\u0000b' }, 'label', 'bad_label'],
    [{ models: [] }, 'models', 'no_models'],
    [{ models: ['not a model'] }, 'models', 'bad_model_id'],
    [{ models: ['sim/echo', 'acme/ghost'] }, 'models', 'unknown_model'],
    [{ limit: '0.001' }, 'limit', 'bad_limit'],
    [{ limit: '1.000' }, 'limit', 'limit_thousands'],
    [{ limit: '1.000,00' }, 'limit', 'limit_thousands'],
    [{ limit: 'ten' }, 'limit', 'bad_limit'],
    [{ limit: '5', limitReset: 'hourly' }, 'limit_reset', 'bad_limit_reset'],
    [{ limitReset: 'daily' }, 'limit_reset', 'reset_without_limit'],
    [{ rateLimit: 'lots' }, 'rate_limit', 'bad_rate_limit'],
    [{ expires: 'yesterday' }, 'expires', 'bad_expiry'],
    [{ expires: '2020-01-01' }, 'expires', 'bad_expiry'],
  ] as const)('%j → %s %s', (over, field, code) => {
    const r = checkNewKey({ ...base, ...(over as Partial<KeyInput>) }, known, now);
    expect(r.ok).toBe(false);
    if (!r.ok) expect([r.error.field, r.error.code]).toEqual([field, code]);
  });

  test('unknown models are named together; without a catalog only their shape is checked', () => {
    const r = checkNewKey({ ...base, models: ['acme/a', 'sim/echo', 'acme/b'] }, known, now);
    expect(r.ok === false && r.error.message).toBe('unknown model(s): acme/a, acme/b');
    expect(checkNewKey({ ...base, models: ['acme/a'] }, null, now).ok).toBe(true);
  });
});
