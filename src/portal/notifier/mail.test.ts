import { describe, expect, test } from 'vitest';
import type { NotifyEvent } from '../../notify/events.ts';
import { composeMail } from './mail.ts';

// What the topup.credited e-mail says of the top-up's nota fiscal (issue 28): the access key when
// the note was issued before the e-mail left, else that it is on its way; nothing without a note.

const KEY = '42054072211222333000181000000000000012611123456789';
const credited = (data: Record<string, unknown> = {}): NotifyEvent => ({
  id: 'msg_test0001',
  tenant_id: 'ten_x',
  type: 'topup.credited',
  data: { tenant_id: 'ten_x', charge_id: 'txid0001', amount: '37.500000', balance: '37.500000', ...data },
  created_at: new Date('2026-11-27T21:00:00Z'),
  published_at: null,
});
const SITE = 'https://portal.example/';

describe('the topup.credited e-mail and the nota fiscal', () => {
  test('issued before the e-mail left: its number and access key', async () => {
    const m = await composeMail(SITE, ['a@example.com'], 'Cliente', credited({ invoice_id: 'inv_1', access_key: null }), null, {
      state: 'issued',
      access_key: KEY,
      nfse_number: '17',
    });
    expect(m.subject).toBe('Recarga de R$ 37,50 creditada');
    expect(m.text.split('\n\n')).toEqual([
      'Recebemos o seu Pix de R$ 37,50 para Cliente. Saldo atual: R$ 37,50.',
      `Nota fiscal (NFS-e) 17 desta recarga emitida. Chave de acesso: ${KEY}. XML e PDF em Notas fiscais: https://portal.example/notas-fiscais`,
      'Você recebe este aviso como responsável ou financeiro de Cliente. Para escolher os avisos: https://portal.example/notifications',
    ]);
    expect(m.html).toContain(`<p>Nota fiscal (NFS-e) 17 desta recarga emitida. Chave de acesso: ${KEY}.`);
  });

  test('not issued yet (pending or rejected): on its way, the key in the invoice.issued notice', async () => {
    for (const state of ['pending', 'rejected']) {
      const m = await composeMail(SITE, ['a@example.com'], 'Cliente', credited({ invoice_id: 'inv_1', access_key: null }), null, {
        state,
        access_key: null,
        nfse_number: null,
      });
      expect(m.text.split('\n\n')[1]).toBe(
        'A nota fiscal (NFS-e) desta recarga está sendo emitida: a chave de acesso vem no aviso “Nota fiscal emitida” e fica em Notas fiscais: https://portal.example/notas-fiscais',
      );
    }
  });

  test('no note made for the top-up (issuing off, monthly notes): nothing about it', async () => {
    const m = await composeMail(SITE, ['a@example.com'], 'Cliente', credited(), null, null);
    expect(m.text).not.toContain('nota fiscal');
    expect(m.text.split('\n\n')).toHaveLength(2);
  });
});
