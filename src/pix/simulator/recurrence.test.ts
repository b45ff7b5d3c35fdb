import http from 'node:http';
import type { AddressInfo } from 'node:net';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { BcbPixAdapter } from '../bcb.ts';
import { hasValidCrc } from '../brcode.ts';
import { BcbRecurrenceApi } from '../recurrence.ts';
import { startPixSimulator, type PixSimulator } from './server.ts';

// Pix Automático through the production adapter against the simulator: journeys 2 and 3, push
// (journey 1), scheduled charges with the 2–10 days rule, failure and retries, cancellations.
describe('Pix Automático at the simulated PSP', () => {
  let sim: PixSimulator;
  let api: BcbRecurrenceApi;
  let bcb: BcbPixAdapter;
  let hooks: http.Server;
  const received: { path: string; body: unknown }[] = [];
  const account = { agencia: '0001', conta: '123456', tipoConta: 'CORRENTE' as const };
  const basic = `Basic ${Buffer.from('cid:csecret').toString('base64')}`;
  const simPost = async (path: string, body: unknown = {}) => {
    const res = await fetch(`${sim.url}${path}`, {
      method: 'POST',
      headers: { authorization: basic, 'content-type': 'application/json' },
      body: JSON.stringify(body),
    });
    return { status: res.status, body: (await res.json()) as Record<string, unknown> };
  };
  const addDays = (d: string, n: number) => new Date(Date.parse(`${d}T00:00:00Z`) + n * 86_400_000).toISOString().slice(0, 10);
  const newRec = async (policy: 'NAO_PERMITE' | 'PERMITE_3R_7D' = 'PERMITE_3R_7D') => {
    const loc = await api.createLocation();
    return api.createRecurrence({
      payer: { cpf: '12345678909', nome: 'Fulana de Tal' },
      contract: 'tenant-1',
      object: 'Recarga automática catraca',
      startDate: addDays(sim.rec.today(), 3),
      periodicity: 'SEMANAL',
      minReceiverMicros: 200_000_000n,
      retryPolicy: policy,
      locId: loc.id,
    });
  };

  beforeAll(async () => {
    hooks = http.createServer((req, res) => {
      let raw = '';
      req.on('data', (c) => (raw += c));
      req.on('end', () => {
        received.push({ path: req.url ?? '', body: JSON.parse(raw) });
        res.writeHead(200).end('{}');
      });
    });
    await new Promise<void>((r) => hooks.listen(0, '127.0.0.1', r));
    sim = await startPixSimulator({ clientId: 'cid', clientSecret: 'csecret', settleEveryMs: 0 });
    bcb = new BcbPixAdapter({
      baseUrl: sim.url,
      clientId: 'cid',
      clientSecret: 'csecret',
      chave: 'chave-x',
      webhookSecret: 's3cret',
      merchantName: 'CATRACA',
      merchantCity: 'SAO PAULO',
    });
    api = new BcbRecurrenceApi(bcb);
    await api.registerWebhooks(`http://127.0.0.1:${(hooks.address() as AddressInfo).port}/webhooks/pix/s3cret`);
  });
  afterAll(async () => {
    await sim?.close();
    hooks?.close();
  });

  it('journey 2: a recurrence QR, the payer authorizes, a charge is scheduled, rejected, retried and paid', async () => {
    const rec = await newRec();
    expect(rec).toMatchObject({ status: 'CRIADA', minReceiverMicros: 200_000_000n, retryPolicy: 'PERMITE_3R_7D' });
    expect(rec.idRec).toMatch(/^RR99999999\d{8}[a-zA-Z0-9]{11}$/);
    const withQr = await api.getRecurrence(rec.idRec);
    expect(withQr?.brCode).toMatch(/^000201.*80\d\d0014br\.gov\.bcb\.pix25\d\d.*\/qr\/v2\/rec\/[0-9a-f]{32}6304[0-9A-F]{4}$/);
    expect(hasValidCrc(withQr!.brCode!)).toBe(true);

    // the payer's own maximum may not be below valorMinimoRecebedor
    expect((await simPost(`/sim/rec/${rec.idRec}/autorizar`, { valorMaximo: '150.00' })).status).toBe(409);
    expect((await simPost(`/sim/rec/${rec.idRec}/autorizar`, { valorMaximo: '250.00' })).status).toBe(200);
    expect(await api.getRecurrence(rec.idRec)).toMatchObject({ status: 'APROVADA', journey: 'JORNADA_2', brCode: null });
    expect(received.at(-1)).toMatchObject({ path: '/webhooks/pix/s3cret/rec', body: { recs: [{ idRec: rec.idRec, status: 'APROVADA' }] } });

    const today = sim.rec.today();
    const txid = 'r'.repeat(32);
    await expect(api.createCharge({ txid, idRec: rec.idRec, dueDate: addDays(today, 1), amountMicros: 90_000_000n, account })).rejects.toThrow(/HTTP 400/);
    await expect(api.createCharge({ txid, idRec: rec.idRec, dueDate: addDays(today, 11), amountMicros: 90_000_000n, account })).rejects.toThrow(/HTTP 400/);
    const due = addDays(today, 3);
    const cobr = await api.createCharge({ txid, idRec: rec.idRec, dueDate: due, amountMicros: 90_000_000n, account, info: 'Recarga' });
    expect(cobr).toMatchObject({ txid, status: 'ATIVA', amountMicros: 90_000_000n, dueDate: due, attempts: [{ date: due, type: 'AGND', status: 'AGENDADA' }] });

    // nothing settles before the due date; on it, the payer's bank rejects once
    expect(await sim.rec.settleDue(addDays(today, 2))).toEqual({ paid: [], rejected: [], expired: [] });
    await simPost(`/sim/pagador/${rec.idRec}/falhas`, { n: 1 });
    sim.rec.dayOffset += 3;
    expect(await sim.rec.settleDue()).toEqual({ paid: [], rejected: [txid], expired: [] });
    const failed = await api.getCharge(txid);
    expect(failed).toMatchObject({ status: 'ATIVA', attempts: [{ status: 'REJEITADA', rejection: { code: 'AM02' } }] });
    await expect(api.retryCharge(txid, sim.rec.today())).rejects.toThrow(/HTTP 400/); // a later day only
    const retried = await api.retryCharge(txid, addDays(sim.rec.today(), 1));
    expect(retried.attempts.map((a) => [a.type, a.status])).toEqual([
      ['AGND', 'REJEITADA'],
      ['NTAG', 'AGENDADA'],
    ]);
    sim.rec.dayOffset += 1;
    expect((await sim.rec.settleDue()).paid).toEqual([txid]);
    const paid = await api.getCharge(txid);
    expect(paid?.status).toBe('CONCLUIDA');
    expect(paid?.pix).toHaveLength(1);
    expect(paid?.pix[0]).toMatchObject({ txid, valor: '90.00', amountMicros: 90_000_000n, endToEndId: retried.attempts[1].endToEndId });
    expect(received.at(-1)).toMatchObject({ path: '/webhooks/pix/s3cret/cobr', body: { cobsr: [{ txid, status: 'CONCLUIDA' }] } });
  });

  it('NAO_PERMITE: a rejected attempt ends the charge; the payer cancels at their bank', async () => {
    const rec = await newRec('NAO_PERMITE');
    expect(rec.idRec.startsWith('RN')).toBe(true);
    await simPost(`/sim/rec/${rec.idRec}/autorizar`, {});
    const txid = 'n'.repeat(32);
    await api.createCharge({ txid, idRec: rec.idRec, dueDate: addDays(sim.rec.today(), 2), amountMicros: 5_000_000n, account });
    expect((await simPost(`/sim/cobr/${txid}/falhar`)).body).toMatchObject({ status: 'REJEITADA' });
    await expect(api.retryCharge(txid, addDays(sim.rec.today(), 3))).rejects.toThrow(/HTTP 400/);

    const t2 = 'm'.repeat(32);
    await api.createCharge({ txid: t2, idRec: rec.idRec, dueDate: addDays(sim.rec.today(), 4), amountMicros: 5_000_000n, account });
    expect((await simPost(`/sim/rec/${rec.idRec}/cancelar`)).status).toBe(200);
    const ended = await api.getRecurrence(rec.idRec);
    expect(ended).toMatchObject({ status: 'CANCELADA', ended: { kind: 'cancelamento', by: 'USUARIO_PAGADOR', code: 'SLDB' } });
    expect((await api.getCharge(t2))?.status).toBe('CANCELADA');
    await expect(
      api.createCharge({ txid: 'p'.repeat(32), idRec: rec.idRec, dueDate: addDays(sim.rec.today(), 4), amountMicros: 5_000_000n, account }),
    ).rejects.toThrow(/HTTP 400/);
  });

  it('journey 3 (first payment in the same QR) and journey 1 (push to the payer bank); the receiver cancels', async () => {
    const cob = await bcb.createCharge({ txid: 'f'.repeat(32), amountMicros: 100_000_000n, expiresInS: 3600 });
    const loc = await api.createLocation();
    const rec = await api.createRecurrence({
      payer: { cnpj: '12ABC34501DE35', nome: 'Empresa X' },
      contract: 'tenant-2',
      object: 'Recarga automática catraca',
      startDate: addDays(sim.rec.today(), 7),
      periodicity: 'MENSAL',
      minReceiverMicros: 50_000_000n,
      retryPolicy: 'PERMITE_3R_7D',
      locId: loc.id,
      firstTxid: cob.txid,
    });
    const qr = await api.getRecurrence(rec.idRec, cob.txid);
    expect(qr?.brCode?.startsWith(cob.brCode.slice(0, -8))).toBe(true);
    expect(hasValidCrc(qr!.brCode!)).toBe(true);
    expect((await simPost(`/sim/rec/${rec.idRec}/autorizar`)).status).toBe(200);
    expect((await bcb.getCharge(cob.txid))?.status).toBe('CONCLUIDA');
    expect((await api.getRecurrence(rec.idRec))?.journey).toBe('JORNADA_3');

    const push = await api.createRecurrence({
      payer: { cpf: '12345678909', nome: 'Fulana' },
      contract: 'tenant-3',
      object: 'Recarga',
      startDate: addDays(sim.rec.today(), 7),
      periodicity: 'SEMANAL',
      minReceiverMicros: 10_000_000n,
      retryPolicy: 'NAO_PERMITE',
    });
    const solic = await api.requestConfirmation({
      idRec: push.idRec,
      expiresAt: new Date(Date.now() + 86_400_000),
      destinatario: { conta: '998877', agencia: '0001', ispbParticipante: '12345678', cpf: '12345678909' },
    });
    expect(solic).toMatchObject({ status: 'ENVIADA' });
    expect(solic.idSolicRec).toMatch(/^SC99999999\d{8}[a-zA-Z0-9]{11}$/);
    await simPost(`/sim/rec/${push.idRec}/autorizar`);
    expect((await api.getRecurrence(push.idRec))?.journey).toBe('JORNADA_1');
    expect(await api.cancelRecurrence(push.idRec)).toMatchObject({ status: 'CANCELADA', ended: { by: 'USUARIO_RECEBEDOR', code: 'SLCR' } });
  });

  it('authenticates callbacks by the URL secret and parses them', () => {
    const body = Buffer.from(JSON.stringify({ recs: [{ idRec: `RR99999999${'2'.repeat(8)}abcdefghijk`, status: 'CANCELADA' }] }));
    expect(api.verifyRecWebhook({ secret: 'nope', headers: {}, rawBody: body })).toEqual({ ok: false, reason: 'bad_secret' });
    expect(api.verifyRecWebhook({ secret: 's3cret', headers: {}, rawBody: body })).toMatchObject({ ok: true, recs: [{ status: 'CANCELADA' }] });
    expect(api.verifyCobrWebhook({ secret: 's3cret', headers: {}, rawBody: Buffer.from('{"cobsr":[]}') })).toMatchObject({ ok: false, reason: 'bad_body' });
  });
});
