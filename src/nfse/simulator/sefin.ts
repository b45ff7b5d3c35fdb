import { randomInt, type X509Certificate } from 'node:crypto';
import { readFileSync } from 'node:fs';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { gunzipSync, gzipSync } from 'node:zlib';
import type { A1Certificate } from '../certificate.ts';
import { documentOfCertificate } from '../certificate.ts';
import { isCnpj, isCpf } from '../document.ts';
import { ufOf } from '../uf.ts';
import { parseXml } from '../nfse-xml.ts';
import { signEnveloped } from '../sign.ts';
import { localDateTime } from '../time.ts';
import { checkEnveloped } from '../verify.ts';
import { el, ela, leaf, NFSE_NS, render, XML_DECLARATION } from '../xml.ts';
import { validateAgainst } from '../xsd.ts';

// What Sefin Nacional does with a DPS and an event, from the manual's business rules (Anexo I
// "RN DPS", Anexo II "RN PED.REG.EVENTO") and the schemas: the checks in the order the service
// makes them, each refusal with its documented code and text, and the NFS-e it makes — signed
// by the simulator's own certificate, with the DPS inside it as it came, its access key composed
// as the layout says. Only what catraca's DPS can exercise is checked; the registries the real
// service consults (CNC, CPF/CNPJ, municipal parameters) are this simulator's few settings.

export interface SefinError {
  Codigo: string;
  Descricao: string;
  Complemento?: string;
}

const SERVICE_CODES: Record<string, string> = JSON.parse(readFileSync(join(dirname(fileURLToPath(import.meta.url)), 'service-codes.json'), 'utf8'));
const APP_VERSION = 'SefinNacionalSim_1.0';

export interface IssuedNote {
  accessKey: string;
  number: string;
  dpsId: string;
  /** the DPS as received (decompressed) */
  dpsXml: string;
  nfseXml: string;
  issuedAt: Date;
  cancelled: boolean;
  eventXml?: string;
}

export interface SimOutcome {
  status: number;
  body: Record<string, unknown>;
}

export class SefinState {
  readonly byDps = new Map<string, IssuedNote>();
  readonly byKey = new Map<string, IssuedNote>();
  /** Every DPS received, decompressed, in order (tests compare them with what catraca stored). */
  readonly received: string[] = [];
  /** While set, every request is answered 503 (an outage). */
  unavailable = false;
  private seq = 0;
  /** The municipality's cancellation window (E0835), days. */
  cancelDays = 30;

  constructor(
    readonly ambiente: '1' | '2',
    private readonly cert: Pick<A1Certificate, 'keyPem' | 'certPem'>,
  ) {}

  private answer(status: number, extra: Record<string, unknown>): SimOutcome {
    return { status, body: { tipoAmbiente: Number(this.ambiente), versaoAplicativo: APP_VERSION, dataHoraProcessamento: localDateTime(new Date()), ...extra } };
  }

  private refuse(errors: SefinError[], idDps?: string, status = 400): SimOutcome {
    return this.answer(status, { ...(idDps ? { idDPS: idDps } : {}), erros: errors });
  }

  /** POST /nfse */
  async receiveDps(body: unknown, client: X509Certificate | null): Promise<SimOutcome> {
    const b64 = (body as Record<string, unknown> | null)?.dpsXmlGZipB64;
    if (typeof b64 !== 'string' || b64.length === 0)
      return this.refuse([{ Codigo: 'E1226', Descricao: 'Estrutura descompactada mal formada', Complemento: 'dpsXmlGZipB64 ausente' }]);
    let xml: string;
    try {
      xml = gunzipSync(Buffer.from(b64, 'base64')).toString('utf8');
    } catch {
      return this.refuse([{ Codigo: 'E1226', Descricao: 'Estrutura descompactada mal formada', Complemento: 'o conteúdo não é GZip em Base64' }]);
    }
    this.received.push(xml);
    let doc: Document;
    try {
      doc = parseXml(xml);
    } catch (err) {
      return this.refuse([{ Codigo: 'E1226', Descricao: 'Estrutura descompactada mal formada', Complemento: (err as Error).message.slice(0, 300) }]);
    }
    const schema = await validateAgainst('DPS_v1.01.xsd', xml);
    if (schema.length > 0) return this.refuse([{ Codigo: 'RNG6110', Descricao: 'Falha Schema Xml', Complemento: schema[0].slice(0, 500) }]);
    const inf = doc.getElementsByTagNameNS(NFSE_NS, 'infDPS')[0];
    const idDps = inf.getAttribute('Id') ?? '';
    const sig = checkEnveloped(xml, 'infDPS');
    if (!sig.ok)
      return sig.missing
        ? this.refuse([{ Codigo: 'E0717', Descricao: 'A assinatura é obrigatória quando for enviado para o Web Service.' }], idDps)
        : this.refuse([{ Codigo: 'E0714', Descricao: 'Arquivo enviado com erro na assinatura.', Complemento: sig.reason }], idDps);
    const get = (parent: Element, name: string) => parent.getElementsByTagNameNS(NFSE_NS, name)[0]?.textContent ?? '';
    const prest = inf.getElementsByTagNameNS(NFSE_NS, 'prest')[0];
    const prestDoc = get(prest, 'CNPJ') || get(prest, 'CPF');
    const signer = documentOfCertificate(sig.cert);
    if (!signer || signer.slice(0, 8) !== prestDoc.slice(0, 8) || !client || documentOfCertificate(client)?.slice(0, 8) !== prestDoc.slice(0, 8))
      return this.refuse([{ Codigo: 'E0718', Descricao: 'A assinatura deve ser feita com o certificado digital do emitente da DPS.' }], idDps);
    const cLocEmi = get(inf, 'cLocEmi');
    const serie = get(inf, 'serie');
    const nDPS = get(inf, 'nDPS');
    const expectedId = `DPS${cLocEmi}${get(prest, 'CNPJ') ? `2${get(prest, 'CNPJ')}` : `1${get(prest, 'CPF').padStart(14, '0')}`}${serie.padStart(5, '0')}${nDPS.padStart(15, '0')}`;
    if (idDps !== expectedId)
      return this.refuse(
        [{ Codigo: 'E0004', Descricao: 'Conteúdo do identificador informado na DPS difere da concatenação dos campos correspondentes.' }],
        idDps,
      );
    if (get(inf, 'tpAmb') !== this.ambiente)
      return this.refuse([{ Codigo: 'E0006', Descricao: 'Ambiente informado diverge do ambiente de recebimento para o qual o emitente enviou a DPS.' }], idDps);
    const dhEmi = new Date(get(inf, 'dhEmi'));
    if (dhEmi.getTime() > Date.now())
      return this.refuse([{ Codigo: 'E0008', Descricao: 'A data de emissão da DPS não pode ser posterior à data do seu processamento.' }], idDps);
    if (get(inf, 'dCompet') > get(inf, 'dhEmi').slice(0, 10))
      return this.refuse(
        [{ Codigo: 'E0015', Descricao: 'A data de competência informada na DPS não pode ser posterior à data de emissão (dhEmi) da DPS.' }],
        idDps,
      );
    if (this.byDps.has(idDps))
      return this.refuse(
        [
          {
            Codigo: 'E0014',
            Descricao:
              'Conjunto de Série, Número, Código do Município Emissor e CNPJ/CPF informado nesta DPS já existe em uma NFS-e gerada a partir de uma DPS enviada anteriormente.',
          },
        ],
        idDps,
      );
    if (get(prest, 'CNPJ') && !isCnpj(get(prest, 'CNPJ')))
      return this.refuse([{ Codigo: 'E0080', Descricao: 'CNPJ do prestador informado na DPS é inválido.' }], idDps);
    const toma = inf.getElementsByTagNameNS(NFSE_NS, 'toma')[0];
    if (toma) {
      const cnpj = get(toma, 'CNPJ');
      const cpf = get(toma, 'CPF');
      if (cnpj && !isCnpj(cnpj)) return this.refuse([{ Codigo: 'E0188', Descricao: 'CNPJ do tomador informado na DPS é inválido.' }], idDps);
      if (cpf && !isCpf(cpf)) return this.refuse([{ Codigo: 'E0206', Descricao: 'CPF do tomador informado na DPS é inválido.' }], idDps);
      if (cnpj && cnpj.slice(0, 8) === get(prest, 'CNPJ').slice(0, 8))
        return this.refuse(
          [{ Codigo: 'E0202', Descricao: 'Na emissão da NFS-e não é permitido que o prestador do serviço seja igual ao tomador do serviço. ' }],
          idDps,
        );
    }
    const cTribNac = get(inf, 'cTribNac');
    if (!SERVICE_CODES[cTribNac])
      return this.refuse(
        [
          {
            Codigo: 'E0310',
            Descricao: 'O código de tributação nacional informado não existe conforme a lista de serviços nacional do Sistema Nacional NFS-e.',
          },
        ],
        idDps,
      );
    const note = this.makeNfse(xml, doc, inf, idDps, sig.cert);
    return this.answer(201, {
      idDps,
      chaveAcesso: note.accessKey,
      nfseXmlGZipB64: gzipSync(Buffer.from(note.nfseXml, 'utf8')).toString('base64'),
      alertas: [],
    });
  }

  private makeNfse(dpsXml: string, doc: Document, inf: Element, idDps: string, signer: X509Certificate): IssuedNote {
    const get = (name: string) => inf.getElementsByTagNameNS(NFSE_NS, name)[0]?.textContent ?? '';
    const now = new Date();
    const number = String(++this.seq);
    const cLocEmi = get('cLocEmi');
    const insc = get('prest') && inf.getElementsByTagNameNS(NFSE_NS, 'prest')[0].getElementsByTagNameNS(NFSE_NS, 'CNPJ')[0]?.textContent;
    const tpInsc = insc ? '2' : '1';
    const inscricao = insc ?? inf.getElementsByTagNameNS(NFSE_NS, 'prest')[0].getElementsByTagNameNS(NFSE_NS, 'CPF')[0].textContent!.padStart(14, '0');
    const local = localDateTime(now);
    const yymm = `${local.slice(2, 4)}${local.slice(5, 7)}`;
    const base = `${cLocEmi}2${tpInsc}${inscricao}${number.padStart(13, '0')}${yymm}${String(randomInt(0, 1e9)).padStart(9, '0')}`;
    const accessKey = `${base}${mod11(base)}`;
    const vServ = get('vServ');
    const pAliq = get('pAliq') || '2.00';
    const vISS = ((Math.round(Number(vServ) * 100) * Math.round(Number(pAliq) * 100)) / 1_000_000).toFixed(2);
    const emitName = (/CN=([^\n:]*)/.exec(signer.subject)?.[1] ?? 'EMITENTE').slice(0, 300);
    // The DPS goes in as it came: its root, without the XML declaration.
    const dpsElement = dpsXml.replace(/^<\?xml[^>]*\?>\s*/, '');
    const infNfse = render(
      ela(
        'infNFSe',
        { Id: `NFS${accessKey}` },
        leaf('xLocEmi', `Município ${cLocEmi}`),
        leaf('xLocPrestacao', `Município ${get('cLocPrestacao') || cLocEmi}`),
        leaf('nNFSe', number),
        leaf('cLocIncid', get('cLocPrestacao') || cLocEmi),
        leaf('xLocIncid', `Município ${get('cLocPrestacao') || cLocEmi}`),
        leaf('xTribNac', SERVICE_CODES[get('cTribNac')]),
        leaf('verAplic', APP_VERSION),
        leaf('ambGer', '2'),
        leaf('tpEmis', '1'),
        leaf('procEmi', '1'),
        leaf('cStat', '100'),
        leaf('dhProc', local),
        leaf('nDFSe', number),
        el(
          'emit',
          leaf(tpInsc === '2' ? 'CNPJ' : 'CPF', tpInsc === '2' ? inscricao : inscricao.slice(3)),
          leaf('xNome', emitName),
          el(
            'enderNac',
            leaf('xLgr', 'Endereço do cadastro'),
            leaf('nro', 'S/N'),
            leaf('xBairro', 'Centro'),
            leaf('cMun', cLocEmi),
            leaf('UF', ufOf(cLocEmi) ?? 'SP'),
            leaf('CEP', '01001000'),
          ),
        ),
        el('valores', leaf('vBC', vServ), leaf('pAliqAplic', pAliq), leaf('vISSQN', vISS), leaf('vLiq', vServ)),
      ),
    ).replace(/<\/infNFSe>$/, `${dpsElement}</infNFSe>`);
    const unsigned = `${XML_DECLARATION}<NFSe xmlns="${NFSE_NS}" versao="1.01">${infNfse}</NFSe>`;
    const nfseXml = signEnveloped(unsigned, 'infNFSe', 'NFSe', this.cert);
    const note: IssuedNote = { accessKey, number, dpsId: idDps, dpsXml, nfseXml, issuedAt: now, cancelled: false };
    this.byDps.set(idDps, note);
    this.byKey.set(accessKey, note);
    void doc;
    return note;
  }

  /** GET /dps/{id} */
  dps(id: string): SimOutcome {
    const n = this.byDps.get(id);
    return n ? this.answer(200, { idDps: id, chaveAcesso: n.accessKey }) : this.refuse([{ Codigo: 'E2220', Descricao: 'DPS não encontrada.' }], id, 404);
  }

  /** GET /nfse/{chave} */
  nfse(key: string): SimOutcome {
    const n = this.byKey.get(key);
    return n
      ? this.answer(200, { chaveAcesso: key, nfseXmlGZipB64: gzipSync(Buffer.from(n.nfseXml, 'utf8')).toString('base64') })
      : this.refuse([{ Codigo: 'E2221', Descricao: 'NFS-e não encontrada.' }], undefined, 404);
  }

  /** POST /nfse/{chave}/eventos: only the cancellation (e101101) is simulated. */
  async receiveEvent(key: string, body: unknown, client: X509Certificate | null): Promise<SimOutcome> {
    const b64 = (body as Record<string, unknown> | null)?.pedidoRegistroEventoXmlGZipB64;
    let xml: string;
    try {
      if (typeof b64 !== 'string' || !b64) throw new Error('missing');
      xml = gunzipSync(Buffer.from(b64, 'base64')).toString('utf8');
      parseXml(xml);
    } catch {
      return this.refuse([{ Codigo: 'E1226', Descricao: 'Estrutura descompactada mal formada' }]);
    }
    const schema = await validateAgainst('pedRegEvento_v1.01.xsd', xml);
    if (schema.length > 0) return this.refuse([{ Codigo: 'RNG6110', Descricao: 'Falha Schema Xml', Complemento: schema[0].slice(0, 500) }]);
    const sig = checkEnveloped(xml, 'infPedReg');
    if (!sig.ok) return this.refuse([{ Codigo: 'E0714', Descricao: 'Arquivo enviado com erro na assinatura.', Complemento: sig.reason }]);
    const doc = parseXml(xml);
    const get = (name: string) => doc.getElementsByTagNameNS(NFSE_NS, name)[0]?.textContent ?? '';
    const inf = doc.getElementsByTagNameNS(NFSE_NS, 'infPedReg')[0];
    const code =
      (Array.from(inf.childNodes).find((n) => n.nodeType === 1 && /^e\d{6}$/.test((n as Element).localName)) as Element | undefined)?.localName?.slice(1) ?? '';
    if (inf.getAttribute('Id') !== `PRE${get('chNFSe')}${code}`)
      return this.refuse([
        {
          Codigo: 'E0801',
          Descricao: 'Conteúdo do identificador informado no pedido de registro de evento difere da concatenação dos campos correspondentes.',
        },
      ]);
    const note = this.byKey.get(get('chNFSe'));
    if (!note || get('chNFSe') !== key)
      return this.refuse([
        { Codigo: 'E0819', Descricao: 'O pedido de registro de evento não pode ser validado pois a NFS-e indicada não existe no Sistema Nacional NFS-e.' },
      ]);
    const author = get('CNPJAutor');
    if (documentOfCertificate(sig.cert)?.slice(0, 8) !== author.slice(0, 8) || documentOfCertificate(client!)?.slice(0, 8) !== author.slice(0, 8))
      return this.refuse([
        {
          Codigo: 'E0812',
          Descricao: 'O CNPJ do autor do pedido de registro de evento não corresponde à base do CNPJ informada no certificado digital da assinatura do pedido.',
        },
      ]);
    if (code !== '101101') return this.refuse([{ Codigo: 'E0840', Descricao: 'Evento não suportado por este simulador.' }]);
    if (note.cancelled)
      return this.refuse([
        {
          Codigo: 'E0840',
          Descricao:
            'O sistema não pode processar a validação deste pedido de registro de Evento de Cancelamento de NFS-e pois o evento de Cancelamento de NFS-e, vinculado à NFS-e indicada no pedido, já existe.',
        },
      ]);
    if (Date.now() - note.issuedAt.getTime() > this.cancelDays * 86_400_000)
      return this.refuse([
        {
          Codigo: 'E0835',
          Descricao:
            'O prazo para o cancelamento expirou. Para mais informações, consultar a Administração Tributária Municipal do município emissor da NFS-e.',
        },
      ]);
    const now = new Date();
    const pedido = xml.replace(/^<\?xml[^>]*\?>\s*/, '');
    const unsigned = `${XML_DECLARATION}<evento xmlns="${NFSE_NS}" versao="1.01">${render(
      ela(
        'infEvento',
        { Id: `EVT${key}${code}001` },
        leaf('verAplic', APP_VERSION),
        leaf('ambGer', '2'),
        leaf('nSeqEvento', '1'),
        leaf('dhProc', localDateTime(now)),
        leaf('nDFSe', note.number),
      ),
    ).replace(/<\/infEvento>$/, `${pedido}</infEvento>`)}</evento>`;
    const eventXml = signEnveloped(unsigned, 'infEvento', 'evento', this.cert);
    note.cancelled = true;
    note.eventXml = eventXml;
    return this.answer(201, { eventoXmlGZipB64: gzipSync(Buffer.from(eventXml, 'utf8')).toString('base64') });
  }
}

/** The access key's check digit: modulo 11 with weights 2–9 from the right (characters worth their code minus 48). */
export function mod11(s: string): string {
  let sum = 0;
  let w = 2;
  for (let i = s.length - 1; i >= 0; i--) {
    sum += (s.charCodeAt(i) - 48) * w;
    w = w === 9 ? 2 : w + 1;
  }
  const r = sum % 11;
  return r < 2 ? '0' : String(11 - r);
}
