import { execFileSync } from 'node:child_process';
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { BcbPixAdapter } from '../bcb.ts';
import { httpRequest } from '../http.ts';
import { BcbRecurrenceApi } from '../recurrence.ts';
import { startPixSimulator, type PixSimulator } from './server.ts';

// The simulator's HTTP surface on its own: OAuth, the charge routes, malformed input.
describe('Pix simulator routes', () => {
  let sim: PixSimulator;
  let token: string;
  const basic = `Basic ${Buffer.from('cid:csecret').toString('base64')}`;
  const call = (method: string, path: string, body?: unknown, authorization = `Bearer ${token}`) =>
    httpRequest(`${sim.url}${path}`, {
      method,
      headers: { authorization, 'content-type': 'application/json' },
      body: body === undefined ? undefined : JSON.stringify(body),
    });

  beforeAll(async () => {
    sim = await startPixSimulator({ clientId: 'cid', clientSecret: 'csecret' });
    const res = await httpRequest(`${sim.url}/oauth/token`, {
      method: 'POST',
      headers: { authorization: basic, 'content-type': 'application/x-www-form-urlencoded' },
      body: 'grant_type=client_credentials',
    });
    expect(res.status).toBe(200);
    token = JSON.parse(res.body).access_token;
  });
  afterAll(() => sim?.close());

  it('creates, reads and pays a charge; a paid one cannot be paid twice', async () => {
    const txid = 'a'.repeat(30);
    const put = await call('PUT', `/v2/cob/${txid}`, { calendario: { expiracao: 600 }, valor: { original: '12.30' }, chave: 'chave-x' });
    expect(put.status).toBe(201);
    expect(JSON.parse(put.body)).toMatchObject({ txid, status: 'ATIVA', valor: { original: '12.30' }, chave: 'chave-x', calendario: { expiracao: 600 } });
    expect((await call('PUT', `/cob/${txid}`, { valor: { original: '1.00' }, chave: 'x' })).status).toBe(400);
    const paid = await sim.pay(txid);
    expect(paid).toMatchObject({ status: 200, body: { txid, valor: '12.30', delivered: false } });
    expect(JSON.parse((await call('GET', `/cob/${txid}`)).body).status).toBe('CONCLUIDA');
    expect((await sim.pay(txid)).status).toBe(409);
  });

  it('refuses bad credentials, bad bodies and malformed %-escapes with 4xx (never 500)', async () => {
    expect((await call('GET', `/cob/${'b'.repeat(30)}`, undefined, 'Bearer nope')).status).toBe(401);
    expect(
      (
        await httpRequest(`${sim.url}/oauth/token`, {
          method: 'POST',
          headers: { authorization: `Basic ${Buffer.from('cid:wrong').toString('base64')}` },
          body: 'grant_type=client_credentials',
        })
      ).status,
    ).toBe(401);
    expect((await call('PUT', `/cob/${'c'.repeat(30)}`, { valor: { original: '1,00' }, chave: 'x' })).status).toBe(400);
    expect((await call('PUT', '/cob/short', { valor: { original: '1.00' }, chave: 'x' })).status).toBe(400);
    for (const path of ['/cob/%zz', '/webhook/%E0%A4%A', '/pix/%zz/devolucao/1']) {
      const res = await call('GET', path);
      expect(res.status, path).toBe(400);
    }
    expect((await httpRequest(`${sim.url}/sim/cob/%zz/pagar`, { method: 'POST', headers: { authorization: basic } })).status).toBe(400);
    expect((await call('PUT', '/webhook/k', { webhookUrl: 'not a url' })).status).toBe(400);
  });
});

// As a PSP's BCB API Pix (and as scripts/deploy-test.sh runs it): HTTPS that requires a client
// certificate of the CA it was given; the production adapter's client (httpRequest with tls) gets
// a token only with one.
describe('Pix simulator over mTLS', () => {
  let dir: string;
  let sim: PixSimulator;
  const pem = (name: string) => readFileSync(join(dir, name));
  const openssl = (...args: string[]) => execFileSync('openssl', args, { cwd: dir, stdio: 'pipe' });

  beforeAll(async () => {
    dir = mkdtempSync(join(tmpdir(), 'catraca-pix-mtls-'));
    const subj = (cn: string) => ['-subj', `/CN=${cn}`];
    openssl('req', '-x509', '-newkey', 'rsa:2048', '-nodes', '-days', '1', ...subj('server CA'), '-keyout', 'server-ca.key', '-out', 'server-ca.pem');
    openssl('req', '-x509', '-newkey', 'rsa:2048', '-nodes', '-days', '1', ...subj('client CA'), '-keyout', 'client-ca.key', '-out', 'client-ca.pem');
    openssl('req', '-x509', '-newkey', 'rsa:2048', '-nodes', '-days', '1', ...subj('other CA'), '-keyout', 'other.key', '-out', 'other.pem');
    openssl('req', '-newkey', 'rsa:2048', '-nodes', ...subj('localhost'), '-keyout', 'server.key', '-out', 'server.csr');
    writeFileSync(join(dir, 'san.ext'), 'subjectAltName=IP:127.0.0.1\n');
    openssl(
      'x509',
      '-req',
      '-in',
      'server.csr',
      '-CA',
      'server-ca.pem',
      '-CAkey',
      'server-ca.key',
      '-CAcreateserial',
      '-days',
      '1',
      '-extfile',
      'san.ext',
      '-out',
      'server.pem',
    );
    openssl('req', '-newkey', 'rsa:2048', '-nodes', ...subj('portal'), '-keyout', 'client.key', '-out', 'client.csr');
    openssl('x509', '-req', '-in', 'client.csr', '-CA', 'client-ca.pem', '-CAkey', 'client-ca.key', '-CAcreateserial', '-days', '1', '-out', 'client.pem');
    sim = await startPixSimulator({
      clientId: 'cid',
      clientSecret: 'csecret',
      tls: { cert: pem('server.pem'), key: pem('server.key'), ca: pem('client-ca.pem') },
    });
  }, 60000);
  afterAll(async () => {
    await sim?.close();
    rmSync(dir, { recursive: true, force: true });
  });

  const token = (tls: { cert?: Buffer; key?: Buffer }) =>
    httpRequest(`${sim.url}/oauth/token`, {
      method: 'POST',
      headers: { authorization: `Basic ${Buffer.from('cid:csecret').toString('base64')}`, 'content-type': 'application/x-www-form-urlencoded' },
      body: 'grant_type=client_credentials',
      tls: { ...tls, ca: pem('server-ca.pem') },
    });

  it('answers https only to a client certificate of its CA', async () => {
    expect(sim.url).toMatch(/^https:\/\/127\.0\.0\.1:\d+$/);
    const ok = await token({ cert: pem('client.pem'), key: pem('client.key') });
    expect(ok.status).toBe(200);
    expect(JSON.parse(ok.body)).toMatchObject({ token_type: 'Bearer' });
    await expect(token({})).rejects.toThrow();
    // a self-signed certificate of another CA
    await expect(token({ cert: pem('other.pem'), key: pem('other.key') })).rejects.toThrow();
  });

  it('the Pix Automático endpoints through the production adapter, over the same mTLS', async () => {
    const adapter = (tls: { cert?: Buffer; key?: Buffer }) =>
      new BcbRecurrenceApi(
        new BcbPixAdapter({
          baseUrl: sim.url,
          clientId: 'cid',
          clientSecret: 'csecret',
          chave: 'chave-x',
          webhookSecret: 's3cret',
          merchantName: 'CATRACA',
          merchantCity: 'SAO PAULO',
          tls: { ...tls, ca: pem('server-ca.pem') },
        }),
      );
    const api = adapter({ cert: pem('client.pem'), key: pem('client.key') });
    const loc = await api.createLocation();
    expect(loc.location).toMatch(/\/qr\/v2\/rec\/[0-9a-f]{32}$/);
    const rec = await api.createRecurrence({
      payer: { cnpj: '11444777000161', nome: 'Cliente Ltda' },
      contract: 'ten_mtls',
      object: 'Recarga automatica catraca',
      startDate: new Date(Date.now() + 3 * 86_400_000).toISOString().slice(0, 10),
      periodicity: 'MENSAL',
      minReceiverMicros: 150_000_000n,
      retryPolicy: 'PERMITE_3R_7D',
      locId: loc.id,
    });
    expect(rec).toMatchObject({ status: 'CRIADA', minReceiverMicros: 150_000_000n, retryPolicy: 'PERMITE_3R_7D' });
    expect((await api.getRecurrence(rec.idRec))?.brCode).toContain(loc.location.replace(/^https?:\/\//, ''));
    expect((await api.cancelRecurrence(rec.idRec)).status).toBe('CANCELADA');
    // without a client certificate of its CA: no connection, nothing created
    await expect(adapter({}).createLocation()).rejects.toThrow();
    await expect(adapter({ cert: pem('other.pem'), key: pem('other.key') }).createLocation()).rejects.toThrow();
  });
});
