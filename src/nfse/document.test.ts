import { describe, expect, test } from 'vitest';
import { cnpjCheckDigits, formatDocument, isCnpj, isCpf, parseDocument } from './document.ts';

describe('CPF and CNPJ check digits', () => {
  test('numeric CNPJ, with and without punctuation', () => {
    expect(parseDocument('11.222.333/0001-81')).toEqual({ kind: 'cnpj', value: '11222333000181' });
    expect(parseDocument('11222333000181')).toEqual({ kind: 'cnpj', value: '11222333000181' });
    expect(parseDocument('11.444.777/0001-61')).toEqual({ kind: 'cnpj', value: '11444777000161' });
    expect(parseDocument('11.222.333/0001-82')).toBeNull();
    expect(parseDocument('11.222.333/0001-18')).toBeNull();
    expect(isCnpj('00000000000000')).toBe(false);
    expect(isCnpj('11111111111111')).toBe(false);
  });

  test('alphanumeric CNPJ (from July 2026): the Receita Federal example 12.ABC.345/01DE-35', () => {
    expect(cnpjCheckDigits('12ABC34501DE')).toBe('35');
    expect(parseDocument('12.ABC.345/01DE-35')).toEqual({ kind: 'cnpj', value: '12ABC34501DE35' });
    expect(parseDocument('12abc34501de35')).toEqual({ kind: 'cnpj', value: '12ABC34501DE35' });
    expect(parseDocument('12.ABC.345/01DE-36')).toBeNull();
    expect(parseDocument('12.ABD.345/01DE-35')).toBeNull();
    // the check digits are never letters
    expect(parseDocument('12ABC34501DE3A')).toBeNull();
  });

  test('CPF', () => {
    expect(parseDocument('529.982.247-25')).toEqual({ kind: 'cpf', value: '52998224725' });
    expect(parseDocument('52998224725')).toEqual({ kind: 'cpf', value: '52998224725' });
    expect(parseDocument('529.982.247-24')).toBeNull();
    expect(parseDocument('111.444.777-35')).toEqual({ kind: 'cpf', value: '11144477735' });
    expect(isCpf('11111111111')).toBe(false);
    expect(isCpf('00000000000')).toBe(false);
  });

  test('anything else', () => {
    for (const bad of ['', '123', 'abc', '5299822472', '529982247250', '11.222.333/0001', '12.ABC.345/01DE-3']) expect(parseDocument(bad)).toBeNull();
  });

  test('format', () => {
    expect(formatDocument({ kind: 'cnpj', value: '12ABC34501DE35' })).toBe('12.ABC.345/01DE-35');
    expect(formatDocument({ kind: 'cpf', value: '52998224725' })).toBe('529.982.247-25');
  });
});
