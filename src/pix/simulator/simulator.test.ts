import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { httpRequest } from '../http.ts';
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
