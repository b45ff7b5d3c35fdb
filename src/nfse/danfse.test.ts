import { afterAll, beforeAll, describe, expect, test } from 'vitest';
import { pdfText } from '../../test/helpers/pdf-text.ts';
import { readPkcs12, selfSignedPkcs12, type A1Certificate } from './certificate.ts';
import { SefinClient } from './client.ts';
import { danfseFields, groupedKey, renderDanfse } from './danfse.ts';
import { buildDps, type Prestador } from './dps.ts';
import { signEnveloped } from './sign.ts';
import { type SefinSimulator, startSefinSimulator } from './simulator/server.ts';

// The DANFSe from an NFS-e the Sefin simulator made of a signed DPS: every field it shows read
// from that XML, and the PDF's text (its content streams decoded) carrying them.

const prestador: Prestador = {
  ambiente: '2',
  cnpj: '11222333000181',
  municipio: '4205407',
  serie: '1',
  serviceCode: '010301',
  serviceDescription: 'Créditos de uso de API de modelos de linguagem',
  nbs: '115013000',
  simplesNacional: '1',
  regimeEspecial: '0',
  issRate: '2.00',
  appVersion: 'catraca-test',
  ibsCbs: { cst: '000', classTrib: '000001', indOp: '100301' },
};

let a1: A1Certificate;
let sim: SefinSimulator;
let client: SefinClient;

beforeAll(async () => {
  a1 = readPkcs12(selfSignedPkcs12({ name: 'CATRACA TESTE LTDA', document: prestador.cnpj, password: 'pw' }).pfx, 'pw');
  sim = await startSefinSimulator({ trustedClients: [a1.certPem] });
  client = new SefinClient({ baseUrl: sim.url, cert: a1, ca: [sim.caPem], timeoutMs: 10_000 });
});
afterAll(async () => {
  await client?.close();
  await sim?.close();
});

async function issue(number: string, withTomador: boolean): Promise<{ key: string; xml: string }> {
  const { xml } = buildDps(prestador, {
    number,
    issuedAt: new Date(),
    competence: new Date(),
    amountMicros: 123_450_000n,
    reference: 'txidDanfse0000000000000000000001',
    tomador: withTomador
      ? {
          document: { kind: 'cnpj', value: '12ABC34501DE35' },
          name: 'Cliente Exemplo Ltda',
          email: 'notas@cliente.example',
          municipalRegistration: '12345',
          cep: '88015100',
          street: 'Rua Felipe Schmidt',
          number: '100',
          complement: 'sala 2',
          district: 'Centro',
          cityCode: '4205407',
        }
      : null,
  });
  const r = await client.sendDps(signEnveloped(xml, 'infDPS', 'DPS', a1));
  if (r.kind !== 'issued') throw new Error(`not issued: ${JSON.stringify(r)}`);
  return { key: r.accessKey, xml: r.nfseXml.toString('utf8') };
}

describe('the DANFSe', () => {
  test('shows the access key, number, dates, emitente, tomador, service, ISSQN and IBS/CBS of the stored NFS-e', async () => {
    const { key, xml } = await issue('901', true);
    const f = danfseFields(xml);
    const dhProc = /<dhProc>([^<]+)<\/dhProc>/.exec(xml)![1];
    const dhEmi = /<dhEmi>([^<]+)<\/dhEmi>/.exec(xml)![1];
    const dCompet = /<dCompet>([^<]+)<\/dCompet>/.exec(xml)![1];
    const nNFSe = /<nNFSe>([^<]+)<\/nNFSe>/.exec(xml)![1];
    expect(f).toEqual({
      accessKey: key,
      number: nNFSe,
      processedAt: dhProc,
      issuedAt: dhEmi,
      competence: dCompet,
      dpsSerie: '1',
      dpsNumber: '901',
      ambiente: '2',
      emitente: {
        document: '11.222.333/0001-81',
        name: 'CATRACA TESTE LTDA',
        address: 'Endereço do cadastro, S/N — Centro — IBGE 4205407 / SC — CEP 01001-000',
        email: '',
        municipalRegistration: '',
      },
      tomador: {
        document: '12.ABC.345/01DE-35',
        name: 'Cliente Exemplo Ltda',
        address: 'Rua Felipe Schmidt, 100, sala 2 — Centro — IBGE 4205407 — CEP 88015-100',
        email: 'notas@cliente.example',
        municipalRegistration: '12345',
      },
      service: {
        code: '010301',
        name: /<xTribNac>([^<]+)<\/xTribNac>/.exec(xml)![1],
        description: 'Créditos de uso de API de modelos de linguagem',
        nbs: '115013000',
        place: 'Município 4205407',
        reference: 'txidDanfse0000000000000000000001',
      },
      values: {
        service: '123.45',
        base: '123.45',
        issRate: '2.00',
        iss: '2.47',
        net: '123.45',
        issTaxation: 'Operação tributável',
        issWithheld: 'Não retido',
      },
      ibsCbs: { cst: '000', classification: '000001', operation: '100301', ibs: '', cbs: '' },
    });

    const pdf = await renderDanfse(xml);
    expect(pdf.subarray(0, 5).toString('latin1')).toBe('%PDF-');
    // the same XML, the same bytes
    expect((await renderDanfse(xml)).equals(pdf)).toBe(true);
    const lines = pdfText(pdf).split('\n');
    expect(lines).toEqual(expect.arrayContaining([key, groupedKey(key), nNFSe, '12.ABC.345/01DE-35', 'Cliente Exemplo Ltda', '11.222.333/0001-81']));
    expect(lines).toEqual(expect.arrayContaining(['R$ 123,45', 'R$ 2,47', '2,00%', 'NFS-e SEM VALOR FISCAL — emitida em produção restrita']));
    // a long line wraps: the text of the service's code and name, lines joined
    expect(pdfText(pdf).replace(/ ?\n/g, ' ')).toContain(`Código de tributação nacional: 010301 — ${f.service.name}`);
    expect(lines).not.toContain('NFS-e CANCELADA');
    expect(pdfText(await renderDanfse(xml, { cancelled: true })).split('\n')).toContain('NFS-e CANCELADA');
  });

  test('a note without a tomador says so; something that is no NFS-e is refused', async () => {
    const { xml } = await issue('902', false);
    expect(danfseFields(xml).tomador).toBeNull();
    expect(pdfText(await renderDanfse(xml)).split('\n')).toContain('Tomador não identificado');
    expect(() => danfseFields('<NFSe><infNFSe Id="x"/></NFSe>')).toThrow('not an NFS-e');
  });
});
