// Notifications end to end (issue 20): a real stack (front door, worker, metering on NATS/JetStream
// and PostgreSQL), the portal in-process with its notifier (connected as catraca_portal), the Pix
// simulator, the SMTP sink, and real HTTP receivers that verify every signature with the reference
// implementation. The only notifier of the run lives in this file (deliveries are claimed from the
// shared database): the SSRF tests (ssrf.test.ts) use the sender alone.
import type { NatsConnection } from 'nats';
import type pg from 'pg';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { formatBrl } from '../../src/billing/money.ts';
import { connectBus } from '../../src/bus/connect.ts';
import { NOTIFY_DURABLE, NOTIFY_STREAM } from '../../src/bus/subjects.ts';
import { run as runCli } from '../../src/cli/main.ts';
import { createApiKey } from '../../src/db/keys.ts';
import { upsertModel } from '../../src/db/models.ts';
import { createPool } from '../../src/db/pool.ts';
import { configureLogging } from '../../src/log.ts';
import { Webhook } from 'standardwebhooks';
import { type MailSink, type SinkMessage, startMailSink } from '../../src/mail/sink.ts';
import { settle } from '../../src/billing/ledger.ts';
import { checkBalances, reconcileNotifications } from '../../src/notify/events.ts';
import { getSetting, SETTINGS } from '../../src/pix/settings.ts';
import { createEndpoint } from '../../src/notify/settings.ts';
import { hasValidCrc, isValidBrCode, qrPng } from '../../src/pix/brcode.ts';
import { paySimulatedCharge } from '../../src/pix/simulator/pay.ts';
import { type Portal, startPortal } from '../../src/portal/server.ts';
import { createHash } from 'node:crypto';
import { startStack, type TestStack } from '../helpers/stack.ts';
import { PortalClient, sinkMailbox } from '../portal/client.ts';
import { type Receiver, startReceiver, until } from './receiver.ts';

let stack: TestStack;
let sink: MailSink;
let portalDb: pg.Pool;
let portalNc: NatsConnection;
let portal: Portal;
let receiver: Receiver;
let client: PortalClient;
const owner = { email: `owner.${Date.now()}@example.com`, tenantId: '' };
const ALL = ['balance.low', 'balance.depleted', 'topup.credited', 'key.limit_reached', 'key.revoked', 'key.expiring'];
/** 0.1 BRL per output token: a request with sim.output_tokens 10 costs R$ 1,00 plus a few µBRL of input. */
const PRICEY = { id: 'notify/pricey', pool: 'sim', upstream_model: 'lorem', input_price: 1_000_000n, output_price: 100_000_000_000n, name: 'Pricey' };

const startNotifyingPortal = () =>
  startPortal({
    db: portalDb,
    nc: portalNc,
    reconcileIntervalMs: 0,
    signupLimitPerHour: 1000,
    devMode: true,
    env: { PIX_PROVIDER: 'simulator', SMTP_URL: sink.url, SMTP_FROM: 'catraca <no-reply@catraca.test>' },
    notifier: {
      allowPrivate: true,
      schedule: [400, 800, 1500, 3000, 3000, 3000],
      jitter: false,
      pollIntervalMs: 100,
      relayIntervalMs: 300,
      relayAfterMs: 300,
      scanIntervalMs: 500,
    },
  });

/** This process's log lines (the portal and its notifier run here): no secret may ever be in one. */
const logLines: string[] = [];
const secretsShown: string[] = [];

beforeAll(async () => {
  configureLogging({ level: 'info', write: (line) => void logLines.push(line) });
  stack = await startStack({ gateways: 1, workers: 1 });
  await upsertModel(stack.db, PRICEY);
  sink = await startMailSink();
  portalDb = createPool(stack.roleUrl('portal'), 5);
  portalNc = await connectBus(stack.natsUrl, 'test-portal');
  portal = await startNotifyingPortal();
  receiver = await startReceiver();
  client = new PortalClient(portal.url, {}, { mailbox: sinkMailbox(sink) });
  expect((await client.signUp(owner.email)).status).toBe(303);
  owner.tenantId = (await stack.db.query('select tenant_id from portal_users where email = $1', [owner.email])).rows[0].tenant_id;
}, 90000);

afterAll(async () => {
  await portal?.close();
  await receiver?.close();
  await sink?.close();
  await portalNc?.drain();
  await portalDb?.end();
  await stack?.stop();
});

const events = async (tenantId: string, type: string) =>
  (await stack.db.query('select id, data from notify_events where tenant_id = $1 and type = $2 order by created_at', [tenantId, type])).rows as Array<{
    id: string;
    data: Record<string, unknown>;
  }>;
const balance = async (tenantId: string) =>
  (await stack.db.query('select balance_micros from tenants where id = $1', [tenantId])).rows[0].balance_micros as bigint;
const mailsTo = (to: string, subject: RegExp) => sink.messages().filter((m) => m.to.includes(to) && subject.test(m.subject));

async function chat(key: string, model: string, extra: Record<string, unknown> = {}) {
  const res = await fetch(`${stack.baseUrl}/chat/completions`, {
    method: 'POST',
    headers: { authorization: `Bearer ${key}`, 'content-type': 'application/json', 'x-request-id': `req_notify_${Math.random().toString(36).slice(2)}` },
    body: JSON.stringify({ model, messages: [{ role: 'user', content: 'um dois' }], ...extra }),
  });
  const body = (await res.json()) as { id?: string };
  expect(res.status, JSON.stringify(body)).toBe(200);
  return body;
}

/** A pricey request, settled, and the balance after it (the ledger's). */
async function spendOneReal(key: string): Promise<bigint> {
  const before = (await stack.db.query('select count(*)::int as n from ledger where tenant_id = $1', [owner.tenantId])).rows[0].n as number;
  await chat(key, PRICEY.id, { sim: { output_tokens: 10 } });
  await until(
    'the request settled',
    async () => (await stack.db.query('select count(*)::int as n from ledger where tenant_id = $1', [owner.tenantId])).rows[0].n > before,
  );
  // the notification check runs right after the commit; give it its moment
  await new Promise((r) => setTimeout(r, 400));
  return balance(owner.tenantId);
}

async function topUpByPix(amount: string): Promise<string> {
  const token = await client.csrfOf('/topup');
  const r = await client.post('/topup', { _csrf: token, amount });
  expect(r.status).toBe(303);
  const txid = r.location!.split('/').pop()!;
  expect((await paySimulatedCharge(stack.db, { txid, simulatorUrl: portal.simulator!.url })).delivered).toBe(true);
  return txid;
}

describe('the Notifications page', () => {
  it('adds an endpoint and shows its secret once; saves the threshold and the e-mailed events', async () => {
    const token = await client.csrfOf('/notifications');
    const add = await client.post('/notifications/endpoints', { _csrf: token, url: receiver.url, events: ALL });
    expect(add.status).toBe(303);
    expect(add.location).toMatch(/^\/notifications\?secret=[A-Za-z0-9_-]{22}$/);
    const shown = await client.get(add.location!);
    const secret = /value="(whsec_[A-Za-z0-9+/=]+)" data-testid="webhook-secret"/.exec(shown.text)?.[1];
    expect(secret).toMatch(/^whsec_[A-Za-z0-9+/]{43}=$/);
    receiver.secrets = [secret!];
    secretsShown.push(secret!);
    const again = await client.get(add.location!);
    expect(again.text).not.toContain(secret!);
    expect(again.text).toContain('O segredo já foi mostrado');
    // the secret is stored to sign, never shown on the page again
    expect((await client.get('/notifications')).text).not.toContain(secret!);
    const saved = await client.post('/notifications/settings', { _csrf: token, threshold: '4,00', email_events: ALL });
    expect(saved.status).toBe(303);
    const bad = await client.post('/notifications/settings', { _csrf: token, threshold: '4,001', email_events: ALL });
    expect(bad.status).toBe(400);
    expect(bad.text).toContain('Informe o aviso de saldo baixo em reais');
    // saving fires nothing: the balance (R$ 0,00) is below already, so the warning waits for the next crossing
    const { rows } = await stack.db.query('select low_balance_micros, email_events, low_fired, depleted_fired from notify_tenants where tenant_id = $1', [
      owner.tenantId,
    ]);
    expect(rows).toEqual([{ low_balance_micros: 4_000_000n, email_events: ALL, low_fired: true, depleted_fired: true }]);
    expect((await stack.db.query('select count(*)::int as n from notify_events where tenant_id = $1', [owner.tenantId])).rows[0].n).toBe(0);
  });
});

describe('balance.low and topup.credited', () => {
  let key: string;
  let lowMail: SinkMessage;

  it('topup.credited once per Pix, signed, with exact BRL strings; e-mailed in pt-BR', async () => {
    const txid = await topUpByPix('5,00');
    await until('topup.credited delivered', () => receiver.verified('topup.credited').length === 1);
    const got = receiver.verified('topup.credited')[0];
    const e2e = (await stack.db.query('select end_to_end_id from pix_charges where txid = $1', [txid])).rows[0].end_to_end_id;
    expect(got.event).toEqual({
      type: 'topup.credited',
      timestamp: expect.stringMatching(/^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z$/),
      data: { tenant_id: owner.tenantId, charge_id: txid, end_to_end_id: e2e, amount: '5.000000', balance: '5.000000', paid_at: expect.any(String) },
    });
    expect(got.id).toBe((await events(owner.tenantId, 'topup.credited'))[0].id);
    const mail = await sink.waitFor((m) => m.to.includes(owner.email) && m.subject === 'Recarga de R$ 5,00 creditada');
    expect(mail.text).toContain('Recebemos o seu Pix de R$ 5,00');
    expect(mail.text).toContain('Saldo atual: R$ 5,00');
    key = (await createApiKey(stack.db, { tenantId: owner.tenantId, label: 'notify' })).key;
  });

  it('fires exactly once when a request crosses the threshold, with a ready Pix charge of the last top-up in the e-mail', async () => {
    const after1 = await spendOneReal(key);
    expect(after1).toBeLessThan(4_000_000n);
    expect(after1).toBeGreaterThan(3_900_000n);
    await until('balance.low delivered', () => receiver.verified('balance.low').length === 1);
    expect(receiver.verified('balance.low')[0].event!.data).toEqual({ tenant_id: owner.tenantId, balance: formatBrl(after1), threshold: '4.000000' });
    await spendOneReal(key);
    await new Promise((r) => setTimeout(r, 800));
    expect(receiver.verified('balance.low')).toHaveLength(1);
    expect(await events(owner.tenantId, 'balance.low')).toHaveLength(1);

    lowMail = await sink.waitFor((m) => m.to.includes(owner.email) && m.subject.startsWith('Saldo baixo'));
    expect(lowMail.subject).toBe(`Saldo baixo: R$ ${formatBrl(after1).replace('.', ',')}`);
    expect(lowMail.text).toContain('abaixo do aviso de saldo baixo de R$ 4,00');
    expect(lowMail.text).toContain('Para adicionar R$ 5,00 agora, pague este Pix');
    const brCode = /Pix copia e cola:\s*\n+([^\n]+)/.exec(lowMail.text)![1];
    expect(hasValidCrc(brCode)).toBe(true);
    expect(isValidBrCode(brCode)).toBe(true);
    const charge = (await stack.db.query('select txid, amount_micros, status from pix_charges where br_code = $1', [brCode])).rows;
    expect(charge).toEqual([{ txid: expect.any(String), amount_micros: 5_000_000n, status: 'ATIVA' }]);
    // the QR code inline (cid), and it is the image of that BR Code
    // (the sink's parser turns a cid: reference into the attachment's data: URL)
    expect(lowMail.html).toMatch(/<img src="data:image\/png;base64,[A-Za-z0-9+/=]+" alt="QR code Pix"/);
    const qr = lowMail.attachments!.find((a) => a.cid === 'pix-qr')!;
    expect(qr.contentType).toBe('image/png');
    expect(qr.sha256).toBe(
      createHash('sha256')
        .update(await qrPng(brCode))
        .digest('hex'),
    );
    expect(mailsTo(owner.email, /^Saldo baixo/)).toHaveLength(1);
  });

  it('fires again only after a top-up lifts the balance above it: paying the e-mailed charge (one scan) re-arms it', async () => {
    const brCode = /Pix copia e cola:\s*\n+([^\n]+)/.exec(lowMail.text)![1];
    const txid = (await stack.db.query('select txid from pix_charges where br_code = $1', [brCode])).rows[0].txid;
    expect((await paySimulatedCharge(stack.db, { txid, simulatorUrl: portal.simulator!.url })).delivered).toBe(true);
    await until('the second topup.credited', () => receiver.verified('topup.credited').length === 2);
    const lifted = await balance(owner.tenantId);
    expect(lifted).toBeGreaterThan(4_000_000n);
    expect((await stack.db.query('select low_fired from notify_tenants where tenant_id = $1', [owner.tenantId])).rows[0].low_fired).toBe(false);
    let now = lifted;
    while (now - 1_000_007n >= 4_000_000n) {
      now = await spendOneReal(key);
      expect(receiver.verified('balance.low')).toHaveLength(1);
    }
    const crossed = await spendOneReal(key);
    await until('the second balance.low', () => receiver.verified('balance.low').length === 2);
    expect(receiver.verified('balance.low')[1].event!.data).toEqual({ tenant_id: owner.tenantId, balance: formatBrl(crossed), threshold: '4.000000' });
    // once per Pix, once per crossing: what the outbox holds
    expect((await events(owner.tenantId, 'topup.credited')).map((e) => e.data.charge_id)).toEqual([expect.any(String), txid]);
    expect(await events(owner.tenantId, 'balance.low')).toHaveLength(2);
    expect(new Set(receiver.verified().map((r) => r.id)).size).toBe(4);
    expect(receiver.received.every((r) => r.event !== null)).toBe(true);
  });
});

describe('delivery: at least once, through a receiver outage and a notifier restart', () => {
  it('a receiver down for a while gets every event once it is back; the notifier restarted in between loses nothing', async () => {
    const from = new Date();
    await receiver.down();
    // events while it is away: two revocations in the portal, one by the CLI (no NATS: the relay publishes it)
    const keys = await Promise.all([1, 2, 3].map((i) => createApiKey(stack.db, { tenantId: owner.tenantId, label: `outage-${i}` })));
    for (const k of keys.slice(0, 2)) {
      const r = await client.post(`/keys/${k.record.id}/revoke`, { _csrf: await client.csrfOf('/keys') });
      expect(r.status).toBe(200);
    }
    let cliOut = '';
    const code = await runCli(['key', 'revoke', '--id', keys[2].record.id, '--json'], {
      env: { DATABASE_URL: stack.roleUrl('admin') },
      stdout: (s) => (cliOut += s),
      stderr: () => {},
    });
    expect({ code, out: JSON.parse(cliOut) }).toEqual({ code: 0, out: { id: keys[2].record.id, revoked: true } });
    const failedTwice = async () =>
      (
        await stack.db.query(
          `select count(*)::int as n from notify_deliveries d where d.tenant_id = $1 and d.channel = 'webhook' and d.created_at >= $2 and d.attempts >= 2`,
          [owner.tenantId, from],
        )
      ).rows[0].n === 3;
    await until('every delivery failed twice', failedTwice);
    const { rows: errors } = await stack.db.query(
      `select distinct a.error from notify_attempts a join notify_deliveries d on d.id = a.delivery_id where d.tenant_id = $1 and d.created_at >= $2 and d.channel = 'webhook'`,
      [owner.tenantId, from],
    );
    expect(errors.map((e) => e.error)).toEqual([expect.stringMatching(/ECONNREFUSED/)]);

    // the notifier goes away; an event made meanwhile waits in JetStream (a key reaching its limit, from metering)
    await portal.close();
    const limited = await createApiKey(stack.db, { tenantId: owner.tenantId, label: 'limited', limitMicros: 10_000n, limitReset: 'daily' });
    await chat(limited.key, 'sim/echo');
    await until('key.limit_reached made', async () => (await events(owner.tenantId, 'key.limit_reached')).length === 1);
    // metering published it to NOTIFY, where it waits for a notifier (work-queue retention)
    const limitEvent = (await events(owner.tenantId, 'key.limit_reached'))[0].id;
    await until(
      'published by metering',
      async () => (await stack.db.query('select published_at from notify_events where id = $1', [limitEvent])).rows[0].published_at !== null,
    );
    const waiting = await (await stack.nc.jetstreamManager()).consumers.info(NOTIFY_STREAM, NOTIFY_DURABLE);
    expect(waiting.num_pending + waiting.num_ack_pending).toBeGreaterThanOrEqual(1);
    portal = await startNotifyingPortal();
    client = Object.assign(new PortalClient(portal.url, {}, { mailbox: sinkMailbox(sink) }), { cookies: client.cookies });
    await receiver.up();

    const want = (
      await stack.db.query(`select id, type from notify_events where tenant_id = $1 and created_at >= $2 and type in ('key.revoked', 'key.limit_reached')`, [
        owner.tenantId,
        from,
      ])
    ).rows;
    expect(want.map((e) => e.type).sort()).toEqual(['key.limit_reached', 'key.revoked', 'key.revoked', 'key.revoked']);
    await until('every event delivered after the outage', () => want.every((e) => receiver.verified().some((r) => r.id === e.id)), 20000);
    const revoked = receiver.verified('key.revoked').map((r) => r.event!.data.key_id);
    expect(new Set(revoked)).toEqual(new Set(keys.map((k) => k.record.id)));
    const limit = receiver.verified('key.limit_reached')[0].event!.data;
    expect(limit).toMatchObject({ tenant_id: owner.tenantId, key_id: limited.record.id, key_label: 'limited', limit: '0.010000', limit_reset: 'daily' });
    // every delivery ends delivered, its failed attempts logged before the success
    const pending = async () =>
      (
        await stack.db.query(`select count(*)::int as n from notify_deliveries where tenant_id = $1 and created_at >= $2 and state = 'pending'`, [
          owner.tenantId,
          from,
        ])
      ).rows[0].n;
    await until('no delivery pending', async () => (await pending()) === 0);
    const { rows: states } = await stack.db.query(
      `select d.state, array_agg(a.status_code order by a.attempt) as codes from notify_deliveries d join notify_attempts a on a.delivery_id = d.id
        where d.tenant_id = $1 and d.created_at >= $2 and d.channel = 'webhook' group by d.id, d.state`,
      [owner.tenantId, from],
    );
    expect(states).toHaveLength(4);
    for (const s of states) {
      expect(s.state).toBe('delivered');
      expect(s.codes[s.codes.length - 1]).toBe(200);
    }
  });

  it('replay: a new attempt of the same event, with the same webhook-id, logged', async () => {
    const page = (await client.get('/notifications')).text;
    const row = /data-testid="log-row" data-delivery-id="(\d+)" data-event-id="(msg_[a-z0-9]+)"/.exec(page)!;
    const [deliveryId, eventId] = [row[1], row[2]];
    const before = receiver.received.filter((r) => r.id === eventId).length;
    const attempts = (await stack.db.query('select attempts from notify_deliveries where id = $1', [deliveryId])).rows[0].attempts as number;
    const r = await client.post(`/notifications/deliveries/${deliveryId}/replay`, { _csrf: PortalClient.csrf(page) });
    expect(r.status).toBe(303);
    await until('the replay arrived', () => receiver.received.filter((x) => x.id === eventId && x.event).length === before + 1);
    const { rows } = await stack.db.query('select attempt, status_code from notify_attempts where delivery_id = $1 order by attempt desc limit 1', [
      deliveryId,
    ]);
    expect(rows).toEqual([{ attempt: attempts + 1, status_code: 200 }]);
    // another tenant's delivery, or a made-up one: not found
    expect((await client.post('/notifications/deliveries/999999999/replay', { _csrf: PortalClient.csrf(page) })).status).toBe(404);
  });

  it('a 410 Gone disables the endpoint (Standard Webhooks), and nothing more is sent to it', async () => {
    receiver.status = 410;
    const k = await createApiKey(stack.db, { tenantId: owner.tenantId, label: 'gone' });
    const page = await client.get('/keys');
    expect((await client.post(`/keys/${k.record.id}/revoke`, { _csrf: PortalClient.csrf(page.text) })).status).toBe(200);
    await until(
      'the endpoint disabled',
      async () => (await stack.db.query('select enabled from notify_endpoints where tenant_id = $1', [owner.tenantId])).rows[0].enabled === false,
    );
    const { rows } = await stack.db.query(
      `select d.state, d.attempts, ep.disabled_reason from notify_deliveries d join notify_endpoints ep on ep.id = d.endpoint_id
        join notify_events e on e.id = d.event_id where e.dedup_key = $1`,
      [`key.revoked:${k.record.id}`],
    );
    expect(rows).toEqual([{ state: 'failed', attempts: 1, disabled_reason: expect.stringMatching(/^410 Gone on /) }]);
    receiver.status = 200;
    // enabled again from the page (the URL is checked again first)
    const toggled = await client.post(
      `/notifications/endpoints/${(await stack.db.query('select id from notify_endpoints where tenant_id = $1', [owner.tenantId])).rows[0].id}/toggle`,
      {
        _csrf: PortalClient.csrf((await client.get('/notifications')).text),
      },
    );
    expect(toggled.status).toBe(303);
    expect((await stack.db.query('select enabled, disabled_reason from notify_endpoints where tenant_id = $1', [owner.tenantId])).rows).toEqual([
      { enabled: true, disabled_reason: null },
    ]);
  });
});

describe('the other events', () => {
  it('key.expiring: once, 7 days before, for a key made to live longer; key.limit_reached once per window', async () => {
    const k = await createApiKey(stack.db, { tenantId: owner.tenantId, label: 'expiring', expiresAt: new Date(Date.now() + 3 * 86400_000) });
    const short = await createApiKey(stack.db, { tenantId: owner.tenantId, label: 'short-lived', expiresAt: new Date(Date.now() + 86400_000) });
    await stack.db.query(`update api_keys set created_at = now() - interval '30 days' where id = $1`, [k.record.id]);
    await until('key.expiring delivered', () => receiver.verified('key.expiring').some((r) => r.event!.data.key_id === k.record.id));
    const e = receiver.verified('key.expiring').find((r) => r.event!.data.key_id === k.record.id)!.event!;
    expect(e.data).toEqual({
      tenant_id: owner.tenantId,
      key_id: k.record.id,
      key_label: 'expiring',
      key_hint: k.record.key_hint,
      expires_at: expect.stringMatching(/^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(\.\d+)?\+00:00$/),
    });
    expect(new Date(e.data.expires_at as string).getTime()).toBe(new Date(k.record.expires_at!).getTime());
    await new Promise((r) => setTimeout(r, 1200)); // two more scans
    expect((await events(owner.tenantId, 'key.expiring')).map((x) => x.data.key_id)).toEqual([k.record.id]);
    expect(receiver.verified('key.expiring').filter((r) => r.event!.data.key_id === short.record.id)).toEqual([]);
    const mail = await sink.waitFor((m) => m.to.includes(owner.email) && m.subject.startsWith('A chave “expiring”'));
    expect(mail.subject).toMatch(/^A chave “expiring” \(.+\) expira em \d\d\/\d\d\/\d{4}/);
    // the limited key of the outage test: a second request in the same window announces nothing more
    const limited = (await stack.db.query(`select id from api_keys where tenant_id = $1 and label = 'limited'`, [owner.tenantId])).rows[0].id;
    expect((await events(owner.tenantId, 'key.limit_reached')).filter((x) => x.data.key_id === limited)).toHaveLength(1);
  });

  it('balance.depleted: once, when a request leaves less than R$ 0,01', async () => {
    const t = await stack.tenant('0.010005'); // an echo request costs 12 µBRL
    const other = await startReceiver();
    const ep = (await createEndpoint(stack.db, t.tenantId, other.url, ['balance.depleted', 'balance.low']))!;
    other.secrets = [ep.secret];
    await chat(t.key, 'sim/echo');
    await until('balance.depleted delivered', () => other.verified('balance.depleted').length === 1);
    const after = await balance(t.tenantId);
    expect(after).toBeLessThan(10_000n);
    expect(other.verified('balance.depleted')[0].event!.data).toEqual({ tenant_id: t.tenantId, balance: formatBrl(after), depleted_below: '0.010000' });
    await chat(t.key, 'sim/echo');
    await new Promise((r) => setTimeout(r, 800));
    expect(other.verified()).toHaveLength(1);
    await other.close();
  });

  it('exactly once across concurrent checks (several metering processes): one event per crossing', async () => {
    const t = await stack.tenant('10.00');
    await stack.db.query(`insert into notify_tenants (tenant_id, low_balance_micros) values ($1, 20000000)`, [t.tenantId]);
    const pools = Array.from({ length: 6 }, () => createPool(stack.roleUrl('metering'), 1));
    try {
      const made = await Promise.all(pools.map((p) => checkBalances(p, [t.tenantId])));
      expect(made.flat().map((e) => e.type)).toEqual(['balance.low']);
      expect((await Promise.all(pools.map((p) => checkBalances(p, [t.tenantId])))).flat()).toEqual([]);
    } finally {
      await Promise.all(pools.map((p) => p.end()));
    }
  });
});

describe('the reconciling sweep (metering crashed between a settlement and its check)', () => {
  /** Settles straight in PostgreSQL, as metering's transaction does, with no SettlementWatch to check after the commit. */
  const settleBySql = (tenantId: string, keyId: string, costMicros: bigint) =>
    settle(stack.db, {
      requestId: `req_reconcile_${Math.random().toString(36).slice(2)}`,
      tenantId,
      keyId,
      costMicros,
      model: 'sim/echo',
      inputTokens: 1,
      outputTokens: 1,
      estimated: false,
      outcome: 'completed',
      at: new Date(),
    });
  /** Pages of the sweep (as metering's sweeper runs them, connected as catraca_metering) until `done`; the stack's own metering sweeps too. */
  async function sweepUntil(what: string, done: () => Promise<boolean>) {
    const metering = createPool(stack.roleUrl('metering'), 1);
    try {
      for (let i = 0; i < 50 && !(await done()); i++) {
        await reconcileNotifications(metering, 200);
        await new Promise((r) => setTimeout(r, 50));
      }
      expect(await done(), what).toBe(true);
      // and again, a whole round of the cursor: nothing more for what was made
      for (let i = 0; i < 10; i++) await reconcileNotifications(metering, 200);
    } finally {
      await metering.end();
    }
  }

  it('balance.depleted fires exactly once, from the sweep, for a tenant a lost check left depleted', async () => {
    const t = await stack.tenant('0.010005');
    const other = await startReceiver();
    const ep = (await createEndpoint(stack.db, t.tenantId, other.url, ['balance.depleted']))!;
    other.secrets = [ep.secret];
    expect((await settleBySql(t.tenantId, t.keyId, 12n)).status).toBe('settled');
    expect(await balance(t.tenantId)).toBe(9_993n);
    await sweepUntil('balance.depleted made by the sweep', async () => (await events(t.tenantId, 'balance.depleted')).length > 0);
    expect((await events(t.tenantId, 'balance.depleted')).map((e) => e.data)).toEqual([
      { tenant_id: t.tenantId, balance: '0.009993', depleted_below: '0.010000' },
    ]);
    // published by the relay (nothing in memory knew of it), delivered once
    await until('balance.depleted delivered', () => other.verified('balance.depleted').length === 1);
    await new Promise((r) => setTimeout(r, 800));
    expect(other.verified()).toHaveLength(1);
    await other.close();
  });

  it('a tenant never used (a new sign-up at R$ 0,00) is not announced depleted', async () => {
    const t = await stack.tenant('0');
    const metering = createPool(stack.roleUrl('metering'), 1);
    try {
      for (let i = 0; i < 10; i++) await reconcileNotifications(metering, 200);
    } finally {
      await metering.end();
    }
    expect(await events(t.tenantId, 'balance.depleted')).toEqual([]);
  });

  it('key.limit_reached fires exactly once, from the sweep, for a key a lost check left at its limit', async () => {
    const t = await stack.tenant('1.00', { label: 'capped', limitMicros: 10_000n, limitReset: 'daily' });
    // admission marked it used; the settlement spends its whole limit
    await stack.db.query('update api_keys set last_used_at = now() where id = $1', [t.keyId]);
    expect((await settleBySql(t.tenantId, t.keyId, 10_000n)).status).toBe('settled');
    await sweepUntil('key.limit_reached made by the sweep', async () => (await events(t.tenantId, 'key.limit_reached')).length > 0);
    expect((await events(t.tenantId, 'key.limit_reached')).map((e) => e.data)).toEqual([
      expect.objectContaining({ key_id: t.keyId, limit: '0.010000', spent: '0.010000', limit_reset: 'daily' }),
    ]);
  });
});

describe('a replayed PSP callback', () => {
  it('the same Pix notified twice more by the webhook: still one topup.credited, one webhook delivery', async () => {
    const txid = await topUpByPix('5,00');
    await until('topup.credited delivered', () => receiver.verified('topup.credited').some((r) => r.event!.data.charge_id === txid));
    const charge = (await stack.db.query('select end_to_end_id, paid_at from pix_charges where txid = $1', [txid])).rows[0];
    const secret = await getSetting(stack.db, SETTINGS.webhookSecret);
    const notice = JSON.stringify({ pix: [{ endToEndId: charge.end_to_end_id, txid, valor: '5.00', horario: new Date(charge.paid_at).toISOString() }] });
    for (let i = 0; i < 2; i++) {
      const res = await fetch(`${portal.url}/webhooks/pix/${secret}/pix`, { method: 'POST', headers: { 'content-type': 'application/json' }, body: notice });
      expect(res.status).toBe(200);
      await res.arrayBuffer();
    }
    await new Promise((r) => setTimeout(r, 1000));
    const made = (await events(owner.tenantId, 'topup.credited')).filter((e) => e.data.charge_id === txid);
    expect(made).toHaveLength(1);
    expect(receiver.verified('topup.credited').filter((r) => r.event!.data.charge_id === txid)).toHaveLength(1);
    const { rows } = await stack.db.query(`select channel, count(*)::int as n from notify_deliveries where event_id = $1 group by channel order by channel`, [
      made[0].id,
    ]);
    expect(rows).toEqual([
      { channel: 'email', n: 1 },
      { channel: 'webhook', n: 1 },
    ]);
    // credited once: one ledger row for the payment
    expect((await stack.db.query('select count(*)::int as n from ledger where external_id = $1', [charge.end_to_end_id])).rows[0].n).toBe(1);
  });
});

describe('secrets', () => {
  it('rotation: the new secret shown once; for 24 h both sign, so a receiver with either verifies; no secret in any log line', async () => {
    const page = (await client.get('/notifications')).text;
    const endpointId = /data-endpoint-id="(ep_[a-z0-9]+)"/.exec(page)![1];
    const r = await client.post(`/notifications/endpoints/${endpointId}/rotate`, { _csrf: PortalClient.csrf(page) });
    expect(r.status).toBe(303);
    const fresh = /value="(whsec_[A-Za-z0-9+/=]+)" data-testid="webhook-secret"/.exec((await client.get(r.location!)).text)![1];
    const [old] = secretsShown;
    expect(fresh).not.toBe(old);
    secretsShown.push(fresh);
    receiver.secrets = [fresh];
    const k = await createApiKey(stack.db, { tenantId: owner.tenantId, label: 'rotation' });
    expect((await client.post(`/keys/${k.record.id}/revoke`, { _csrf: PortalClient.csrf((await client.get('/keys')).text) })).status).toBe(200);
    await until('delivered under the new secret', () => receiver.verified('key.revoked').some((x) => x.event!.data.key_id === k.record.id));
    const got = receiver.verified('key.revoked').find((x) => x.event!.data.key_id === k.record.id)!;
    expect(got.signature.split(' ')).toHaveLength(2);
    const headers = { 'webhook-id': got.id, 'webhook-timestamp': String(got.timestamp), 'webhook-signature': got.signature };
    expect(new Webhook(old).verify(got.body, headers)).toEqual(got.event);
    expect(new Webhook(fresh).verify(got.body, headers)).toEqual(got.event);
    // never logged, never on the page again
    expect(logLines.some((l) => l.includes('webhook secret rotated'))).toBe(true);
    for (const secret of secretsShown) {
      expect(logLines.some((l) => l.includes(secret.slice('whsec_'.length)))).toBe(false);
      expect((await client.get('/notifications')).text).not.toContain(secret);
    }
  });
});
