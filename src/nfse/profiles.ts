import type { DbClient } from '../db/pool.ts';
import { type FederalDocument, formatDocument, parseDocument } from './document.ts';
import type { Tomador } from './dps.ts';
import { UF_CODES } from './uf.ts';

// Billing profiles: for whom a tenant's notas fiscais are made (the portal's "Dados fiscais").
// Checked here, on the server, whatever the browser did; saved as a new row each time
// (billing_profiles is append-only), so every note keeps the profile it was made with.

export interface ProfileInput {
  document: string;
  name: string;
  email?: string;
  cep: string;
  street: string;
  number: string;
  complement?: string;
  district: string;
  cityCode: string;
  uf: string;
  municipalRegistration?: string;
}

export interface BillingProfile {
  id: string;
  tenant_id: string;
  document_kind: 'cpf' | 'cnpj';
  document: string;
  name: string;
  email: string | null;
  cep: string;
  street: string;
  number: string;
  complement: string | null;
  district: string;
  city_code: string;
  uf: string;
  municipal_registration: string | null;
  saved_by: string | null;
  valid_from: Date;
}

export type ProfileErrors = Partial<Record<keyof ProfileInput, string>>;

const UFS = new Set(Object.values(UF_CODES));
const trim = (v: string | undefined) => (v ?? '').trim().replace(/\s+/g, ' ');

/** Why a typed document is refused, naming it: a CPF (11 digits) or a CNPJ (14 characters) with wrong check digits, or neither. */
export function documentError(raw: string): string {
  const shown = raw.slice(0, 40);
  const bare = raw.replace(/[\s./-]/g, '').toUpperCase();
  if (/^\d{11}$/.test(bare)) return `CPF inválido: ${shown} (confira os dígitos verificadores).`;
  if (/^[0-9A-Z]{12}\d{2}$/.test(bare)) return `CNPJ inválido: ${shown} (confira os dígitos verificadores).`;
  return `CNPJ ou CPF inválido: ${shown} (um CPF tem 11 dígitos; um CNPJ, 14 caracteres).`;
}

/** The profile to save, or what is wrong with each field (messages in Portuguese, as the page shows them). */
export function checkProfile(
  input: ProfileInput,
): { ok: true; value: Omit<BillingProfile, 'id' | 'tenant_id' | 'saved_by' | 'valid_from'> } | { ok: false; errors: ProfileErrors } {
  const errors: ProfileErrors = {};
  const raw = trim(input.document);
  const doc: FederalDocument | null = parseDocument(raw);
  if (!raw) errors.document = 'Informe o CNPJ ou CPF.';
  else if (!doc) errors.document = documentError(raw);
  const name = trim(input.name);
  if (!name || name.length > 300) errors.name = 'Informe a razão social ou o nome (até 300 caracteres).';
  const email = trim(input.email);
  if (email && (email.length > 80 || !/^[^\s@]+@[^\s@]+\.[^\s@]+$/.test(email))) errors.email = `E-mail inválido: ${email.slice(0, 80)}`;
  const cep = trim(input.cep).replace(/[.-]/g, '');
  if (!/^\d{8}$/.test(cep)) errors.cep = 'O CEP tem 8 dígitos.';
  const street = trim(input.street);
  if (!street || street.length > 255) errors.street = 'Informe o logradouro.';
  const number = trim(input.number);
  if (!number || number.length > 60) errors.number = 'Informe o número (ou S/N).';
  const complement = trim(input.complement);
  if (complement.length > 156) errors.complement = 'Complemento de até 156 caracteres.';
  const district = trim(input.district);
  if (!district || district.length > 60) errors.district = 'Informe o bairro.';
  const cityCode = trim(input.cityCode);
  const uf = trim(input.uf).toUpperCase();
  if (!/^\d{7}$/.test(cityCode)) errors.cityCode = 'O código IBGE do município tem 7 dígitos.';
  if (!UFS.has(uf)) errors.uf = 'Informe a UF (sigla de 2 letras).';
  else if (/^\d{7}$/.test(cityCode) && UF_CODES[cityCode.slice(0, 2)] !== uf) errors.cityCode = `O código IBGE ${cityCode} não é de um município de ${uf}.`;
  const im = trim(input.municipalRegistration);
  if (im.length > 15) errors.municipalRegistration = 'Inscrição municipal de até 15 caracteres.';
  if (Object.keys(errors).length > 0 || !doc) return { ok: false, errors };
  return {
    ok: true,
    value: {
      document_kind: doc.kind,
      document: doc.value,
      name,
      email: email || null,
      cep,
      street,
      number,
      complement: complement || null,
      district,
      city_code: cityCode,
      uf,
      municipal_registration: im || null,
    },
  };
}

/** Saves a new version of the tenant's profile (after checkProfile). */
export async function saveProfile(
  db: DbClient,
  tenantId: string,
  input: ProfileInput,
  savedBy: string | null,
): Promise<{ ok: true; profile: BillingProfile } | { ok: false; errors: ProfileErrors }> {
  const c = checkProfile(input);
  if (!c.ok) return c;
  const v = c.value;
  const { rows } = await db.query(
    `insert into billing_profiles (tenant_id, document_kind, document, name, email, cep, street, number, complement, district, city_code, uf, municipal_registration, saved_by)
     values ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14) returning *`,
    [
      tenantId,
      v.document_kind,
      v.document,
      v.name,
      v.email,
      v.cep,
      v.street,
      v.number,
      v.complement,
      v.district,
      v.city_code,
      v.uf,
      v.municipal_registration,
      savedBy,
    ],
  );
  return { ok: true, profile: rows[0] };
}

/** The tenant's profile as it is now (the latest version), or null. */
export async function currentProfile(db: DbClient, tenantId: string): Promise<BillingProfile | null> {
  const { rows } = await db.query('select * from billing_profiles where tenant_id = $1 order by valid_from desc, id desc limit 1', [tenantId]);
  return rows[0] ?? null;
}

/** Every version, newest first. */
export async function profileHistory(db: DbClient, tenantId: string, limit = 50): Promise<BillingProfile[]> {
  return (await db.query('select * from billing_profiles where tenant_id = $1 order by valid_from desc, id desc limit $2', [tenantId, limit])).rows;
}

export function tomadorOf(p: BillingProfile): Tomador {
  return {
    document: { kind: p.document_kind, value: p.document },
    name: p.name,
    email: p.email,
    municipalRegistration: p.municipal_registration,
    cep: p.cep,
    street: p.street,
    number: p.number,
    complement: p.complement,
    district: p.district,
    cityCode: p.city_code,
  };
}

export const documentLabel = (p: Pick<BillingProfile, 'document_kind' | 'document'>): string => formatDocument({ kind: p.document_kind, value: p.document });
