import { describe, expect, test } from 'vitest';
import { CertificateError, readPkcs12, selfSignedPkcs12 } from './certificate.ts';

describe('the A1 certificate (PKCS#12)', () => {
  test('a self-signed file reads back: key, certificate, CNPJ from the CN', () => {
    const { pfx, certPem } = selfSignedPkcs12({ name: 'CATRACA TESTE LTDA', document: '11222333000181', password: 's3cret-pass' });
    const a1 = readPkcs12(pfx, 's3cret-pass');
    expect(a1.certPem).toBe(certPem);
    expect(a1.document).toBe('11222333000181');
    expect(a1.keyPem).toMatch(/^-----BEGIN PRIVATE KEY-----/);
    expect(Buffer.from(a1.certBase64, 'base64').length).toBeGreaterThan(500);
  });

  test('a wrong password is refused without echoing it', () => {
    const { pfx } = selfSignedPkcs12({ name: 'X', document: '11222333000181', password: 'right-password' });
    let err: unknown;
    try {
      readPkcs12(pfx, 'wrong-password-123');
    } catch (e) {
      err = e;
    }
    expect(err).toBeInstanceOf(CertificateError);
    expect(String((err as Error).message)).not.toContain('wrong-password-123');
    expect(String((err as Error).message)).toContain('NFSE_CERT_PFX could not be read');
  });
});
