import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createPool } from '../../src/db/pool.ts';
import { createTenant } from '../../src/db/tenants.ts';
import { getSetting, SETTINGS } from '../../src/pix/settings.ts';
import { crc16, hasValidCrc, isValidBrCode } from '../../src/pix/brcode.ts';
import { fromValor, parseUserAmount, toValor } from '../../src/pix/amount.ts';
import { httpRequest } from '../../src/pix/http.ts';
import { startPortal, type Portal } from '../../src/portal/server.ts';
import { paySimulatedCharge } from '../../src/pix/simulator/pay.ts';
import type { BcbPixAdapter } from '../../src/pix/bcb.ts';
import { PixService } from '../../src/pix/service.ts';
import { createApiKey } from '../../src/db/keys.ts';
import { admit, releaseHold } from '../../src/billing/ledger.ts';

const BCB_EXAMPLE = '00020126580014br.gov.bcb.pix0136123e4567-e12b-12d1-a456-4266554400005204000053039865802BR5913Fulano de Tal6008BRASILIA62070503***63041D3D';

describe('BR Code', () => {
  it('CRC16 matches the BCB example payload (…63041D3D)', () => {
    expect(crc16(BCB_EXAMPLE.slice(0, -4))).toBe('1D3D');
    expect(hasValidCrc(BCB_EXAMPLE)).toBe(true);
    expect(isValidBrCode(BCB_EXAMPLE)).toBe(true);
    expect(hasValidCrc(BCB_EXAMPLE.replace('Fulano', 'Fulana'))).toBe(false);
  });
  it('amounts: "123.45" strings ↔ micro-BRL; user input in pt-BR', () => {
    expect(toValor(50_000_000n)).toBe('50.00');
    expect(toValor(1_234_560_000n)).toBe('1234.56');
    expect(fromValor('0.01')).toBe(10_000n);
    expect(() => fromValor('1.5')).toThrow();
    expect(() => fromValor('1,50')).toThrow();
    expect(parseUserAmount('50,00')).toBe(50_000_000n);
    expect(parseUserAmount('1.234,56')).toBe(null); // no thousands separators (src/billing/amount-input.ts)
    expect(parseUserAmount('R$ 5')).toBe(5_000_000n);
    expect(parseUserAmount('5,001')).toBe(null);
    expect(parseUserAmount('5.001')).toBe(null); // ambiguous: 5001 in pt-BR, 5.001 in en-US
    expect(parseUserAmount('-5')).toBe(null);
    expect(parseUserAmount('abc')).toBe(null);
  });
});

describe('Pix through the BCB adapter against the simulator', () => {
  const db = createPool(process.env.DATABASE_URL!, 4);
  let portal: Portal;
  let secret: string;
  const balance = async (tenantId: string) => (await db.query('select balance_micros from tenants where id = $1', [tenantId])).rows[0].balance_micros as bigint;
  const events = async (txid: string) =>
    (await db.query('select outcome from pix_webhook_events where txid = $1 order by id', [txid])).rows.map((r) => r.outcome);
  const post = (path: string, body: unknown) =>
    httpRequest(`${portal.url}${path}`, { method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify(body) });

  beforeAll(async () => {
    portal = await startPortal({ db, nc: null, reconcileIntervalMs: 0, env: { PIX_PROVIDER: 'simulator' } });
    secret = (await getSetting(db, SETTINGS.webhookSecret))!;
  });
  afterAll(async () => {
    await portal?.close();
    await db.end();
  });

  it('creates a charge (PUT /cob), pays it, credits exactly once by endToEndId', async () => {
    const t = await createTenant(db, 'pix-a');
    const ch = await portal.pix.createTopUp(t.id, 50_000_000n);
    expect(ch.txid).toMatch(/^[a-f0-9]{32}$/);
    expect(ch.status).toBe('ATIVA');
    expect(isValidBrCode(ch.br_code)).toBe(true);
    expect(ch.br_code).toContain('br.gov.bcb.pix');
    const cob = await portal.pix.psp.getCharge(ch.txid);
    expect(cob?.amountMicros).toBe(50_000_000n);
    expect(cob?.status).toBe('ATIVA');

    const paid = await paySimulatedCharge(db, { txid: ch.txid, simulatorUrl: portal.simulator!.url });
    expect(paid.ok).toBe(true);
    expect(paid.delivered).toBe(true);
    expect(paid.endToEndId).toMatch(/^E99999999\d{12}[a-z0-9]{11}$/);
    expect(await balance(t.id)).toBe(50_000_000n);
    const row = (await db.query('select status, end_to_end_id from pix_charges where txid = $1', [ch.txid])).rows[0];
    expect(row).toEqual({ status: 'CONCLUIDA', end_to_end_id: paid.endToEndId });
    const ledger = (await db.query('select kind, amount_micros, source, external_id, note from ledger where tenant_id = $1', [t.id])).rows;
    expect(ledger).toEqual([{ kind: 'credit', amount_micros: 50_000_000n, source: 'pix', external_id: paid.endToEndId, note: ch.txid }]);

    // A redelivered webhook credits nothing more.
    const item = { endToEndId: paid.endToEndId, txid: ch.txid, valor: '50.00', horario: new Date().toISOString() };
    const r1 = await post(`/webhooks/pix/${secret}/pix`, { pix: [item] });
    const r2 = await post(`/webhooks/pix/${secret}/pix`, { pix: [item] });
    expect([r1.status, r2.status]).toEqual([200, 200]);
    expect(await balance(t.id)).toBe(50_000_000n);
    expect(await events(ch.txid)).toEqual(['credited', 'duplicate', 'duplicate']);
    // Paying again at the PSP is refused (the charge is CONCLUIDA).
    expect((await paySimulatedCharge(db, { txid: ch.txid, simulatorUrl: portal.simulator!.url })).status).toBe(409);
  });

  it('forged webhooks (bad secret, unknown txid, wrong amount) credit nothing and are logged', async () => {
    const t = await createTenant(db, 'pix-forged');
    const ch = await portal.pix.createTopUp(t.id, 20_000_000n);
    const e2e = 'E12345678202501011200abcdefghijk';
    const bad = await post(`/webhooks/pix/${'0'.repeat(64)}/pix`, {
      pix: [{ endToEndId: e2e, txid: ch.txid, valor: '20.00', horario: new Date().toISOString() }],
    });
    expect(bad.status).toBe(401);
    const noSecret = await post(`/webhooks/pix//pix`, { pix: [{ endToEndId: e2e, txid: ch.txid, valor: '20.00', horario: new Date().toISOString() }] });
    expect(noSecret.status).not.toBe(200);
    const unknown = await post(`/webhooks/pix/${secret}/pix`, {
      pix: [{ endToEndId: e2e, txid: 'a'.repeat(32), valor: '20.00', horario: new Date().toISOString() }],
    });
    expect(unknown.status).toBe(200);
    const wrong = await post(`/webhooks/pix/${secret}/pix`, { pix: [{ endToEndId: e2e, txid: ch.txid, valor: '2000.00', horario: new Date().toISOString() }] });
    expect(wrong.status).toBe(200);
    const malformed = await post(`/webhooks/pix/${secret}/pix`, { pix: [{ endToEndId: e2e, txid: ch.txid, valor: 20, horario: 'x' }] });
    expect(malformed.status).toBe(400);
    expect(await balance(t.id)).toBe(0n);
    expect((await db.query('select status from pix_charges where txid = $1', [ch.txid])).rows[0].status).toBe('ATIVA');
    expect(await events(ch.txid)).toEqual(['amount_mismatch']);
    expect(await events('a'.repeat(32))).toEqual(['unknown_txid']);
    const rejected = (await db.query(`select outcome from pix_webhook_events where outcome like 'rejected_%' order by id`)).rows.map((r) => r.outcome);
    // a wrong secret is anyone at all: counted and logged, never stored; a bad body came with the secret
    expect(rejected).not.toContain('rejected_bad_secret');
    expect(rejected).toContain('rejected_bad_body');
    // The simulator paying a different amount is refused too.
    const paidWrong = await paySimulatedCharge(db, { txid: ch.txid, valor: '19.99', simulatorUrl: portal.simulator!.url });
    expect(paidWrong.delivered).toBe(true);
    expect(await balance(t.id)).toBe(0n);
  });

  it('a webhook is a notice: a forged one for an unpaid charge credits nothing; a real payment credits exactly once', async () => {
    const t = await createTenant(db, 'pix-notice');
    const ch = await portal.pix.createTopUp(t.id, 30_000_000n);
    const forgedE2e = 'E99999999202501011200forgedpix01';
    const forged = { endToEndId: forgedE2e, txid: ch.txid, valor: '30.00', horario: new Date().toISOString() };
    // Valid path secret, right txid, right amount, well-formed endToEndId: the PSP says the charge is unpaid.
    const r = await post(`/webhooks/pix/${secret}/pix`, { pix: [forged] });
    expect(r.status).toBe(200);
    expect(await balance(t.id)).toBe(0n);
    expect((await db.query('select status, end_to_end_id from pix_charges where txid = $1', [ch.txid])).rows[0]).toEqual({
      status: 'ATIVA',
      end_to_end_id: null,
    });
    const audit = async () => (await db.query('select outcome, end_to_end_id, detail from pix_webhook_events where txid = $1 order by id', [ch.txid])).rows;
    expect(await audit()).toEqual([{ outcome: 'not_confirmed', end_to_end_id: forgedE2e, detail: 'webhook: PSP status ATIVA' }]);

    // The real payment (the simulator pays, then calls the webhook) is confirmed by GET /cob and credited once.
    const paid = await paySimulatedCharge(db, { txid: ch.txid, simulatorUrl: portal.simulator!.url });
    expect(paid).toMatchObject({ ok: true, delivered: true });
    expect(await balance(t.id)).toBe(30_000_000n);
    // The simulator reports exactly what was paid.
    const cob = await portal.pix.psp.getCharge(ch.txid);
    expect(cob?.status).toBe('CONCLUIDA');
    expect(cob?.pix.map((x) => ({ e2e: x.endToEndId, valor: x.valor, txid: x.txid }))).toEqual([{ e2e: paid.endToEndId, valor: '30.00', txid: ch.txid }]);

    // Now paid: a forged second payment (another endToEndId), a forged devolução, a replay of the forged one.
    expect((await post(`/webhooks/pix/${secret}/pix`, { pix: [{ ...forged, endToEndId: 'E99999999202501011200forgedpix02' }] })).status).toBe(200);
    const refund = { id: 'forged1', rtrId: 'D99999999202501011200forgedrtr1', valor: '30.00', status: 'DEVOLVIDO' };
    expect((await post(`/webhooks/pix/${secret}/pix`, { pix: [{ ...forged, endToEndId: paid.endToEndId, devolucoes: [refund] }] })).status).toBe(200);
    expect((await post(`/webhooks/pix/${secret}/pix`, { pix: [forged] })).status).toBe(200);
    // The real callback delivered again: a duplicate.
    expect((await post(`/webhooks/pix/${secret}/pix`, { pix: [{ ...forged, endToEndId: paid.endToEndId }] })).status).toBe(200);
    expect(await balance(t.id)).toBe(30_000_000n);
    expect((await db.query('select count(*)::int as n from pix_refunds where txid = $1', [ch.txid])).rows[0].n).toBe(0);
    const ledger = (await db.query('select kind, amount_micros, external_id from ledger where tenant_id = $1', [t.id])).rows;
    expect(ledger).toEqual([{ kind: 'credit', amount_micros: 30_000_000n, external_id: paid.endToEndId }]);
    expect((await audit()).map((e) => e.outcome)).toEqual(['not_confirmed', 'credited', 'not_confirmed', 'duplicate', 'not_confirmed', 'duplicate']);
    expect((await audit())[2].detail).toBe('webhook: the PSP has no Pix with this endToEndId for the charge');
  });

  it('a webhook the PSP cannot confirm right now is answered 503 (delivered again) and credits nothing', async () => {
    const t = await createTenant(db, 'pix-psp-down');
    const ch = await portal.pix.createTopUp(t.id, 10_000_000n);
    const real = portal.pix.psp;
    const down = Object.create(real) as typeof real;
    down.getCharge = async () => {
      throw new Error('connect ECONNREFUSED');
    };
    const svc = new PixService(db, down);
    const body = Buffer.from(
      JSON.stringify({ pix: [{ endToEndId: 'E99999999202501011200pspdown0001', txid: ch.txid, valor: '10.00', horario: new Date().toISOString() }] }),
    );
    const r = await svc.handleWebhook({ secret, headers: {}, rawBody: body });
    expect(r).toEqual({ status: 503, body: { error: 'psp unavailable, deliver again' } });
    expect(await balance(t.id)).toBe(0n);
    expect(await events(ch.txid)).toEqual(['psp_unavailable']);
  });

  it('reconciliation credits a payment whose webhook never came, and expires old charges', async () => {
    const t = await createTenant(db, 'pix-reconcile');
    const ch = await portal.pix.createTopUp(t.id, 7_500_000n);
    // Pay at the simulator with no webhook registered for our key (as if the callback was lost).
    await httpRequest(`${portal.simulator!.url}/webhook/catraca-simulador%40example.com`, { method: 'DELETE', headers: { authorization: 'Bearer x' } });
    const adapter = portal.pix.psp as BcbPixAdapter;
    await adapter.registerWebhook('http://127.0.0.1:9/unreachable'); // a dead endpoint: delivery fails
    const paid = await portal.simulator!.pay(ch.txid);
    expect(paid.status).toBe(200);
    expect((paid.body as { delivered: boolean }).delivered).toBe(false);
    expect(await balance(t.id)).toBe(0n);
    // a pass checks the 50 charges checked longest ago, of every test file's tenants: a few passes reach this one
    const reconcileUntil = async (done: () => Promise<boolean>) => {
      for (let pass = 0; pass < 100 && !(await done()); pass++) await portal.pix.reconcileOnce();
    };
    await reconcileUntil(async () => (await balance(t.id)) > 0n);
    expect(await balance(t.id)).toBe(7_500_000n);
    expect(await events(ch.txid)).toEqual(['credited']);
    await adapter.registerWebhook(`${portal.url}/webhooks/pix/${secret}`);

    const old = await portal.pix.createTopUp(t.id, 5_000_000n);
    await db.query(`update pix_charges set expires_at = now() - interval '1 second' where txid = $1`, [old.txid]);
    const status = async () => (await db.query('select status from pix_charges where txid = $1', [old.txid])).rows[0].status;
    await reconcileUntil(async () => (await status()) !== 'ATIVA');
    expect(await status()).toBe('EXPIRADA');
  });

  it('refund (devolução) debits once by (endToEndId, id), never below zero', async () => {
    const t = await createTenant(db, 'pix-refund');
    const ch = await portal.pix.createTopUp(t.id, 10_000_000n);
    const paid = await paySimulatedCharge(db, { txid: ch.txid, simulatorUrl: portal.simulator!.url });
    expect(await balance(t.id)).toBe(10_000_000n);
    const outcome = await portal.pix.requestRefund(ch.txid, 4_000_000n, 'dev1');
    expect(outcome).toBe('refunded');
    // The simulator's refund callback (same endToEndId, devolucoes DEVOLVIDO) arrives too: nothing more.
    await new Promise((r) => setTimeout(r, 500));
    expect(await balance(t.id)).toBe(6_000_000n);
    // Hold most of the balance (a request in flight), then a refund larger than what is available:
    // debit only what is available, record the shortfall.
    const key = await createApiKey(db, { tenantId: t.id, label: 'k' });
    const held = await admit(db, { requestId: `req-${t.id}`, tenantId: t.id, keyId: key.record.id, min: 5_000_000n, max: 5_000_000n, ttlMs: 60000 });
    expect(held.status).toBe('ok');
    const r2 = await portal.pix.applyRefund(paid.endToEndId!, { id: 'dev2', rtrId: null, amountMicros: 6_000_000n, status: 'DEVOLVIDO' }, 'webhook');
    expect(r2).toBe('shortfall');
    expect(await balance(t.id)).toBe(5_000_000n);
    await releaseHold(db, `req-${t.id}`);
    const rows = (
      await db.query(`select amount_micros, cost_micros, source, external_id from ledger where tenant_id = $1 and kind = 'debit' order by id`, [t.id])
    ).rows;
    expect(rows).toEqual([
      { amount_micros: 4_000_000n, cost_micros: 4_000_000n, source: 'pix_refund', external_id: `pix_refund:${paid.endToEndId}:dev1` },
      { amount_micros: 1_000_000n, cost_micros: 6_000_000n, source: 'pix_refund', external_id: `pix_refund:${paid.endToEndId}:dev2` },
    ]);
    expect(await portal.pix.applyRefund(paid.endToEndId!, { id: 'dev2', rtrId: null, amountMicros: 6_000_000n, status: 'DEVOLVIDO' }, 'webhook')).toBe(
      'duplicate',
    );
    expect(await portal.pix.applyRefund(paid.endToEndId!, { id: 'dev3', rtrId: null, amountMicros: 1_000_000n, status: 'DEVOLVIDO' }, 'webhook')).toBe(
      'exceeds_payment',
    );
  });

  it('top-up limits: min R$ 5,00, max R$ 5.000,00, whole centavos', async () => {
    const t = await createTenant(db, 'pix-limits');
    await expect(portal.pix.createTopUp(t.id, 4_990_000n)).rejects.toThrow('below_min');
    await expect(portal.pix.createTopUp(t.id, 5_000_010_000n)).rejects.toThrow('above_max');
    await expect(portal.pix.createTopUp(t.id, 5_000_001n)).rejects.toThrow('not_centavos');
    expect((await portal.pix.createTopUp(t.id, 5_000_000_000n)).amount_micros).toBe(5_000_000_000n);
  });
});
