import { readFileSync } from 'node:fs';
import type { Config } from '../config.ts';
import { VERSION } from '../version.ts';
import { type A1Certificate, readPkcs12, selfSignedPkcs12 } from './certificate.ts';
import { isCnpj } from './document.ts';
import type { Prestador } from './dps.ts';
import { percent1v2 } from './money.ts';

// The operator's fiscal settings (NFSE_* in docs/operations.md), checked once at the portal's
// start: a configuration that could only make rejected notes refuses to start, with a message
// naming what to set. The certificate's password is used here and never kept or logged.

export type NfseEnv = Pick<
  Config,
  | 'NFSE_PROVIDER'
  | 'NFSE_URL'
  | 'NFSE_AMBIENTE'
  | 'NFSE_CA_FILE'
  | 'NFSE_CERT_PFX'
  | 'NFSE_CERT_PASSWORD'
  | 'NFSE_CNPJ'
  | 'NFSE_MUNICIPIO'
  | 'NFSE_INSCRICAO_MUNICIPAL'
  | 'NFSE_SERVICE_CODE'
  | 'NFSE_SERVICE_DESCRIPTION'
  | 'NFSE_NBS'
  | 'NFSE_SERIE'
  | 'NFSE_SIMPLES_NACIONAL'
  | 'NFSE_SN_REGIME'
  | 'NFSE_REGIME_ESPECIAL'
  | 'NFSE_ISS_RATE'
  | 'NFSE_IBSCBS_CST'
  | 'NFSE_IBSCBS_CLASS'
  | 'NFSE_IBSCBS_IND_OP'
  | 'NFSE_EMIT_ON'
  | 'NFSE_CANCEL_DAYS'
>;

export interface NfseSetup {
  provider: 'nacional' | 'simulator';
  /** nacional: NFSE_URL; simulator: set when the simulator has started */
  baseUrl: string | null;
  ca: string[];
  cert: A1Certificate;
  prestador: Prestador;
  emitOn: 'topup' | 'monthly';
  cancelDays: number;
}

/** The simulator's defaults when NFSE_CNPJ, NFSE_MUNICIPIO, NFSE_SERVICE_CODE are unset: a test CNPJ, Florianópolis (SC), 01.03.01 (processamento de dados). */
export const SIMULATOR_CNPJ = '11222333000181';
export const SIMULATOR_MUNICIPIO = '4205407';
export const SIMULATOR_SERVICE_CODE = '010301';

export class NfseConfigError extends Error {
  constructor(message: string) {
    super(message);
    this.name = 'NfseConfigError';
  }
}

/** NFSE_PROVIDER as it applies: unset is `off` (`npm start` sets `simulator` for its portal). */
export function nfseProvider(env: Pick<Config, 'NFSE_PROVIDER'>): 'nacional' | 'simulator' | 'off' {
  return env.NFSE_PROVIDER ?? 'off';
}

/** The settings, or null when issuing is off. Throws NfseConfigError on a configuration that cannot issue. */
export function loadNfseSetup(env: NfseEnv): NfseSetup | null {
  const provider = nfseProvider(env);
  if (provider === 'off') return null;
  const missing = (name: string) => new NfseConfigError(`NFSE_PROVIDER=${provider} needs ${name}`);
  if (provider === 'nacional' && !env.NFSE_URL)
    throw missing('NFSE_URL (https://sefin.nfse.gov.br/SefinNacional or https://sefin.producaorestrita.nfse.gov.br/SefinNacional)');
  let cert: A1Certificate;
  if (!env.NFSE_CERT_PFX) {
    if (provider !== 'simulator') throw missing('NFSE_CERT_PFX (the A1 certificate, a PKCS#12 file) and NFSE_CERT_PASSWORD');
    // the simulator without a certificate file: a throwaway self-signed one (npm start writes one to its state directory)
    const cnpj = (env.NFSE_CNPJ ?? SIMULATOR_CNPJ).replace(/[\s./-]/g, '').toUpperCase();
    cert = readPkcs12(selfSignedPkcs12({ name: 'CATRACA DESENVOLVIMENTO', document: cnpj, password: 'dev' }).pfx, 'dev');
  } else {
    let der: Buffer;
    try {
      der = readFileSync(env.NFSE_CERT_PFX);
    } catch (err) {
      throw new NfseConfigError(`NFSE_CERT_PFX cannot be read: ${(err as NodeJS.ErrnoException).code ?? (err as Error).message}`);
    }
    cert = readPkcs12(der, env.NFSE_CERT_PASSWORD ?? '');
  }
  if (cert.notAfter.getTime() < Date.now()) throw new NfseConfigError(`the certificate in NFSE_CERT_PFX expired on ${cert.notAfter.toISOString()}`);
  const cnpj = (env.NFSE_CNPJ ?? cert.document ?? '').replace(/[\s./-]/g, '').toUpperCase();
  if (!isCnpj(cnpj)) throw new NfseConfigError(`NFSE_CNPJ is not a valid CNPJ${env.NFSE_CNPJ ? '' : ' (unset, and the certificate names none)'}`);
  if (cert.document && cert.document.slice(0, 8) !== cnpj.slice(0, 8))
    throw new NfseConfigError(`NFSE_CNPJ ${cnpj} is not the certificate's (${cert.document}): Sefin refuses a DPS signed by another CNPJ (E0718)`);
  // the simulator's defaults: a municipality of the national system and the data-processing service code
  const municipio = env.NFSE_MUNICIPIO ?? (provider === 'simulator' ? SIMULATOR_MUNICIPIO : undefined);
  const serviceCode = env.NFSE_SERVICE_CODE ?? (provider === 'simulator' ? SIMULATOR_SERVICE_CODE : undefined);
  if (!municipio) throw missing('NFSE_MUNICIPIO (the IBGE code of the operator’s municipality)');
  if (!serviceCode) throw missing('NFSE_SERVICE_CODE (the national service code, cTribNac)');
  const issRate = env.NFSE_ISS_RATE ? percent1v2(env.NFSE_ISS_RATE) : undefined;
  if (issRate === null) throw new NfseConfigError('NFSE_ISS_RATE must be a percentage below 10 with at most 2 decimals, e.g. 2.00');
  const ibs = [env.NFSE_IBSCBS_CST, env.NFSE_IBSCBS_CLASS, env.NFSE_IBSCBS_IND_OP];
  if (ibs.some(Boolean) && !ibs.every(Boolean))
    throw new NfseConfigError('the IBS/CBS group needs NFSE_IBSCBS_CST, NFSE_IBSCBS_CLASS and NFSE_IBSCBS_IND_OP together');
  const ca: string[] = [];
  if (env.NFSE_CA_FILE) {
    try {
      ca.push(readFileSync(env.NFSE_CA_FILE, 'utf8'));
    } catch (err) {
      throw new NfseConfigError(`NFSE_CA_FILE cannot be read: ${(err as NodeJS.ErrnoException).code ?? (err as Error).message}`);
    }
  }
  return {
    provider,
    baseUrl: provider === 'nacional' ? (env.NFSE_URL ?? null) : null,
    ca,
    cert,
    emitOn: env.NFSE_EMIT_ON,
    cancelDays: env.NFSE_CANCEL_DAYS,
    prestador: {
      ambiente: env.NFSE_AMBIENTE,
      cnpj,
      municipio,
      inscricaoMunicipal: env.NFSE_INSCRICAO_MUNICIPAL,
      serie: env.NFSE_SERIE,
      serviceCode,
      serviceDescription: env.NFSE_SERVICE_DESCRIPTION,
      nbs: env.NFSE_NBS,
      simplesNacional: env.NFSE_SIMPLES_NACIONAL,
      regimeApuracaoSN: env.NFSE_SN_REGIME,
      regimeEspecial: env.NFSE_REGIME_ESPECIAL,
      issRate,
      ibsCbs: ibs.every(Boolean) ? { cst: env.NFSE_IBSCBS_CST!, classTrib: env.NFSE_IBSCBS_CLASS!, indOp: env.NFSE_IBSCBS_IND_OP! } : undefined,
      appVersion: `catraca-${VERSION}`.slice(0, 20),
    },
  };
}
