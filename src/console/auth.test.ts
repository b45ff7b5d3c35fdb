import { describe, expect, it } from 'vitest';
import { generatePassword, generateRecoveryCodes, normalizeRecoveryCode, totpFor } from './auth.ts';

describe('operator credentials', () => {
  it('ten recovery codes of 60 bits, xxxx-xxxx-xxxx, all different; typed in any case or spacing they are the same code', () => {
    const codes = generateRecoveryCodes();
    expect(codes).toHaveLength(10);
    for (const c of codes) expect(c).toMatch(/^[a-z2-7]{4}-[a-z2-7]{4}-[a-z2-7]{4}$/);
    expect(new Set(codes).size).toBe(10);
    expect(normalizeRecoveryCode(' ABCD-efgh ijkl ')).toBe('abcdefghijkl');
  });
  it('a generated password: 20 characters of base64url', () => {
    expect(generatePassword()).toMatch(/^[A-Za-z0-9_-]{20}$/);
  });
  it('TOTP as RFC 6238 (SHA-1, 6 digits, 30 s): the RFC’s test vector', () => {
    // RFC 6238 appendix B: secret "12345678901234567890" (ASCII), T = 59 s → 94287082 (8 digits); its last 6: 287082
    const secret = 'GEZDGNBVGY3TQOJQGEZDGNBVGY3TQOJQ';
    expect(totpFor(secret, 'a@example.com').generate({ timestamp: 59_000 })).toBe('287082');
    expect(totpFor(secret, 'a@example.com').toString()).toBe(
      'otpauth://totp/catraca%20console:a%40example.com?issuer=catraca%20console&secret=GEZDGNBVGY3TQOJQGEZDGNBVGY3TQOJQ&algorithm=SHA1&digits=6&period=30',
    );
  });
});
