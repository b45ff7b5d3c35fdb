import { afterAll, beforeAll, describe, expect, test } from 'vitest';
import { readPkcs12, selfSignedPkcs12, type A1Certificate } from '../certificate.ts';
import { SefinClient } from '../client.ts';
import { buildDps, type Prestador, type Tomador } from '../dps.ts';
import { buildCancelRequest } from '../event.ts';
import { summarizeNfse } from '../nfse-xml.ts';
import { signEnveloped } from '../sign.ts';
import { checkEnveloped } from '../verify.ts';
import { validateAgainst } from '../xsd.ts';
import { type SefinSimulator, startSefinSimulator } from './server.ts';

const prestador: Prestador = {
  ambiente: '2',
  cnpj: '11222333000181',
  municipio: '3550308',
  serie: '1',
  serviceCode: '010301',
  serviceDescription: 'Créditos de API',
  simplesNacional: '1',
  regimeEspecial: '0',
  appVersion: 'catraca-test',
  ibsCbs: { cst: '000', classTrib: '000001', indOp: '100301' },
};
const tomador: Tomador = {
  document: { kind: 'cpf', value: '52998224725' },
  name: 'Maria da Silva',
  cep: '01310100',
  street: 'Avenida Paulista',
  number: '1000',
  district: 'Bela Vista',
  cityCode: '3550308',
};

let a1: A1Certificate;
let sim: SefinSimulator;
let client: SefinClient;
let n = 100;
const dps = (over: Partial<Prestador> = {}, t: Tomador | null = tomador) =>
  buildDps({ ...prestador, ...over }, { number: String(++n), issuedAt: new Date(), competence: new Date(), amountMicros: 20_000_000n, tomador: t });

beforeAll(async () => {
  a1 = readPkcs12(selfSignedPkcs12({ name: 'CATRACA TESTE LTDA', document: prestador.cnpj, password: 'pw' }).pfx, 'pw');
  sim = await startSefinSimulator({ trustedClients: [a1.certPem] });
  client = new SefinClient({ baseUrl: sim.url, cert: a1, ca: [sim.caPem], timeoutMs: 10_000 });
});
afterAll(async () => {
  await client?.close();
  await sim?.close();
});

describe('the Sefin Nacional simulator, through catraca client', () => {
  test('a signed DPS becomes an NFS-e: valid against NFSe_v1.01.xsd, signed by Sefin, carrying the DPS as sent', async () => {
    const { id, xml } = dps();
    const signed = signEnveloped(xml, 'infDPS', 'DPS', a1);
    const r = await client.sendDps(signed);
    expect(r.kind).toBe('issued');
    if (r.kind !== 'issued') return;
    expect(r.accessKey).toMatch(/^3550308221122233300018100000000000\d{16}$/);
    const nfse = r.nfseXml.toString('utf8');
    expect(await validateAgainst('NFSe_v1.01.xsd', nfse)).toEqual([]);
    expect(checkEnveloped(nfse, 'infNFSe').ok).toBe(true);
    const s = summarizeNfse(nfse);
    expect(s).toMatchObject({ accessKey: r.accessKey, dpsId: id });
    expect(nfse).toContain(signed.replace(/^<\?xml[^>]*\?>/, ''));
    expect(sim.state.received.at(-1)).toBe(signed);
    // the same DPS again: E0014, and the NFS-e is found from the DPS's Id
    const again = await client.sendDps(signed);
    expect(again).toMatchObject({ kind: 'rejected', status: 400, errors: [{ code: 'E0014' }] });
    expect(await client.accessKeyOfDps(id)).toEqual({ kind: 'found', accessKey: r.accessKey });
    const fetched = await client.fetchNfse(r.accessKey);
    expect(fetched.kind === 'found' && fetched.nfseXml.equals(r.nfseXml)).toBe(true);
    // cancellation
    const ev = buildCancelRequest(prestador, { accessKey: r.accessKey, at: new Date(), reason: '2', text: 'Créditos devolvidos por Pix' });
    const evSigned = signEnveloped(ev.xml, 'infPedReg', 'pedRegEvento', a1);
    expect(await validateAgainst('pedRegEvento_v1.01.xsd', evSigned)).toEqual([]);
    const c = await client.sendEvent(r.accessKey, evSigned);
    expect(c.kind).toBe('registered');
    if (c.kind === 'registered') expect(await validateAgainst('evento_v1.01.xsd', c.eventXml.toString('utf8'))).toEqual([]);
    expect(await client.sendEvent(r.accessKey, evSigned)).toMatchObject({ kind: 'rejected', errors: [{ code: 'E0840' }] });
  });

  test('refusals with the documented codes', async () => {
    // not signed
    expect(await client.sendDps(dps().xml)).toMatchObject({ kind: 'rejected', errors: [{ code: 'E0717' }] });
    // signed, then changed
    const changed = signEnveloped(dps().xml, 'infDPS', 'DPS', a1).replace('<vServ>20.00</vServ>', '<vServ>2.00</vServ>');
    expect(await client.sendDps(changed)).toMatchObject({ kind: 'rejected', errors: [{ code: 'E0714' }] });
    // schema
    const bad = signEnveloped(dps().xml.replace('<tpEmit>1</tpEmit>', '<tpEmit>7</tpEmit>'), 'infDPS', 'DPS', a1);
    expect(await client.sendDps(bad)).toMatchObject({ kind: 'rejected', errors: [{ code: 'RNG6110', message: 'Falha Schema Xml' }] });
    // an invalid CPF of the tomador
    const cpf = signEnveloped(dps({}, { ...tomador, document: { kind: 'cpf', value: '52998224724' } }).xml, 'infDPS', 'DPS', a1);
    expect(await client.sendDps(cpf)).toMatchObject({ kind: 'rejected', errors: [{ code: 'E0206' }] });
    // a service code the national list does not have
    expect(await client.sendDps(signEnveloped(dps({ serviceCode: '999999' }).xml, 'infDPS', 'DPS', a1))).toMatchObject({
      kind: 'rejected',
      errors: [{ code: 'E0310' }],
    });
    // not gzip
    const raw = await fetchJson({ dpsXmlGZipB64: Buffer.from('<DPS/>').toString('base64') });
    expect(raw.erros[0].Codigo).toBe('E1226');
    // signed by another CNPJ's certificate
    const other = readPkcs12(selfSignedPkcs12({ name: 'OUTRA', document: '11444777000161', password: 'x' }).pfx, 'x');
    expect(await client.sendDps(signEnveloped(dps().xml, 'infDPS', 'DPS', other))).toMatchObject({ kind: 'rejected', errors: [{ code: 'E0718' }] });
  });

  test('an outage is "unavailable"; a client without a trusted certificate cannot connect', async () => {
    sim.state.unavailable = true;
    expect(await client.sendDps(signEnveloped(dps().xml, 'infDPS', 'DPS', a1))).toMatchObject({
      kind: 'unavailable',
      reason: expect.stringMatching(/HTTP 503/),
    });
    sim.state.unavailable = false;
    const stranger = readPkcs12(selfSignedPkcs12({ name: 'X', document: prestador.cnpj, password: 'x' }).pfx, 'x');
    const c2 = new SefinClient({ baseUrl: sim.url, cert: stranger, ca: [sim.caPem], timeoutMs: 5000 });
    expect((await c2.sendDps(signEnveloped(dps().xml, 'infDPS', 'DPS', stranger))).kind).toBe('unavailable');
    await c2.close();
  });
});

/** A raw POST /nfse through the client's mTLS connection. */
async function fetchJson(body: unknown): Promise<{ erros: { Codigo: string }[] }> {
  const r = await client.call('POST', '/nfse', body);
  return (r as { body: { erros: { Codigo: string }[] } }).body;
}
