import PDFDocument from 'pdfkit';
import { formatDocument } from './document.ts';
import { parseXml } from './nfse-xml.ts';

// The DANFSe (Documento Auxiliar da NFS-e) that catraca renders itself from the NFS-e XML Sefin
// returned (the ADN's PDF service is being discontinued in 2026): one A4 page with the access key,
// number, dates, the emitente (prestador) and the tomador, the service, the amounts, the ISSQN
// and the IBS/CBS group. Everything it shows is read from the stored XML; nothing is recomputed.

export interface DanfseFields {
  accessKey: string;
  number: string;
  processedAt: string;
  issuedAt: string;
  competence: string;
  dpsSerie: string;
  dpsNumber: string;
  /** tpAmb of the DPS: 1 production, 2 restricted production (no fiscal value) */
  ambiente: string;
  emitente: Party;
  tomador: Party | null;
  service: { code: string; name: string; description: string; nbs: string; place: string; reference: string };
  values: { service: string; base: string; issRate: string; iss: string; net: string; issTaxation: string; issWithheld: string };
  ibsCbs: { cst: string; classification: string; operation: string; ibs: string; cbs: string } | null;
}

export interface Party {
  document: string;
  name: string;
  address: string;
  email: string;
  municipalRegistration: string;
}

const child = (parent: Element | null | undefined, name: string): Element | null =>
  (parent?.getElementsByTagNameNS('*', name)[0] as Element | undefined) ?? null;
const text = (parent: Element | null | undefined, name: string): string => child(parent, name)?.textContent?.trim() ?? '';

function documentOf(e: Element | null): string {
  const cnpj = text(e, 'CNPJ');
  if (cnpj) return formatDocument({ kind: 'cnpj', value: cnpj });
  const cpf = text(e, 'CPF');
  if (cpf) return formatDocument({ kind: 'cpf', value: cpf });
  return text(e, 'NIF');
}

function addressOf(e: Element | null): string {
  if (!e) return '';
  const street = [text(e, 'xLgr'), text(e, 'nro'), text(e, 'xCpl')].filter(Boolean).join(', ');
  const cep = text(e, 'CEP');
  const city = [text(e, 'cMun') && `IBGE ${text(e, 'cMun')}`, text(e, 'UF')].filter(Boolean).join(' / ');
  return [street, text(e, 'xBairro'), city, cep && `CEP ${cep.slice(0, 5)}-${cep.slice(5)}`].filter(Boolean).join(' — ');
}

function partyOf(e: Element | null, addressElement: string): Party {
  return {
    document: documentOf(e),
    name: text(e, 'xNome'),
    address: addressOf(child(e, addressElement)),
    email: text(e, 'email'),
    municipalRegistration: text(e, 'IM'),
  };
}

const RATE = (v: string) => (v ? `${v.replace('.', ',')}%` : '');
const BRL = (v: string) => {
  if (!/^\d+(\.\d{1,2})?$/.test(v)) return v;
  const [int, frac = ''] = v.split('.');
  return `R$ ${int.replace(/\B(?=(\d{3})+(?!\d))/g, '.')},${frac.padEnd(2, '0')}`;
};

/** What the DANFSe shows, read from an NFS-e document (throws when it is not one). */
export function danfseFields(nfseXml: string): DanfseFields {
  const doc = parseXml(nfseXml);
  const inf = doc.getElementsByTagNameNS('*', 'infNFSe')[0] as Element | undefined;
  const id = inf?.getAttribute('Id') ?? '';
  if (!inf || !/^NFS[0-9A-Z]{50}$/.test(id)) throw new Error('not an NFS-e: no infNFSe with an Id NFS + 50 characters');
  const infDps = child(inf, 'infDPS');
  const emit = child(inf, 'emit');
  const toma = child(infDps, 'toma');
  const serv = child(infDps, 'serv');
  const tribMun = child(infDps, 'tribMun');
  const valores = Array.from(inf.childNodes).find((n) => n.nodeType === 1 && (n as Element).localName === 'valores') as Element | undefined;
  const ibscbs = child(infDps, 'IBSCBS');
  const ibsTotal = child(inf, 'IBSCBS');
  const issTaxation: Record<string, string> = { '1': 'Operação tributável', '2': 'Imunidade', '3': 'Exportação de serviço', '4': 'Não incidência' };
  const issWithheld: Record<string, string> = { '1': 'Não retido', '2': 'Retido pelo tomador', '3': 'Retido pelo intermediário' };
  return {
    accessKey: id.slice(3),
    number: text(inf, 'nNFSe'),
    processedAt: text(inf, 'dhProc'),
    issuedAt: text(infDps, 'dhEmi'),
    competence: text(infDps, 'dCompet'),
    dpsSerie: text(infDps, 'serie'),
    dpsNumber: text(infDps, 'nDPS'),
    ambiente: text(infDps, 'tpAmb'),
    emitente: { ...partyOf(emit, 'enderNac'), municipalRegistration: text(child(infDps, 'prest'), 'IM') },
    tomador: toma ? partyOf(toma, 'end') : null,
    service: {
      code: text(serv, 'cTribNac'),
      name: text(inf, 'xTribNac'),
      description: text(serv, 'xDescServ'),
      nbs: text(serv, 'cNBS'),
      place: text(inf, 'xLocPrestacao') || text(serv, 'cLocPrestacao'),
      reference: text(serv, 'docRef'),
    },
    values: {
      service: text(infDps, 'vServ'),
      base: text(valores, 'vBC'),
      issRate: text(valores, 'pAliqAplic') || text(tribMun, 'pAliq'),
      iss: text(valores, 'vISSQN'),
      net: text(valores, 'vLiq'),
      issTaxation: issTaxation[text(tribMun, 'tribISSQN')] ?? text(tribMun, 'tribISSQN'),
      issWithheld: issWithheld[text(tribMun, 'tpRetISSQN')] ?? text(tribMun, 'tpRetISSQN'),
    },
    ibsCbs: ibscbs
      ? {
          cst: text(ibscbs, 'CST'),
          classification: text(ibscbs, 'cClassTrib'),
          operation: text(ibscbs, 'cIndOp'),
          ibs: text(ibsTotal, 'vIBSTot'),
          cbs: text(ibsTotal, 'vCBS'),
        }
      : null,
  };
}

/** 2026-11-27T18:00:00-03:00 → 27/11/2026 18:00:00 (the local time the document states, offset kept) */
function localStamp(v: string): string {
  const m = /^(\d{4})-(\d\d)-(\d\d)(?:T(\d\d:\d\d:\d\d)([+-]\d\d:\d\d|Z)?)?/.exec(v);
  if (!m) return v;
  return `${m[3]}/${m[2]}/${m[1]}${m[4] ? ` ${m[4]}${m[5] && m[5] !== '-03:00' ? ` (${m[5]})` : ''}` : ''}`;
}

/** The access key in groups of four, as DANFEs print it. */
export const groupedKey = (key: string): string => key.replace(/(.{4})/g, '$1 ').trim();

/** The DANFSe as a PDF (one A4 page). `cancelled` stamps it. Deterministic: the same XML makes the same bytes. */
export function renderDanfse(nfseXml: string, o: { cancelled?: boolean } = {}): Promise<Buffer> {
  const f = danfseFields(nfseXml);
  const stamp = Date.parse(f.processedAt);
  const doc = new PDFDocument({
    size: 'A4',
    margin: 36,
    info: {
      Title: `DANFSe ${f.number} — ${f.accessKey}`,
      Subject: `NFS-e ${f.accessKey}`,
      Author: f.emitente.name,
      Producer: 'catraca',
      Creator: 'catraca',
      CreationDate: Number.isNaN(stamp) ? new Date(0) : new Date(stamp),
    },
  });
  const chunks: Buffer[] = [];
  doc.on('data', (b: Buffer) => chunks.push(b));
  const done = new Promise<Buffer>((resolve, reject) => {
    doc.on('end', () => resolve(Buffer.concat(chunks)));
    doc.on('error', reject);
  });
  const width = doc.page.width - 72;
  const section = (title: string) => {
    doc.moveDown(0.6);
    const y = doc.y;
    doc.rect(36, y, width, 14).fill('#e8e8e8');
    doc
      .fillColor('#000')
      .font('Helvetica-Bold')
      .fontSize(8.5)
      .text(title, 40, y + 3, { width: width - 8 });
    doc.y = y + 18;
  };
  const field = (label: string, value: string) => {
    doc
      .font('Helvetica-Bold')
      .fontSize(8)
      .text(`${label}: `, 40, doc.y, { continued: true, width: width - 8 });
    doc.font('Helvetica').text(value || '—');
  };

  doc.font('Helvetica-Bold').fontSize(13).text('DANFSe v1.0', 36, 36);
  doc.font('Helvetica').fontSize(9).text('Documento Auxiliar da NFS-e — Nota Fiscal de Serviço eletrônica');
  if (f.ambiente === '2') doc.fillColor('#b00').font('Helvetica-Bold').text('NFS-e SEM VALOR FISCAL — emitida em produção restrita').fillColor('#000');
  if (o.cancelled) doc.fillColor('#b00').font('Helvetica-Bold').fontSize(12).text('NFS-e CANCELADA').fillColor('#000');

  section('Chave de acesso da NFS-e');
  doc.font('Courier-Bold').fontSize(11).text(f.accessKey, 40, doc.y);
  doc.font('Helvetica').fontSize(8).text(groupedKey(f.accessKey), 40, doc.y);
  section('NFS-e');
  field('Número da NFS-e', f.number);
  field('Competência', localStamp(f.competence));
  field('Data e hora da emissão da NFS-e', localStamp(f.processedAt));
  field('Número da DPS', `${f.dpsNumber} (série ${f.dpsSerie})`);
  field('Data e hora da emissão da DPS', localStamp(f.issuedAt));

  const party = (title: string, p: Party | null) => {
    section(title);
    if (!p) {
      doc.font('Helvetica').fontSize(8).text('Tomador não identificado', 40, doc.y);
      return;
    }
    field('CNPJ / CPF', p.document);
    field('Nome / Razão social', p.name);
    if (p.municipalRegistration) field('Inscrição municipal', p.municipalRegistration);
    field('Endereço', p.address);
    if (p.email) field('E-mail', p.email);
  };
  party('Emitente da NFS-e (prestador do serviço)', f.emitente);
  party('Tomador do serviço', f.tomador);

  section('Serviço prestado');
  field('Código de tributação nacional', [f.service.code, f.service.name].filter(Boolean).join(' — '));
  if (f.service.nbs) field('Código NBS', f.service.nbs);
  field('Local da prestação', f.service.place);
  field('Descrição do serviço', f.service.description);
  if (f.service.reference) field('Documento de referência', f.service.reference);

  section('Tributação municipal (ISSQN)');
  field('Tributação do ISSQN', f.values.issTaxation);
  field('Retenção do ISSQN', f.values.issWithheld);
  field('Base de cálculo', BRL(f.values.base));
  field('Alíquota aplicada', RATE(f.values.issRate));
  field('ISSQN apurado', BRL(f.values.iss));

  section('IBS e CBS');
  if (f.ibsCbs) {
    field('CST', f.ibsCbs.cst);
    field('Classificação tributária', f.ibsCbs.classification);
    field('Indicador da operação', f.ibsCbs.operation);
    field('Valor total do IBS', f.ibsCbs.ibs ? BRL(f.ibsCbs.ibs) : 'não informado na NFS-e');
    field('Valor da CBS', f.ibsCbs.cbs ? BRL(f.ibsCbs.cbs) : 'não informado na NFS-e');
  } else {
    doc.font('Helvetica').fontSize(8).text('Sem o grupo IBS/CBS', 40, doc.y);
  }

  section('Valor total da NFS-e');
  field('Valor do serviço', BRL(f.values.service));
  field('Valor líquido da NFS-e', BRL(f.values.net || f.values.service));

  doc.moveDown(1.2);
  doc
    .font('Helvetica')
    .fontSize(7)
    .fillColor('#555')
    .text(
      'Representação gráfica gerada por catraca a partir do XML da NFS-e autorizado pela Sefin Nacional. A autenticidade pode ser consultada no Portal Nacional da NFS-e pela chave de acesso.',
      36,
      doc.y,
      { width },
    );
  doc.end();
  return done;
}
