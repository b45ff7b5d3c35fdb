// SSRF (issue 20): outside development a webhook URL must be https and every address it resolves to
// global unicast — checked when it is saved (the portal's form) and again by the socket of every
// delivery, which connects only to the address its own lookup approved (a DNS answer that changes
// after the save — rebinding — reaches nothing). Targets here are loopback only: a refusal must
// happen before any packet leaves, and the receiver counts what reached it. No notifier runs in this
// file (the one of notifications.test.ts claims deliveries from the shared database).
import type { LookupAddress } from 'node:dns';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createPool } from '../../src/db/pool.ts';
import { type MailSink, startMailSink } from '../../src/mail/sink.ts';
import { WebhookSender } from '../../src/notify/webhook.ts';
import { type Portal, startPortal } from '../../src/portal/server.ts';
import { PortalClient, sinkMailbox } from '../portal/client.ts';
import { type Receiver, startReceiver } from './receiver.ts';

const db = createPool(process.env.DATABASE_URL!, 3);
let sink: MailSink;
let portal: Portal;
let receiver: Receiver;
let client: PortalClient;
/** What "DNS" answers: hooks.example.com is public; rebind.example.com is public until the flip, then 127.0.0.1. */
const dns = { rebound: false };
const resolve = async (host: string): Promise<LookupAddress[]> => {
  if (host === 'hooks.example.com') return [{ address: '93.184.216.34', family: 4 }];
  if (host === 'rebind.example.com') return [{ address: dns.rebound ? '127.0.0.1' : '93.184.216.34', family: 4 }];
  if (host === 'localhost') return [{ address: '127.0.0.1', family: 4 }];
  throw Object.assign(new Error(`getaddrinfo ENOTFOUND ${host}`), { code: 'ENOTFOUND' });
};

beforeAll(async () => {
  sink = await startMailSink();
  // production rules: not dev mode (no http, no private addresses)
  portal = await startPortal({
    db,
    nc: null,
    reconcileIntervalMs: 0,
    registerWebhook: false,
    signupLimitPerHour: 1000,
    devMode: false,
    notifyResolve: resolve,
    env: { PIX_PROVIDER: 'simulator', SMTP_URL: sink.url, SMTP_FROM: 'catraca <no-reply@catraca.test>' },
  });
  receiver = await startReceiver();
  client = new PortalClient(portal.url, {}, { mailbox: sinkMailbox(sink) });
  expect((await client.signUp(`ssrf.${Date.now()}@example.com`)).status).toBe(303);
});
afterAll(async () => {
  await portal?.close();
  await receiver?.close();
  await sink?.close();
  await db.end();
});

describe('when a webhook URL is saved', () => {
  it('refuses http, credentials, and hosts that are or resolve to loopback, private, link-local, metadata or CGNAT addresses', async () => {
    const token = await client.csrfOf('/notifications');
    const cases: Array<[string, string]> = [
      [`http://hooks.example.com/x`, 'A URL deve começar com https://.'],
      ['https://user:pass@hooks.example.com/x', 'A URL não pode conter usuário ou senha.'],
      [`https://127.0.0.1:${receiver.port}/hooks/catraca`, '127.0.0.1 (loopback)'],
      ['https://10.0.0.5/hook', '10.0.0.5 (private)'],
      ['https://192.168.1.10/hook', '192.168.1.10 (private)'],
      ['https://169.254.169.254/latest/meta-data/', '169.254.169.254 (linkLocal)'],
      ['https://100.100.100.200/latest/meta-data/', '100.100.100.200 (carrierGradeNat)'],
      [`https://[::1]:${receiver.port}/hooks/catraca`, '::1 (loopback)'],
      ['https://[fd00:ec2::254]/latest/meta-data/', 'fd00:ec2::254 (uniqueLocal)'],
      [`https://localhost:${receiver.port}/hooks/catraca`, '127.0.0.1 (loopback)'],
      ['https://nowhere.example.com/x', 'O endereço nowhere.example.com não foi encontrado (DNS).'],
    ];
    for (const [url, message] of cases) {
      const r = await client.post('/notifications/endpoints', { _csrf: token, url, events: ['balance.low'] });
      expect({ url, status: r.status, message: r.text.includes(message) }).toEqual({ url, status: 400, message: true });
    }
    const { rows } = await db.query(
      'select count(*)::int as n from notify_endpoints e join portal_users u on u.tenant_id = e.tenant_id where u.email like $1',
      ['ssrf.%'],
    );
    expect(rows[0].n).toBe(0);
    expect(receiver.received).toEqual([]);
    // a public one is taken
    const ok = await client.post('/notifications/endpoints', { _csrf: token, url: 'https://rebind.example.com/hooks/catraca', events: ['balance.low'] });
    expect(ok.status).toBe(303);
  });
});

describe('at every delivery', () => {
  const sender = new WebhookSender({ policy: { allowPrivate: false, resolve }, timeoutMs: 3000, maxResponseBytes: 1024 });
  const send = (url: string) => sender.send({ url, secrets: ['whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw'], eventId: 'msg_ssrf1', body: '{}' });
  afterAll(() => sender.close());

  it('a name that resolved to a public address at save time and to 127.0.0.1 now (rebinding) is refused before connecting', async () => {
    dns.rebound = true;
    const r = await send(`https://rebind.example.com:${receiver.port}/hooks/catraca`);
    expect(r).toMatchObject({ status: null, error: 'refused address 127.0.0.1 (loopback)' });
    expect(receiver.received).toEqual([]);
  });
  it('IP literals and localhost are refused at delivery too, and so is http', async () => {
    for (const url of [
      `https://127.0.0.1:${receiver.port}/hooks/catraca`,
      `https://[::1]:${receiver.port}/hooks/catraca`,
      `https://[::ffff:127.0.0.1]:${receiver.port}/hooks/catraca`,
      `https://localhost:${receiver.port}/hooks/catraca`,
      `http://hooks.example.com:${receiver.port}/hooks/catraca`,
    ]) {
      const r = await send(url);
      expect({ url, status: r.status, error: r.error }).toEqual({ url, status: null, error: expect.stringMatching(/^refused (address|scheme)/) });
    }
    expect(receiver.received).toEqual([]);
  });
  it('the same sender in development reaches the loopback receiver (the tests’ flag), with redirects not followed', async () => {
    const dev = new WebhookSender({ policy: { allowPrivate: true }, timeoutMs: 3000, maxResponseBytes: 1024 });
    try {
      receiver.secrets = ['whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw'];
      expect(await dev.send({ url: receiver.url, secrets: receiver.secrets, eventId: 'msg_dev1', body: '{"a":1}' })).toMatchObject({
        status: 200,
        error: null,
      });
      expect(receiver.verified()).toHaveLength(1);
      receiver.status = 302;
      expect(await dev.send({ url: receiver.url, secrets: receiver.secrets, eventId: 'msg_dev2', body: '{"a":2}' })).toMatchObject({
        status: 302,
        error: 'HTTP 302',
      });
      expect(receiver.received).toHaveLength(2);
    } finally {
      receiver.status = 200;
      await dev.close();
    }
  });
});

describe('a bounded attempt', () => {
  it('a receiver that never answers is a timeout; a huge answer is read up to the bound and dropped', async () => {
    const http = await import('node:http');
    const server = http.createServer((req, res) => {
      if (req.url === '/slow') return; // never answers
      res.writeHead(200, { 'content-type': 'application/octet-stream' });
      const chunk = Buffer.alloc(64 * 1024, 'x');
      const pump = () => {
        while (res.write(chunk));
      };
      res.on('drain', pump);
      pump();
      req.on('close', () => res.destroy());
    });
    await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
    const port = (server.address() as { port: number }).port;
    const sender = new WebhookSender({ policy: { allowPrivate: true }, timeoutMs: 800, maxResponseBytes: 128 * 1024 });
    try {
      const slow = await sender.send({
        url: `http://127.0.0.1:${port}/slow`,
        secrets: ['whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw'],
        eventId: 'msg_t1',
        body: '{}',
      });
      expect(slow).toMatchObject({ status: null, error: expect.stringMatching(/timeout|Timeout/) });
      expect(slow.durationMs).toBeGreaterThanOrEqual(700);
      expect(slow.durationMs).toBeLessThan(3000);
      const huge = await sender.send({
        url: `http://127.0.0.1:${port}/huge`,
        secrets: ['whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw'],
        eventId: 'msg_t2',
        body: '{}',
      });
      expect(huge).toMatchObject({ status: 200, error: null });
    } finally {
      await sender.close().catch(() => {});
      server.closeAllConnections();
      await new Promise((r) => server.close(r));
    }
  });
});
