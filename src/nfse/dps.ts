import type { FederalDocument } from './document.ts';
import { decimal2 } from './money.ts';
import { localDate, localDateTime } from './time.ts';
import { el, ela, leaf, NFSE_NS, render, XML_DECLARATION } from './xml.ts';

// The DPS (Declaração de Prestação de Serviço) of one sale, to the national layout v1.01
// (src/nfse/schema/tiposComplexos_v1.01.xsd, TCDPS) and the manual's rules:
//   - Id = "DPS" + cLocEmi (7) + type of federal registration (1 CPF, 2 CNPJ) + the registration
//     (14, a CPF left-padded with 0) + série (5) + nDPS (15) — composed of the DPS's own fields;
//   - dhEmi in Brasília time with its offset (time.ts), a little in the past so that a clock
//     slightly ahead of Sefin's never makes it "later than its processing" (E0008);
//   - the prestador issues (tpEmit 1), so its name, address, phone and e-mail are left out (the
//     national registry has them); its regime (regTrib) is the operator's settings;
//   - the tomador is the tenant's billing profile as it is when the DPS is built, or absent (a
//     sale to an unidentified person) when the tenant has none;
//   - the IBS/CBS group (NT 004/2025, the 2026 tax reform) when the operator configured it.
// No namespace prefixes: the default namespace on <DPS>, and the signature's own on <Signature>.

export const DPS_VERSION = '1.01';

/** The operator, as the prestador that issues (NFSE_* settings). */
export interface Prestador {
  /** tpAmb: 1 production, 2 restricted production (homologação) */
  ambiente: '1' | '2';
  cnpj: string;
  /** IBGE code of the operator's municipality: cLocEmi and the place of the service */
  municipio: string;
  inscricaoMunicipal?: string;
  /** the DPS series, 1–5 digits */
  serie: string;
  /** cTribNac (6 digits) and xDescServ */
  serviceCode: string;
  serviceDescription: string;
  /** cNBS (9 digits) */
  nbs?: string;
  /** opSimpNac: 1 not opting, 2 MEI, 3 ME/EPP */
  simplesNacional: '1' | '2' | '3';
  /** regApTribSN (only with simplesNacional 3) */
  regimeApuracaoSN?: '1' | '2' | '3';
  /** regEspTrib: 0 none … 9 others */
  regimeEspecial: string;
  /** pAliq: the ISS rate in percent ("2.00"); left out when unset (Sefin takes the municipality's) */
  issRate?: string;
  /** The IBS/CBS group: CST, cClassTrib and cIndOp of the operation. */
  ibsCbs?: { cst: string; classTrib: string; indOp: string };
  /** verAplic */
  appVersion: string;
}

/** The tenant's billing profile (the tomador). */
export interface Tomador {
  document: FederalDocument;
  name: string;
  email?: string | null;
  municipalRegistration?: string | null;
  cep: string;
  street: string;
  number: string;
  complement?: string | null;
  district: string;
  cityCode: string;
}

export interface DpsInput {
  number: string;
  /** when the DPS is made (dhEmi) */
  issuedAt: Date;
  /** when the service was sold (the top-up's payment): dCompet is its date in Brasília */
  competence: Date;
  amountMicros: bigint;
  tomador: Tomador | null;
  /** docRef: our reference of the sale (the Pix charge's txid) */
  reference?: string;
}

/** How far dhEmi is set before the moment the DPS is built. */
export const DH_EMI_MARGIN_MS = 30_000;

/** "DPS" + cLocEmi + 2 (CNPJ) + CNPJ + série(5) + nDPS(15). */
export function dpsId(p: Pick<Prestador, 'municipio' | 'cnpj' | 'serie'>, number: string): string {
  return `DPS${p.municipio}2${p.cnpj}${p.serie.padStart(5, '0')}${number.padStart(15, '0')}`;
}

export function buildDps(p: Prestador, d: DpsInput): { id: string; xml: string } {
  if (!/^[1-9]\d{0,14}$/.test(d.number)) throw new Error(`DPS number out of range: ${d.number}`);
  const id = dpsId(p, d.number);
  const dhEmi = new Date(d.issuedAt.getTime() - DH_EMI_MARGIN_MS);
  const competence = d.competence.getTime() > dhEmi.getTime() ? dhEmi : d.competence;
  const t = d.tomador;
  const toma =
    t &&
    el(
      'toma',
      leaf(t.document.kind === 'cnpj' ? 'CNPJ' : 'CPF', t.document.value),
      leaf('IM', t.municipalRegistration || undefined),
      leaf('xNome', t.name),
      el(
        'end',
        el('endNac', leaf('cMun', t.cityCode), leaf('CEP', t.cep)),
        leaf('xLgr', t.street),
        leaf('nro', t.number),
        leaf('xCpl', t.complement || undefined),
        leaf('xBairro', t.district),
      ),
      leaf('email', t.email || undefined),
    );
  const ibsCbs =
    p.ibsCbs &&
    el(
      'IBSCBS',
      leaf('finNFSe', '0'),
      // uso ou consumo pessoal: a sale to a person (CPF) or to nobody identified
      leaf('indFinal', !t || t.document.kind === 'cpf' ? '1' : '0'),
      leaf('cIndOp', p.ibsCbs.indOp),
      leaf('indDest', '0'),
      el('valores', el('trib', el('gIBSCBS', leaf('CST', p.ibsCbs.cst), leaf('cClassTrib', p.ibsCbs.classTrib)))),
    );
  const infDPS = ela(
    'infDPS',
    { Id: id },
    leaf('tpAmb', p.ambiente),
    leaf('dhEmi', localDateTime(dhEmi)),
    leaf('verAplic', p.appVersion),
    leaf('serie', p.serie),
    leaf('nDPS', d.number),
    leaf('dCompet', localDate(competence)),
    leaf('tpEmit', '1'),
    leaf('cLocEmi', p.municipio),
    el(
      'prest',
      leaf('CNPJ', p.cnpj),
      leaf('IM', p.inscricaoMunicipal),
      el(
        'regTrib',
        leaf('opSimpNac', p.simplesNacional),
        leaf('regApTribSN', p.simplesNacional === '3' ? p.regimeApuracaoSN : undefined),
        leaf('regEspTrib', p.regimeEspecial),
      ),
    ),
    toma,
    el(
      'serv',
      el('locPrest', leaf('cLocPrestacao', p.municipio)),
      el('cServ', leaf('cTribNac', p.serviceCode), leaf('xDescServ', p.serviceDescription), leaf('cNBS', p.nbs)),
      d.reference ? el('infoCompl', leaf('docRef', d.reference)) : undefined,
    ),
    el(
      'valores',
      el('vServPrest', leaf('vServ', decimal2(d.amountMicros))),
      el('trib', el('tribMun', leaf('tribISSQN', '1'), leaf('tpRetISSQN', '1'), leaf('pAliq', p.issRate)), el('totTrib', leaf('indTotTrib', '0'))),
    ),
    ibsCbs,
  );
  return { id, xml: XML_DECLARATION + render(ela('DPS', { xmlns: NFSE_NS, versao: DPS_VERSION }, infDPS)) };
}
