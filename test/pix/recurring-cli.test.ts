// `catraca pix recurring run` and the tenant's own cancellation (issue 29), against a portal of
// this file's own: its NATS is a nats-server of its own (every portal of the run answers the run
// request on the shared one) and its database too. The CLI asks the portal over NATS, which runs
// the pass on its simulated clock and answers what it scheduled; the owner cancels on the
// "Recarga automática" page (CSRF as every form): the recurrence and its open charges end at the
// PSP and on the page, and no further charges follow; then asks for a new one by the payer's bank
// app (journey 1, no QR).
import type pg from 'pg';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { todayInSaoPaulo } from '../../src/billing/tenant-days.ts';
import { run as runCli } from '../../src/cli/main.ts';
import { createPool, withTransaction } from '../../src/db/pool.ts';
import { derivedRoleUrl } from '../../src/db/roles.ts';
import { httpRequest } from '../../src/pix/http.ts';
import { addDays } from '../../src/pix/recurring/projection.ts';
import { getSetting, SETTINGS } from '../../src/pix/settings.ts';
import { createSession, signUp } from '../../src/portal/auth.ts';
import { type Portal, startPortal } from '../../src/portal/server.ts';
import { type OwnDatabase, ownDatabase } from '../helpers/own-database.ts';
import { startStack, type TestStack } from '../helpers/stack.ts';
import { PortalClient } from '../portal/client.ts';

describe('catraca pix recurring run, and the tenant cancelling', () => {
  let own: OwnDatabase;
  let stack: TestStack;
  let admin: pg.Pool;
  let portalDb: pg.Pool;
  let portal: Portal;
  let offsetDays = 0;
  const DAY = 86_400_000;
  const clock = () => new Date(Date.now() + offsetDays * DAY);
  const moveDays = (n: number) => {
    offsetDays += n;
    portal.simulator!.rec.dayOffset += n;
  };
  const cli = async (...argv: string[]) => {
    let out = '';
    let err = '';
    const code = await runCli(argv, {
      env: { ...process.env, DATABASE_URL: own.url, NATS_URL: stack.natsUrl },
      stdout: (x) => (out += x),
      stderr: (x) => (err += x),
    });
    return { code, out, err };
  };

  beforeAll(async () => {
    own = await ownDatabase('reccli', { migrate: true });
    // a nats-server of its own, no door, worker or metering
    stack = await startStack({ gateways: 0, workers: 0, metering: false, databaseUrl: own.url });
    admin = createPool(own.url, 3);
    portalDb = createPool(derivedRoleUrl(own.url, 'portal'), 5);
    portal = await startPortal({ db: portalDb, nc: stack.nc, env: { PIX_PROVIDER: 'simulator' }, reconcileIntervalMs: 0, now: clock, nfse: false });
    expect(portal.recurring?.enabled).toBe(true);
  }, 90_000);

  afterAll(async () => {
    await portal?.close();
    await portalDb?.end();
    await admin?.end();
    await stack?.stop();
    await own?.drop();
  }, 60_000);

  it('schedules the period’s charge at the projection when its time comes, once; the owner cancels, its open charges end, nothing follows', async () => {
    const signed = await signUp(admin, { email: `rec.cli.${Date.now()}@example.com`, password: 'senha-da-recarga-123', ip: '198.51.100.21' });
    if (!signed.ok) throw new Error(signed.error);
    const tenantId = signed.user.tenant_id;
    // R$ 40,00 (a grant, its ledger row in the same transaction)
    await withTransaction(admin, async (c) => {
      await c.query(
        `insert into ledger (tenant_id, kind, amount_micros, balance_after_micros, source, note) values ($1, 'credit', 40000000, 40000000, 'grant', 'fixture')`,
        [tenantId],
      );
      await c.query('update tenants set balance_micros = 40000000 where id = $1', [tenantId]);
    });

    const rec = portal.recurring!;
    const r = await rec.create(tenantId, {
      periodicity: 'SEMANAL',
      targetMicros: 100_000_000n,
      maxMicros: 200_000_000n,
      payerDocument: '12345678909',
      payerName: 'Fulana de Tal',
    });
    const id = await getSetting(admin, SETTINGS.simulatorClientId);
    const sec = await getSetting(admin, SETTINGS.simulatorClientSecret);
    const authorized = await httpRequest(`${portal.simulator!.url}/sim/rec/${r.id_rec}/autorizar`, {
      method: 'POST',
      headers: { authorization: `Basic ${Buffer.from(`${id}:${sec}`).toString('base64')}`, 'content-type': 'application/json' },
      body: JSON.stringify({ valorMaximo: '200.00' }),
    });
    expect(authorized.status).toBe(200);
    const today = todayInSaoPaulo(clock());
    // the first period at once: no spend, R$ 40,00 → R$ 60,00 to the target
    expect((await rec.charges(r.id_rec)).map((c) => [c.amount_micros, c.due_date, c.status])).toEqual([[60_000_000n, addDays(today, 3), 'ATIVA']]);

    // 4 days on, the next period (due today + 10) is 6 days away: not yet
    moveDays(4);
    const early = await cli('pix', 'recurring', 'run', '--json');
    expect(early.code, early.err).toBe(0);
    expect(JSON.parse(early.out)).toEqual({ ok: true, checked: 0, failed: 0, scheduled: [] });
    // 3 days more, 3 days before it: scheduled, the charge of the first period unpaid, R$ 40,00 → R$ 60,00
    moveDays(3);
    const due = await cli('pix', 'recurring', 'run', '--json');
    expect(due.code, due.err).toBe(0);
    const answer = JSON.parse(due.out);
    expect(answer).toEqual({
      ok: true,
      checked: 1,
      failed: 0,
      scheduled: [
        {
          id_rec: r.id_rec,
          tenant_id: tenantId,
          due_date: addDays(today, 10),
          txid: expect.stringMatching(/^[a-zA-Z0-9]{26,35}$/),
          amount_micros: '60000000',
          projected_micros: '40000000',
          rule: 'projection',
        },
      ],
    });
    expect((await rec.api.getCharge(answer.scheduled[0].txid))?.amountMicros).toBe(60_000_000n);
    const human = await cli('pix', 'recurring', 'run');
    expect(human.code, human.err).toBe(0);
    expect(human.out).toBe('0 recurrence(s) due, 0 period(s) handled, 0 failed\n'); // once per period

    // the owner cancels on the page: PATCH /rec at the PSP, which ends the open charges with it
    const session = await createSession(admin, signed.user.id);
    const client = new PortalClient(portal.url);
    client.cookies.set('catraca_session', session.token);
    const page = await client.get('/topup/auto');
    expect(page.text).toContain('data-testid="auto-status">Ativa</span>');
    expect((await client.post('/topup/auto/cancel', {})).status).toBe(403); // no CSRF token
    expect((await rec.current(tenantId))?.status).toBe('APROVADA');
    expect(await client.post('/topup/auto/cancel', { _csrf: PortalClient.csrf(page.text) })).toMatchObject({ status: 303, location: '/topup/auto' });
    expect(await rec.current(tenantId)).toMatchObject({ status: 'CANCELADA', ended_by: 'USUARIO_RECEBEDOR', ended_code: 'SLCR' });
    await expect.poll(async () => (await rec.charges(r.id_rec)).map((c) => c.status)).toEqual(['CANCELADA', 'CANCELADA']);
    const after = await client.get('/topup/auto');
    expect(after.text).toContain('data-testid="auto-status">Cancelada</span>');
    expect(after.text).toContain('Cancelada por você (SLCR)');
    moveDays(7);
    expect(JSON.parse((await cli('pix', 'recurring', 'run', '--json')).out)).toEqual({ ok: true, checked: 0, failed: 0, scheduled: [] });
    expect(await rec.charges(r.id_rec)).toHaveLength(2);

    // a new one by the payer's bank app (journey 1): the form's optional account fields
    const form = {
      _csrf: PortalClient.csrf(after.text),
      periodicity: 'SEMANAL',
      target: '100,00',
      max: '200,00',
      document: '123.456.789-09',
      name: 'Fulana de Tal',
      first: '',
      ispb: '12345678',
      agency: '0001',
      account: '998877',
    };
    const badAccount = await client.post('/topup/auto', { ...form, ispb: '123' });
    expect(badAccount.status).toBe(400);
    expect(badAccount.text).toContain('Conta do pagador inválida');
    expect(await client.post('/topup/auto', form)).toMatchObject({ status: 303, location: '/topup/auto' });
    expect(await rec.current(tenantId)).toMatchObject({ status: 'CRIADA', journey: 'JORNADA_1', br_code: null });
    const pushed = await client.get('/topup/auto');
    expect(pushed.text).toContain('data-testid="auto-status">Aguardando autorização</span>');
    expect(pushed.text).toContain('<p data-testid="auto-push-sent">Pedido enviado ao banco do pagador: a recorrência é autorizada no app do banco.</p>');
    expect(pushed.text).not.toContain('data-testid="auto-qr"');
  });
});
