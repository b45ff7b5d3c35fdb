import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { todayInSaoPaulo } from '../../src/billing/tenant-days.ts';
import { createPool } from '../../src/db/pool.ts';
import { createTenant } from '../../src/db/tenants.ts';
import { hasValidCrc } from '../../src/pix/brcode.ts';
import { addDays } from '../../src/pix/recurring/projection.ts';
import { getSetting, SETTINGS } from '../../src/pix/settings.ts';
import { httpRequest } from '../../src/pix/http.ts';
import { paySimulatedCharge } from '../../src/pix/simulator/pay.ts';
import type { Mail } from '../../src/mail/index.ts';
import type { DeliveryRow } from '../../src/notify/deliveries.ts';
import { sendEventMail } from '../../src/portal/notifier/mail.ts';
import { startPortal, type Portal } from '../../src/portal/server.ts';

// Recurring top-ups end to end against the Pix simulator, the portal's service and a real
// database: authorization by webhook, the scheduled charge's amount from a known spend rate on a
// simulated clock (both sides' calendars moved together), credit once, failure → event → retry,
// cancellation by the payer.
describe('recurring top-ups (Pix Automático)', () => {
  const db = createPool(process.env.DATABASE_URL!, 4);
  let portal: Portal;
  let secret: string;
  let offsetDays = 0;
  const DAY = 86_400_000;
  const clock = () => new Date(Date.now() + offsetDays * DAY);
  const moveDays = (n: number) => {
    offsetDays += n;
    portal.simulator!.rec.dayOffset += n;
  };
  const simPost = async (path: string, body: unknown = {}) => {
    const id = await getSetting(db, SETTINGS.simulatorClientId);
    const sec = await getSetting(db, SETTINGS.simulatorClientSecret);
    const res = await httpRequest(`${portal.simulator!.url}${path}`, {
      method: 'POST',
      headers: { authorization: `Basic ${Buffer.from(`${id}:${sec}`).toString('base64')}`, 'content-type': 'application/json' },
      body: JSON.stringify(body),
    });
    return { status: res.status, body: res.json as Record<string, unknown> };
  };
  const balance = async (t: string) => (await db.query('select balance_micros from tenants where id = $1', [t])).rows[0].balance_micros as bigint;
  /** A tenant whose balance is `balance` and who spent `perDay` on each of the last 7 days (ledger debits of requests). */
  const spend = async (c: { query: typeof db.query }, tenantId: string, perDayMicros: bigint) => {
    for (let d = 1; d <= 7; d++) {
      await c.query(
        `insert into ledger (tenant_id, kind, amount_micros, balance_after_micros, source, request_id, created_at)
         values ($1, 'debit', $2, 0, 'request', $3, $4::timestamptz - make_interval(hours => $5))`,
        [tenantId, perDayMicros, `req_${tenantId}_${offsetDays}_${d}`, clock(), d * 24 - 12],
      );
    }
  };
  /**
   * Seven days of spend, then the balance, the way the ledger check expects (other test files
   * check the whole ledger meanwhile): one transaction, closed by the grant or adjustment that
   * brings Σ ledger to the balance.
   */
  const spendThenBalance = async (tenantId: string, perDayMicros: bigint, balanceMicros: bigint) => {
    const c = await db.connect();
    try {
      await c.query('begin');
      await spend(c, tenantId, perDayMicros);
      const { rows } = await c.query(
        `select coalesce(sum(case when kind = 'credit' then amount_micros else -amount_micros end), 0)::bigint as sum
           from ledger where tenant_id = $1`,
        [tenantId],
      );
      const diff = balanceMicros - BigInt(rows[0].sum);
      await c.query(`insert into ledger (tenant_id, kind, amount_micros, balance_after_micros, source, note) values ($1, $2, $3, $4, $5, 'test fixture')`, [
        tenantId,
        diff >= 0n ? 'credit' : 'debit',
        diff >= 0n ? diff : -diff,
        balanceMicros,
        diff >= 0n ? 'grant' : 'adjustment',
      ]);
      await c.query('update tenants set balance_micros = $2 where id = $1', [tenantId, balanceMicros]);
      await c.query('commit');
    } catch (err) {
      await c.query('rollback');
      throw err;
    } finally {
      c.release();
    }
  };
  const tenantWithSpend = async (name: string, balanceMicros: bigint, perDayMicros: bigint) => {
    const t = await createTenant(db, name);
    await spendThenBalance(t.id, perDayMicros, balanceMicros);
    return t;
  };

  beforeAll(async () => {
    portal = await startPortal({ db, nc: null, reconcileIntervalMs: 0, env: { PIX_PROVIDER: 'simulator' }, now: clock });
    secret = (await getSetting(db, SETTINGS.webhookSecret))!;
    expect(portal.recurring?.enabled).toBe(true);
  });
  afterAll(async () => {
    await portal?.close();
    await db.end();
  });

  it('authorizes a weekly recurrence, charges the projection to the centavo, credits once, retries a failure, stops on the payer cancelling', async () => {
    const rec = portal.recurring!;
    // R$ 40,00 now, R$ 10,00 a day for the last 7 days: due in 3 days, 40 − 30 = 10 → R$ 90,00 brings it to R$ 100,00
    const t = await tenantWithSpend('rec-a', 40_000_000n, 10_000_000n);
    const r = await rec.create(t.id, {
      periodicity: 'SEMANAL',
      targetMicros: 100_000_000n,
      maxMicros: 200_000_000n,
      payerDocument: '123.456.789-09',
      payerName: 'Fulana de Tal',
    });
    expect(r).toMatchObject({
      tenant_id: t.id,
      status: 'CRIADA',
      journey: 'JORNADA_2',
      payer_document: '12345678909',
      max_micros: 200_000_000n,
      target_micros: 100_000_000n,
    });
    expect(hasValidCrc(r.br_code!)).toBe(true);
    await expect(
      rec.create(t.id, { periodicity: 'MENSAL', targetMicros: 1_000_000n, maxMicros: 1_000_000n, payerDocument: '12345678909', payerName: 'X' }),
    ).rejects.toThrow('live_exists');

    // the payer authorizes at their bank (maximum R$ 200,00): webhook /rec → APROVADA → the first charge at once
    expect((await simPost(`/sim/rec/${r.id_rec}/autorizar`, { valorMaximo: '200.00' })).status).toBe(200);
    const today = todayInSaoPaulo(clock());
    const after = await rec.current(t.id);
    expect(after).toMatchObject({ status: 'APROVADA', next_due_date: addDays(today, 3 + 7) });
    const [first] = await rec.charges(r.id_rec);
    expect(first).toMatchObject({ amount_micros: 90_000_000n, due_date: addDays(today, 3), status: 'ATIVA' });
    expect((await rec.api.getCharge(first.txid))?.amountMicros).toBe(90_000_000n);

    // due date: settles → webhook /cobr → confirmed with GET /cobr → credited once
    moveDays(3);
    expect((await portal.simulator!.rec.settleDue()).paid).toEqual([first.txid]);
    expect(await balance(t.id)).toBe(130_000_000n);
    const credits = async () =>
      (await db.query(`select amount_micros, source, note from ledger where tenant_id = $1 and kind = 'credit' and source = 'pix' order by id`, [t.id])).rows;
    expect(await credits()).toEqual([{ amount_micros: 90_000_000n, source: 'pix', note: first.txid }]);
    // the PSP repeats its callback, and `catraca pix pay` on a paid charge: nothing more
    const cobrs = { cobsr: [{ idRec: r.id_rec, txid: first.txid, status: 'CONCLUIDA' }] };
    const again = await httpRequest(`${portal.url}/webhooks/pix/${secret}/cobr`, {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: JSON.stringify(cobrs),
    });
    expect(again.status).toBe(200);
    expect((await paySimulatedCharge(db, { txid: first.txid })).ok).toBe(false);
    expect(await balance(t.id)).toBe(130_000_000n);
    expect(await credits()).toHaveLength(1);
    const topups = (await db.query(`select type, data->>'charge_id' as txid from notify_events where tenant_id = $1 and type = 'topup.credited'`, [t.id])).rows;
    expect(topups).toEqual([{ type: 'topup.credited', txid: first.txid }]);
    // a wrong secret is refused
    expect((await httpRequest(`${portal.url}/webhooks/pix/nope/cobr`, { method: 'POST', body: JSON.stringify(cobrs) })).status).toBe(401);

    // next period, 4 days later (3 before its due date): the first week's debits are out of the
    // window; R$ 7,00 a day since; R$ 20,00 left → 20 − ceil(49 × 3 / 7) = −1 → R$ 101,00
    moveDays(4);
    await spendThenBalance(t.id, 7_000_000n, 20_000_000n);
    const pass = await rec.runOnce();
    expect(pass.scheduled).toHaveLength(1);
    const second = pass.scheduled[0];
    expect(second.dueDate).toBe(addDays(today, 10));
    expect(second.projection).toEqual({ expectedSpendMicros: 21_000_000n, projectedMicros: -1_000_000n, amountMicros: 101_000_000n, rule: 'projection' });
    expect(await rec.runOnce()).toMatchObject({ checked: 0, scheduled: [] }); // once per period

    // the payer's bank rejects it on the due date: topup.recurring_failed, a retry the next day, then paid
    await simPost(`/sim/pagador/${r.id_rec}/falhas`, { n: 1 });
    moveDays(3);
    expect((await portal.simulator!.rec.settleDue()).rejected).toEqual([second.txid]);
    const failed = (await db.query(`select data from notify_events where tenant_id = $1 and type = 'topup.recurring_failed'`, [t.id])).rows;
    expect(failed).toEqual([
      {
        data: expect.objectContaining({
          charge_id: second.txid,
          recurrence_id: r.id_rec,
          amount: '101.000000',
          attempt: 1,
          will_retry: true,
          due_date: addDays(today, 10),
        }),
      },
    ]);
    expect((await db.query('select status, failures from pix_charges where txid = $1', [second.txid])).rows[0]).toEqual({ status: 'ATIVA', failures: 1 });
    // its e-mail to the owner: a one-off Pix of the charge's amount, ready to pay at once, and the top-up page
    const owner = `dono.${t.id}@example.com`;
    await db.query(`insert into portal_users (id, tenant_id, email, password_hash, role, email_verified_at) values ($1, $2, $3, 'x', 'owner', now())`, [
      `usr_${t.id}`,
      t.id,
      owner,
    ]);
    const event = (await db.query(`select * from notify_events where tenant_id = $1 and type = 'topup.recurring_failed'`, [t.id])).rows[0];
    // (a delivery row of its own, marked delivered: no notifier of another file claims it)
    let delivery = (
      await db.query(`insert into notify_deliveries (event_id, tenant_id, channel, state) values ($1, $2, 'email', 'delivered') returning *`, [event.id, t.id])
    ).rows[0] as DeliveryRow;
    const sent: Mail[] = [];
    const mailer = { configured: true, sendMail: async (m: Mail) => void sent.push(m), close() {} };
    const mailDeps = { db, mailer, pix: portal.pix, site: { url: 'https://portal.example' } };
    expect(await sendEventMail(mailDeps, delivery, event)).toEqual({ error: null });
    delivery = (await db.query('select * from notify_deliveries where id = $1', [delivery.id])).rows[0];
    const offered = (await db.query('select amount_micros, status, id_rec, br_code from pix_charges where txid = $1', [delivery.pix_txid])).rows[0];
    expect(offered).toMatchObject({ amount_micros: 101_000_000n, status: 'ATIVA', id_rec: null });
    expect(sent[0]).toMatchObject({ to: [owner], subject: 'Recarga automática de R$ 101,00 não paga' });
    const mailText = String(sent[0].text);
    expect(mailText).toContain(
      'A cobrança Pix Automático de R$ 101,00 para rec-a não foi paga pelo banco do pagador. Para recarregar agora, pague um Pix avulso.',
    );
    expect(mailText).toContain('Para adicionar R$ 101,00 agora, pague este Pix até');
    expect(mailText).toContain(`Pix copia e cola:\n\n${offered.br_code}`);
    expect(mailText).toContain('Adicionar saldo no portal: https://portal.example/topup');
    // a retry of the delivery sends the same charge
    expect(await sendEventMail(mailDeps, delivery, event)).toEqual({ error: null });
    expect(String(sent[1].text)).toContain(offered.br_code);
    expect((await db.query('select count(*)::int as n from pix_charges where tenant_id = $1 and id_rec is null', [t.id])).rows[0].n).toBe(1);
    const retried = await rec.api.getCharge(second.txid ?? '');
    expect(retried?.attempts.map((a) => [a.type, a.status, a.date])).toEqual([
      ['AGND', 'REJEITADA', addDays(today, 10)],
      ['NTAG', 'AGENDADA', addDays(today, 11)],
    ]);
    moveDays(1);
    expect((await portal.simulator!.rec.settleDue()).paid).toEqual([second.txid]);
    expect(await balance(t.id)).toBe(121_000_000n);

    // the payer cancels at their bank: webhook /rec → Cancelada; no further charges
    expect((await simPost(`/sim/rec/${r.id_rec}/cancelar`)).status).toBe(200);
    await expect.poll(async () => (await rec.current(t.id))?.status).toBe('CANCELADA');
    expect(await rec.current(t.id)).toMatchObject({ status: 'CANCELADA', ended_by: 'USUARIO_PAGADOR', ended_code: 'SLDB' });
    moveDays(7);
    expect(await rec.runOnce()).toMatchObject({ checked: 0, scheduled: [] });
    expect(await rec.charges(r.id_rec)).toHaveLength(2);
    // and a new one may be made
    const next = await rec.create(t.id, {
      periodicity: 'MENSAL',
      targetMicros: 50_000_000n,
      maxMicros: 60_000_000n,
      payerDocument: '12345678909',
      payerName: 'Fulana',
    });
    expect(next.status).toBe('CRIADA');
  });

  it('no charge when the balance is expected to stay above the target; capped at the maximum; journey 3 carries a first payment', async () => {
    const rich = await tenantWithSpend('rec-b', 500_000_000n, 1_000_000n);
    const a = await portal.recurring!.create(rich.id, {
      periodicity: 'SEMANAL',
      targetMicros: 100_000_000n,
      maxMicros: 50_000_000n,
      payerDocument: '12345678909',
      payerName: 'A',
    });
    await simPost(`/sim/rec/${a.id_rec}/autorizar`);
    expect(await portal.recurring!.charges(a.id_rec)).toEqual([]);

    const poor = await tenantWithSpend('rec-c', 0n, 100_000_000n);
    const b = await portal.recurring!.create(poor.id, {
      periodicity: 'SEMANAL',
      targetMicros: 100_000_000n,
      maxMicros: 50_000_000n,
      payerDocument: '12.ABC.345/01DE-35',
      payerName: 'Empresa',
      firstAmountMicros: 25_000_000n,
    });
    expect(b).toMatchObject({ journey: 'JORNADA_3', payer_document: '12ABC34501DE35' });
    const cob = await portal.pix.getCharge(b.first_txid ?? '', poor.id);
    expect(b.br_code!.startsWith(cob!.br_code.slice(0, -8))).toBe(true);
    await simPost(`/sim/rec/${b.id_rec}/autorizar`);
    expect(await balance(poor.id)).toBe(25_000_000n); // the first payment, credited by its /pix callback
    expect(await portal.recurring!.charges(b.id_rec)).toMatchObject([{ amount_micros: 50_000_000n }]);
  });

  it('journey 1: no QR, a request pushed to the payer’s bank (POST /solicrec); authorized there, charged like the others', async () => {
    const rec = portal.recurring!;
    const t = await tenantWithSpend('rec-d', 30_000_000n, 0n);
    const base = { periodicity: 'MENSAL' as const, targetMicros: 80_000_000n, maxMicros: 100_000_000n, payerDocument: '123.456.789-09', payerName: 'Fulana' };
    // an account that is no account, or a push with a first payment: refused, nothing at the PSP
    await expect(rec.create(t.id, { ...base, push: { ispb: '1234', account: '998877' } })).rejects.toThrow('bad_push');
    await expect(rec.create(t.id, { ...base, push: { ispb: '12345678', account: '99-88x' } })).rejects.toThrow('bad_push');
    await expect(rec.create(t.id, { ...base, firstAmountMicros: 10_000_000n, push: { ispb: '12345678', account: '998877' } })).rejects.toThrow('bad_push');
    expect(await rec.current(t.id)).toBeNull();

    const r = await rec.create(t.id, { ...base, push: { ispb: '12345678', agency: '0001', account: '99887-7' } });
    expect(r).toMatchObject({ status: 'CRIADA', journey: 'JORNADA_1', br_code: null, location: null, payer_document: '12345678909' });
    const sent = [...portal.simulator!.rec.solicitacoes.values()].filter((x) => x.idRec === r.id_rec);
    expect(sent.map((x) => [x.status, (x.body as { destinatario: unknown }).destinatario])).toEqual([
      ['ENVIADA', { cpf: '12345678909', ispbParticipante: '12345678', conta: '998877', agencia: '0001' }],
    ]);
    await simPost(`/sim/rec/${r.id_rec}/autorizar`);
    expect(await rec.current(t.id)).toMatchObject({ status: 'APROVADA', journey: 'JORNADA_1' });
    // R$ 30,00, no spend: R$ 50,00 to the R$ 80,00 target
    expect((await rec.charges(r.id_rec)).map((c) => c.amount_micros)).toEqual([50_000_000n]);
  });
});
