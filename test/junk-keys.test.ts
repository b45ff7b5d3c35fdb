import http from 'node:http';
import net from 'node:net';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { generateApiKey } from '../src/auth/keys.ts';
import { startStack, type Proc, type TestStack } from './helpers/stack.ts';

// A flood of random, well-shaped API keys (none exists) against a real front door: real requests
// keep answering 200; the junk is refused with 401, or 429 once one client address has spent its
// lookups (GATEWAY_UNKNOWN_KEYS_PER_MINUTE, before any database read); the junk lands in the
// negative cache and never evicts a real key (counted by /metrics: real keys are not looked up
// again); a refused key's connection is answered and closed before a body over 1 MiB is read (a
// shorter one is read and dropped first, so the client reads the answer rather than a reset).
//
// The door trusts 127.0.0.1 as its proxy, so X-Forwarded-For gives each junk request the address of
// a "client" of our choosing; a second door trusts no proxy and ignores the header.

const PER_ADDRESS = 20;
let stack: TestStack;
let trusting: Proc;
let plain: Proc;
const real: string[] = [];

beforeAll(async () => {
  stack = await startStack({
    gateways: 1,
    workers: 1,
    env: { GATEWAY_TRUSTED_PROXIES: '127.0.0.1/32', GATEWAY_UNKNOWN_KEYS_PER_MINUTE: String(PER_ADDRESS), KEY_LOOKUP_CONCURRENCY: '2' },
  });
  trusting = stack.gateways[0];
  plain = await stack.spawnGateway({ GATEWAY_TRUSTED_PROXIES: '', GATEWAY_UNKNOWN_KEYS_PER_MINUTE: String(PER_ADDRESS) });
  for (let i = 0; i < 3; i++) real.push((await stack.tenant('100.00')).key);
}, 60000);

afterAll(async () => {
  await stack?.stop();
});

/** Every series of a front door's /metrics as `name{labels}` → value. */
async function metrics(door: Proc): Promise<Record<string, number>> {
  const port = JSON.parse(door.lines.find((l) => l.includes('front door listening'))!).metrics_port;
  const text = await (await fetch(`http://127.0.0.1:${port}/metrics`)).text();
  const out: Record<string, number> = {};
  for (const m of text.matchAll(/^(catraca_key_[a-z_]+)(?:\{([^}]*)\})? (\d+)$/gm)) {
    const labels = (m[2] ?? '').split(',').filter((l) => l && !l.startsWith('instance='));
    out[labels.length ? `${m[1]}{${labels.join(',')}}` : m[1]] = Number(m[3]);
  }
  return out;
}

/** The door's open client requests (catraca_inflight). */
async function inflight(door: Proc): Promise<number> {
  const port = JSON.parse(door.lines.find((l) => l.includes('front door listening'))!).metrics_port;
  const text = await (await fetch(`http://127.0.0.1:${port}/metrics`)).text();
  return Number(/^catraca_inflight(?:\{[^}]*\})? (\d+)$/m.exec(text)?.[1] ?? 0);
}

const agent = new http.Agent({ keepAlive: true, maxSockets: 64 });

/** POST /v1/chat/completions; the status, the error code, and whether the server asked to close. */
function chat(door: Proc, key: string, opts: { forwardedFor?: string; content?: string; stream?: boolean; agent?: http.Agent } = {}) {
  const body = JSON.stringify({
    model: 'sim/echo',
    max_tokens: 5,
    messages: [{ role: 'user', content: opts.content ?? 'olá' }],
    ...(opts.stream ? { stream: true } : {}),
  });
  return new Promise<{ status: number; code: string | null; text: string; connection: string | undefined }>((resolve, reject) => {
    const req = http.request(
      {
        agent: opts.agent ?? agent,
        host: '127.0.0.1',
        port: door.port,
        path: '/v1/chat/completions',
        method: 'POST',
        headers: {
          authorization: `Bearer ${key}`,
          'content-type': 'application/json',
          'content-length': Buffer.byteLength(body),
          ...(opts.forwardedFor ? { 'x-forwarded-for': opts.forwardedFor } : {}),
        },
      },
      (res) => {
        let text = '';
        res.setEncoding('utf8');
        res.on('data', (c) => (text += c));
        res.on('end', () => {
          const code = res.statusCode === 200 ? null : (JSON.parse(text).error?.code ?? null);
          resolve({ status: res.statusCode ?? 0, code, text, connection: res.headers.connection });
        });
      },
    );
    req.on('error', reject);
    req.end(body);
  });
}

/** Runs `tasks` with at most `limit` at once. */
async function pooled<T>(tasks: Array<() => Promise<T>>, limit: number): Promise<T[]> {
  const out: T[] = new Array(tasks.length);
  let next = 0;
  await Promise.all(
    Array.from({ length: limit }, async () => {
      while (next < tasks.length) {
        const i = next++;
        out[i] = await tasks[i]();
      }
    }),
  );
  return out;
}

describe('a flood of junk keys', () => {
  it('real requests keep answering 200 while junk keys from many addresses are refused 401/429; the junk stays in the negative cache', async () => {
    for (const k of real) expect((await chat(trusting, k)).status).toBe(200); // cached from here on
    const before = await metrics(trusting);
    expect(before['catraca_key_lookups_total{result="found"}']).toBe(3);

    // 1 200 junk keys from 400 addresses (3 each: under the limit) and 100 from one address (20 then 429)
    const junk = [
      ...Array.from({ length: 1200 }, (_, i) => () => chat(trusting, generateApiKey(), { forwardedFor: `10.1.${(i % 400) >> 8}.${(i % 400) & 255}` })),
      ...Array.from({ length: 100 }, () => () => chat(trusting, generateApiKey(), { forwardedFor: '198.51.100.9' })),
    ];
    let flooding = true;
    const realAnswers: number[] = [];
    const realTraffic = (async () => {
      for (let i = 0; flooding || i < 20; i++) {
        const r = await chat(trusting, real[i % real.length], { content: `real ${i}` });
        expect(r.status, r.text).toBe(200);
        expect(JSON.parse(r.text).choices[0].message.content).toBe(`real ${i}`);
        realAnswers.push(r.status);
        await new Promise((res) => setTimeout(res, 10));
      }
    })();
    const refused = await pooled(junk, 64);
    flooding = false;
    await realTraffic;
    expect(realAnswers.length).toBeGreaterThanOrEqual(20);

    const by = (code: string) => refused.filter((r) => r.code === code).length;
    expect(refused.filter((r) => r.status === 401).length + refused.filter((r) => r.status === 429).length).toBe(1300);
    expect([by('invalid_api_key'), by('rate_limit_exceeded')]).toEqual([1200 + PER_ADDRESS, 100 - PER_ADDRESS]);
    expect(refused.every((r) => r.connection === 'close')).toBe(true);

    const after = await metrics(trusting);
    // the real keys were never looked up again: the junk did not evict them
    expect(after['catraca_key_lookups_total{result="found"}']).toBe(3);
    expect(after['catraca_key_lookups_total{result="not_found"}'] - (before['catraca_key_lookups_total{result="not_found"}'] ?? 0)).toBe(1200 + PER_ADDRESS);
    expect(after['catraca_key_refusals_total{reason="rate_limited"}']).toBe(100 - PER_ADDRESS);
    expect(after['catraca_key_refusals_total{reason="busy"}']).toBe(0);
    expect(after['catraca_key_cache_entries{cache="positive"}']).toBe(3);
    expect(after['catraca_key_cache_entries{cache="negative"}']).toBe(1200 + PER_ADDRESS);
  }, 120000);

  it('the same junk key again is refused from the negative cache, without a lookup', async () => {
    const junk = generateApiKey();
    const before = await metrics(trusting);
    for (let i = 0; i < 5; i++) expect((await chat(trusting, junk, { forwardedFor: '192.0.2.77' })).code).toBe('invalid_api_key');
    const after = await metrics(trusting);
    expect(after['catraca_key_lookups_total{result="not_found"}'] - before['catraca_key_lookups_total{result="not_found"}']).toBe(1);
    expect(after['catraca_key_refusals_total{reason="negative_hit"}'] - (before['catraca_key_refusals_total{reason="negative_hit"}'] ?? 0)).toBe(4);
  });

  it('a door that trusts no proxy limits the peer itself, whatever X-Forwarded-For says', async () => {
    expect((await chat(plain, real[0])).status).toBe(200);
    const codes: string[] = [];
    for (let i = 0; i < PER_ADDRESS + 5; i++) codes.push((await chat(plain, generateApiKey(), { forwardedFor: `172.16.0.${i}` })).code!);
    expect(codes.slice(0, PER_ADDRESS)).toEqual(Array(PER_ADDRESS).fill('invalid_api_key'));
    expect(codes.slice(PER_ADDRESS)).toEqual(Array(5).fill('rate_limit_exceeded'));
    // a real key the door has cached is still served to that address
    expect((await chat(plain, real[0])).status).toBe(200);
  });
});

/**
 * Sends the headers of a POST declaring a `declared`-byte body and the first KiB of it, then waits:
 * the answer (and the socket's close) must come before any more of the body is sent.
 */
function refusedBeforeBody(port: number, key: string, path = '/v1/chat/completions', forwardedFor = '') {
  const declared = 4 * 1024 * 1024;
  return new Promise<{ head: string; body: string; closed: boolean; ms: number }>((resolve, reject) => {
    const s = net.connect(port, '127.0.0.1');
    const t0 = Date.now();
    let got = '';
    const timer = setTimeout(() => {
      s.destroy();
      reject(new Error(`no answer within 5 s while the body was not sent (got ${JSON.stringify(got)})`));
    }, 5000);
    s.on('connect', () => {
      s.write(
        `POST ${path} HTTP/1.1\r\nhost: x\r\nauthorization: Bearer ${key}\r\ncontent-type: application/json\r\n` +
          `${forwardedFor ? `x-forwarded-for: ${forwardedFor}\r\n` : ''}content-length: ${declared}\r\n\r\n`,
      );
      s.write(Buffer.alloc(1024, 0x20));
    });
    s.on('data', (d) => (got += d.toString('latin1')));
    s.on('error', () => {});
    s.on('close', () => {
      clearTimeout(timer);
      const [head, body] = got.split('\r\n\r\n');
      resolve({ head, body, closed: true, ms: Date.now() - t0 });
    });
  });
}

/**
 * Sends a POST declaring 256 KiB in two halves 300 ms apart (a client streaming its upload): how many
 * bytes of answer came before the second half, the answer, and any socket error (a reset).
 */
function refusedAfterBody(port: number, key: string, path: string, forwardedFor: string) {
  const half = Buffer.alloc(128 * 1024, 0x20);
  return new Promise<{ head: string; body: string; earlyBytes: number; error: string }>((resolve, reject) => {
    const s = net.connect(port, '127.0.0.1');
    let got = '';
    let earlyBytes = -1;
    let error = '';
    const timer = setTimeout(() => {
      s.destroy();
      reject(new Error(`no answer within 5 s after the body (got ${JSON.stringify(got)})`));
    }, 5000);
    s.on('connect', () => {
      s.write(
        `POST ${path} HTTP/1.1\r\nhost: x\r\nauthorization: Bearer ${key}\r\ncontent-type: application/json\r\n` +
          `${forwardedFor ? `x-forwarded-for: ${forwardedFor}\r\n` : ''}content-length: ${half.length * 2}\r\n\r\n`,
      );
      s.write(half);
      setTimeout(() => {
        earlyBytes = got.length;
        s.write(half);
      }, 300);
    });
    s.on('data', (d) => (got += d.toString('latin1')));
    s.on('error', (err) => (error = err.message));
    s.on('close', () => {
      clearTimeout(timer);
      const [head, body] = got.split('\r\n\r\n');
      resolve({ head, body, earlyBytes, error });
    });
  });
}

describe('a refused key ends its connection before its body is read', () => {
  it('unknown key (a database lookup), remembered key, rate-limited address: answered and closed with 4 MiB still unsent', async () => {
    const junk = generateApiKey();
    const first = await refusedBeforeBody(trusting.port!, junk, '/v1/chat/completions', '192.0.2.200');
    expect(first.head).toMatch(/^HTTP\/1\.1 401 /);
    expect(first.head.toLowerCase()).toContain('connection: close');
    expect(JSON.parse(first.body).error.code).toBe('invalid_api_key');
    const again = await refusedBeforeBody(trusting.port!, junk, '/v1/embeddings', '192.0.2.200');
    expect(again.head).toMatch(/^HTTP\/1\.1 401 /);
    // the plain door's peer (127.0.0.1) spent its lookups in the test above
    const limited = await refusedBeforeBody(plain.port!, generateApiKey(), '/v1/responses');
    expect(limited.head).toMatch(/^HTTP\/1\.1 429 /);
    expect(limited.head.toLowerCase()).toContain('retry-after: ');
    expect(JSON.parse(limited.body).error.type).toBe('rate_limit_error');
    // the door is fine
    expect((await chat(trusting, real[1])).status).toBe(200);
  });

  it('a body of at most 1 MiB still arriving is read and dropped first, so a client still sending reads the refusal, not a reset', async () => {
    for (const [path, key, forwardedFor] of [
      ['/v1/chat/completions', generateApiKey(), '192.0.2.202'], // unknown: refused by the lookup
      ['/v1/files', 'sk-not-ours', ''], // not shaped like a key: refused before the lookup
      ['/v1/files', generateApiKey(), '192.0.2.203'],
    ]) {
      const r = await refusedAfterBody(trusting.port!, key, path, forwardedFor);
      expect(r.earlyBytes, `${path}: nothing answered while the body was still arriving`).toBe(0);
      expect(r.error, `${path}: no reset`).toBe('');
      expect(r.head).toMatch(/^HTTP\/1\.1 401 /);
      expect(r.head.toLowerCase()).toContain('connection: close');
      expect(JSON.parse(r.body).error.code).toBe('invalid_api_key');
    }
  });

  it('reads: a refused key is answered and its connection closed', async () => {
    const res = await fetch(`http://127.0.0.1:${trusting.port}/v1/credits`, {
      headers: { authorization: `Bearer ${generateApiKey()}`, 'x-forwarded-for': '192.0.2.201' },
    });
    expect(res.status).toBe(401);
    expect(res.headers.get('connection')).toBe('close');
    expect((await res.json()).error.code).toBe('invalid_api_key');
  });
});

describe('many requests at once with a key the door has not cached, from one address', () => {
  it('a fresh real key: every one served (one lookup, no 429), and the address still has all its lookups for unknown keys', async () => {
    const fresh = (await stack.tenant('100.00')).key;
    const address = '203.0.113.40';
    const many = new http.Agent({ keepAlive: true, maxSockets: 500 });
    const before = await metrics(trusting);
    // The door's lookup of the key waits on a lock of api_keys until every request has arrived, so
    // all 500 wait on that one lookup (as when a batch job behind one NAT opens them at once)
    const lock = await stack.db.connect();
    let answers: Awaited<ReturnType<typeof chat>>[];
    try {
      await lock.query('begin; lock table api_keys in access exclusive mode');
      let answered = 0;
      const sent = Promise.all(
        Array.from({ length: 500 }, (_, i) =>
          chat(trusting, fresh, { forwardedFor: address, content: `burst ${i}`, stream: true, agent: many }).finally(() => answered++),
        ),
      );
      // every request either waiting in the door or already answered (before the fix: 429s)
      const deadline = Date.now() + 20_000;
      while ((await inflight(trusting)) + answered < 500 && Date.now() < deadline) await new Promise((r) => setTimeout(r, 20));
      await lock.query('commit');
      answers = await sent;
    } finally {
      await lock.query('rollback').catch(() => {});
      lock.release();
      many.destroy();
    }
    const byStatus: Record<string, number> = {};
    for (const a of answers) byStatus[`${a.status} ${a.code ?? ''}`.trim()] = (byStatus[`${a.status} ${a.code ?? ''}`.trim()] ?? 0) + 1;
    expect(byStatus).toEqual({ 200: 500 });
    expect(answers.every((a) => a.text.includes('burst') && a.text.trimEnd().endsWith('data: [DONE]'))).toBe(true);
    const after = await metrics(trusting);
    // one PostgreSQL lookup for the 500, and nothing counted against the address
    expect(after['catraca_key_lookups_total{result="found"}'] - before['catraca_key_lookups_total{result="found"}']).toBe(1);
    expect((after['catraca_key_refusals_total{reason="rate_limited"}'] ?? 0) - (before['catraca_key_refusals_total{reason="rate_limited"}'] ?? 0)).toBe(0);
    // the limit still holds for keys that do not exist, from that same address: PER_ADDRESS lookups, then 429
    const codes: string[] = [];
    for (let i = 0; i < PER_ADDRESS + 3; i++) codes.push((await chat(trusting, generateApiKey(), { forwardedFor: address })).code!);
    expect(codes).toEqual([...Array(PER_ADDRESS).fill('invalid_api_key'), ...Array(3).fill('rate_limit_exceeded')]);
  }, 120000);

  it('one junk key sent many times at once from one address: one lookup, one token of the limit, every request 401', async () => {
    const junk = generateApiKey();
    const address = '203.0.113.41';
    const many = new http.Agent({ keepAlive: true, maxSockets: 200 });
    const before = await metrics(trusting);
    const answers = await Promise.all(Array.from({ length: 200 }, () => chat(trusting, junk, { forwardedFor: address, agent: many })));
    many.destroy();
    expect(answers.map((a) => `${a.status} ${a.code}`)).toEqual(Array(200).fill('401 invalid_api_key'));
    const after = await metrics(trusting);
    expect(after['catraca_key_lookups_total{result="not_found"}'] - before['catraca_key_lookups_total{result="not_found"}']).toBe(1);
    // that key cost the address one of its PER_ADDRESS lookups (some of the 200 may have come after
    // the lookup ended, and were refused from the negative cache without one)
    const codes: string[] = [];
    for (let i = 0; i < PER_ADDRESS; i++) codes.push((await chat(trusting, generateApiKey(), { forwardedFor: address })).code!);
    expect(codes).toEqual([...Array(PER_ADDRESS - 1).fill('invalid_api_key'), 'rate_limit_exceeded']);
  }, 120000);
});
