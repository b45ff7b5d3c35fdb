import { describe, expect, test } from 'vitest';
import { checkProfile, documentError } from './profiles.ts';

// The server's checks of "Dados fiscais": what each wrong field says (a wrong document named, as CPF
// or CNPJ by its shape), and the profile saved from what was typed (punctuation and case dropped).

const valid = {
  document: '12.abc.345/01de-35',
  name: '  Cliente   Exemplo  Ltda ',
  email: 'notas@cliente.example',
  cep: '88015-100',
  street: 'Rua Felipe Schmidt',
  number: '100',
  district: 'Centro',
  cityCode: '4205407',
  uf: 'sc',
};

describe('checkProfile', () => {
  test('a valid profile, normalised: the document bare and upper-cased, spaces collapsed, the CEP digits only, the UF upper-cased', () => {
    expect(checkProfile(valid)).toEqual({
      ok: true,
      value: {
        document_kind: 'cnpj',
        document: '12ABC34501DE35',
        name: 'Cliente Exemplo Ltda',
        email: 'notas@cliente.example',
        cep: '88015100',
        street: 'Rua Felipe Schmidt',
        number: '100',
        complement: null,
        district: 'Centro',
        city_code: '4205407',
        uf: 'SC',
        municipal_registration: null,
      },
    });
    expect(checkProfile({ ...valid, document: '529.982.247-25' })).toMatchObject({ ok: true, value: { document_kind: 'cpf', document: '52998224725' } });
  });

  test('a wrong document is named, as a CPF or a CNPJ by its shape', () => {
    expect(documentError('529.982.247-24')).toBe('CPF inválido: 529.982.247-24 (confira os dígitos verificadores).');
    expect(documentError('11444777000162')).toBe('CNPJ inválido: 11444777000162 (confira os dígitos verificadores).');
    expect(documentError('12.ABC.345/01DE-36')).toBe('CNPJ inválido: 12.ABC.345/01DE-36 (confira os dígitos verificadores).');
    expect(documentError('123')).toBe('CNPJ ou CPF inválido: 123 (um CPF tem 11 dígitos; um CNPJ, 14 caracteres).');
    expect(documentError('111.111.111-11')).toBe('CPF inválido: 111.111.111-11 (confira os dígitos verificadores).');
  });

  test('every wrong field has its message', () => {
    expect(
      checkProfile({
        document: '',
        name: '',
        email: 'x@y',
        cep: '8801',
        street: '',
        number: '',
        district: '',
        cityCode: '3550308',
        uf: 'SC',
        municipalRegistration: '1234567890123456',
      }),
    ).toEqual({
      ok: false,
      errors: {
        document: 'Informe o CNPJ ou CPF.',
        name: 'Informe a razão social ou o nome (até 300 caracteres).',
        email: 'E-mail inválido: x@y',
        cep: 'O CEP tem 8 dígitos.',
        street: 'Informe o logradouro.',
        number: 'Informe o número (ou S/N).',
        district: 'Informe o bairro.',
        cityCode: 'O código IBGE 3550308 não é de um município de SC.',
        municipalRegistration: 'Inscrição municipal de até 15 caracteres.',
      },
    });
    expect(checkProfile({ ...valid, uf: 'XX' })).toEqual({ ok: false, errors: { uf: 'Informe a UF (sigla de 2 letras).' } });
  });
});
