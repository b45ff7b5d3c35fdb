import { createHmac } from 'node:crypto';
import { Webhook } from 'standardwebhooks';
import { describe, expect, it } from 'vitest';
import { checkWebhookUrl, refusedRange } from './ssrf.ts';
import { newSecret, retryAfterMs, signatures } from './webhook.ts';

// The reference implementation's test vector (standard-webhooks, libraries/javascript
// src/webhook.test.ts, "sign function works").
const VECTOR = {
  secret: 'whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw',
  msgId: 'msg_p5jXN8AQM9LWM0D4loKWxJek',
  timestamp: 1614265330,
  payload: '{"test": 2432232314}',
  signature: 'v1,g0hM9SsE+OTPJTGt/tmIKtSyZlE3uFJELVlNIOLJ1OE=',
};

describe('Standard Webhooks signatures', () => {
  it('sign the reference test vector exactly (and node:crypto agrees: base64 HMAC-SHA256 of id.timestamp.body under the decoded secret)', () => {
    expect(signatures([VECTOR.secret], VECTOR.msgId, new Date(VECTOR.timestamp * 1000), VECTOR.payload)).toBe(VECTOR.signature);
    const key = Buffer.from(VECTOR.secret.slice('whsec_'.length), 'base64');
    const own = createHmac('sha256', key).update(`${VECTOR.msgId}.${VECTOR.timestamp}.${VECTOR.payload}`).digest('base64');
    expect(`v1,${own}`).toBe(VECTOR.signature);
  });
  it('a rotated endpoint signs with both secrets; a receiver holding either verifies, a third secret does not', () => {
    const [current, previous, other] = [newSecret(), newSecret(), newSecret()];
    expect(current).toMatch(/^whsec_[A-Za-z0-9+/]{43}=$/);
    expect(Buffer.from(current.slice(6), 'base64')).toHaveLength(32);
    const at = new Date();
    const body = JSON.stringify({ type: 'balance.low', timestamp: at.toISOString(), data: { balance: '1.000000' } });
    const headers = {
      'webhook-id': 'msg_abc123',
      'webhook-timestamp': String(Math.floor(at.getTime() / 1000)),
      'webhook-signature': signatures([current, previous], 'msg_abc123', at, body),
    };
    expect(headers['webhook-signature'].split(' ')).toHaveLength(2);
    expect(new Webhook(current).verify(body, headers)).toEqual(JSON.parse(body));
    expect(new Webhook(previous).verify(body, headers)).toEqual(JSON.parse(body));
    expect(() => new Webhook(other).verify(body, headers)).toThrow(/No matching signature/);
    expect(() => new Webhook(current).verify(`${body} `, headers)).toThrow(/No matching signature/);
  });
  it('Retry-After as seconds or an HTTP date', () => {
    expect(retryAfterMs('120')).toBe(120_000);
    expect(retryAfterMs(new Date(10_000 + 30_000).toUTCString(), 10_000)).toBe(30_000);
    expect(retryAfterMs('soon')).toBe(null);
    expect(retryAfterMs(undefined)).toBe(null);
  });
});

describe('SSRF: which addresses a webhook may reach', () => {
  it('global unicast only', () => {
    const cases: Record<string, string | null> = {
      '93.184.216.34': null,
      '2606:2800:220:1:248:1893:25c8:1946': null,
      '127.0.0.1': 'loopback',
      '10.1.2.3': 'private',
      '172.16.5.4': 'private',
      '192.168.0.1': 'private',
      '169.254.169.254': 'linkLocal',
      '100.64.0.1': 'carrierGradeNat',
      '0.0.0.0': 'unspecified',
      '224.0.0.1': 'multicast',
      '255.255.255.255': 'broadcast',
      '192.0.2.10': 'reserved',
      '::1': 'loopback',
      '::': 'unspecified',
      'fe80::1': 'linkLocal',
      'fd00:ec2::254': 'uniqueLocal',
      'ff02::1': 'multicast',
      '::ffff:127.0.0.1': 'loopback',
      '::ffff:10.0.0.1': 'private',
      '64:ff9b::a00:1': 'rfc6052',
      '2002:a00::1': '6to4',
    };
    expect(Object.fromEntries(Object.keys(cases).map((a) => [a, refusedRange(a)]))).toEqual(cases);
  });
  it('URLs: https, no credentials, every resolved address public; development allows http and private addresses', async () => {
    const resolve = async (host: string) =>
      ({
        'hooks.example.com': [{ address: '93.184.216.34', family: 4 }],
        'mixed.example.com': [
          { address: '93.184.216.34', family: 4 },
          { address: '10.0.0.7', family: 4 },
        ],
        'loop.example.com': [{ address: '127.0.0.1', family: 4 }],
      })[host] ?? Promise.reject(Object.assign(new Error('not found'), { code: 'ENOTFOUND' }));
    const prod = { allowPrivate: false, resolve: resolve as never };
    const reason = async (url: string, policy = prod) => {
      const r = await checkWebhookUrl(url, policy);
      return r.ok ? 'ok' : `${r.reason}${r.detail ? `: ${r.detail}` : ''}`;
    };
    expect(await reason('https://hooks.example.com/catraca')).toBe('ok');
    expect(await reason('http://hooks.example.com/catraca')).toBe('not_https');
    expect(await reason('ftp://hooks.example.com/')).toBe('not_https');
    expect(await reason('https://user:pw@hooks.example.com/')).toBe('credentials');
    expect(await reason('not a url')).toBe('bad_url');
    expect(await reason('https://mixed.example.com/')).toBe('private_address: 10.0.0.7 (private)');
    expect(await reason('https://loop.example.com/')).toBe('private_address: 127.0.0.1 (loopback)');
    expect(await reason('https://nowhere.example.com/')).toBe('unresolvable: nowhere.example.com');
    expect(await reason('https://10.0.0.5/hook')).toBe('private_address: 10.0.0.5 (private)');
    expect(await reason('https://169.254.169.254/latest/meta-data/')).toBe('private_address: 169.254.169.254 (linkLocal)');
    expect(await reason('https://[::1]:8443/')).toBe('private_address: ::1 (loopback)');
    expect(await reason('https://[fd00:ec2::254]/')).toBe('private_address: fd00:ec2::254 (uniqueLocal)');
    expect(await reason('https://0x7f000001/')).toBe('private_address: 127.0.0.1 (loopback)');
    expect(await reason('http://127.0.0.1:9/hook', { allowPrivate: true, resolve: resolve as never })).toBe('ok');
  });
});
