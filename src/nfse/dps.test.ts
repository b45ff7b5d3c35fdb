import { execFileSync } from 'node:child_process';
import { mkdtempSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { DOMParser } from '@xmldom/xmldom';
import { SignedXml } from 'xml-crypto';
import { beforeAll, describe, expect, test } from 'vitest';
import { readPkcs12, selfSignedPkcs12, type A1Certificate } from './certificate.ts';
import { buildDps, dpsId, type Prestador } from './dps.ts';
import { signEnveloped } from './sign.ts';
import { checkEnveloped } from './verify.ts';
import { validateAgainst } from './xsd.ts';

const prestador: Prestador = {
  ambiente: '2',
  cnpj: '11222333000181',
  municipio: '3550308',
  serie: '1',
  serviceCode: '010301',
  serviceDescription: 'Créditos de uso de API de modelos de linguagem & afins <catraca>',
  nbs: '115013000',
  simplesNacional: '1',
  regimeEspecial: '0',
  issRate: '2.00',
  ibsCbs: { cst: '000', classTrib: '000001', indOp: '100301' },
  appVersion: 'catraca-0.1.0',
};
const tomador = {
  document: { kind: 'cnpj' as const, value: '12ABC34501DE35' },
  name: 'Empresa Cliente Ltda',
  email: 'notas@cliente.example',
  cep: '01310100',
  street: 'Avenida Paulista',
  number: '1000',
  district: 'Bela Vista',
  cityCode: '3550308',
};

let a1: A1Certificate;
beforeAll(() => {
  a1 = readPkcs12(selfSignedPkcs12({ name: 'CATRACA TESTE LTDA', document: prestador.cnpj, password: 'pw-for-tests' }).pfx, 'pw-for-tests');
});

describe('the DPS', () => {
  test('its Id is composed of its fields', () => {
    expect(dpsId(prestador, '42')).toBe('DPS355030821122233300018100001000000000000042');
    expect(dpsId(prestador, '42')).toHaveLength(45);
  });

  test('fields, dhEmi with its offset, no prefixes, no prestador name or address', () => {
    const { id, xml } = buildDps(prestador, {
      number: '7',
      issuedAt: new Date('2026-11-27T21:00:30Z'),
      competence: new Date('2026-11-27T20:59:00Z'),
      amountMicros: 20_000_000n,
      tomador,
      reference: 'abc123',
    });
    expect(id).toBe('DPS355030821122233300018100001000000000000007');
    expect(xml).toContain('<dhEmi>2026-11-27T18:00:00-03:00</dhEmi>');
    expect(xml).toContain('<dCompet>2026-11-27</dCompet>');
    expect(xml).toContain('<vServ>20.00</vServ>');
    expect(xml).toContain('<toma><CNPJ>12ABC34501DE35</CNPJ><xNome>Empresa Cliente Ltda</xNome>');
    expect(xml).toContain('<prest><CNPJ>11222333000181</CNPJ><regTrib><opSimpNac>1</opSimpNac><regEspTrib>0</regEspTrib></regTrib></prest>');
    expect(xml).toContain('<IBSCBS><finNFSe>0</finNFSe><indFinal>0</indFinal><cIndOp>100301</cIndOp><indDest>0</indDest>');
    expect(xml).toContain('&amp; afins &lt;catraca&gt;');
    expect(xml).not.toMatch(/<\w+:/);
    expect(xml).not.toMatch(/>\s+</);
  });

  test('valid against DPS_v1.01.xsd once signed; the signature verifies, independently of the signer', async () => {
    const { xml } = buildDps(prestador, { number: '8', issuedAt: new Date(), competence: new Date(), amountMicros: 1_234_560_000n, tomador: null });
    const signed = signEnveloped(xml, 'infDPS', 'DPS', a1);
    expect(await validateAgainst('DPS_v1.01.xsd', signed)).toEqual([]);
    expect(signed).toMatch(/<Signature xmlns="http:\/\/www\.w3\.org\/2000\/09\/xmldsig#">/);
    // xml-crypto alone, with the certificate from the file
    const doc = new DOMParser().parseFromString(signed, 'text/xml');
    const v = new SignedXml({ publicCert: a1.certPem, getCertFromKeyInfo: () => null });
    v.loadSignature(doc.getElementsByTagNameNS('http://www.w3.org/2000/09/xmldsig#', 'Signature')[0] as unknown as Node);
    expect(v.checkSignature(signed)).toBe(true);
    expect(checkEnveloped(signed, 'infDPS').ok).toBe(true);
    // a changed amount no longer verifies
    const tampered = signed.replace('<vServ>1234.56</vServ>', '<vServ>1.00</vServ>');
    expect(tampered).not.toBe(signed);
    expect(checkEnveloped(tampered, 'infDPS')).toMatchObject({ ok: false, reason: expect.stringMatching(/does not verify/) });
  });

  test('xmlsec1 (a C implementation) verifies the signature too', () => {
    let have = true;
    try {
      execFileSync('xmlsec1', ['--version']);
    } catch {
      have = false;
    }
    if (!have) {
      expect(process.env.CI, 'xmlsec1 is required under CI').toBeFalsy();
      return;
    }
    const { xml } = buildDps(prestador, { number: '9', issuedAt: new Date(), competence: new Date(), amountMicros: 5_000_000n, tomador });
    const dir = mkdtempSync(join(tmpdir(), 'dps-'));
    writeFileSync(join(dir, 'dps.xml'), signEnveloped(xml, 'infDPS', 'DPS', a1));
    writeFileSync(join(dir, 'cert.pem'), a1.certPem);
    const out = execFileSync('xmlsec1', ['--verify', '--pubkey-cert-pem', join(dir, 'cert.pem'), '--id-attr:Id', 'infDPS', join(dir, 'dps.xml')], {
      stdio: 'pipe',
    });
    expect(out.toString()).toBe('');
  });
});
