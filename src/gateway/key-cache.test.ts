import { describe, expect, it } from 'vitest';
import { generateApiKey, hashApiKey } from '../auth/keys.ts';
import type { Db } from '../db/pool.ts';
import { AddressLimiter } from './address-limiter.ts';
import { ClientAddresses } from '../auth/client-address.ts';
import { KeyCache, type KeyCacheOptions } from './key-cache.ts';

/**
 * A database that knows `known` keys and counts the lookups it is asked for; with `gate`, every
 * lookup waits until the test opens it (to see how many run at once).
 */
function fakeDb(known: string[] = [], gate = false) {
  const rows = new Map(known.map((k, i) => [hashApiKey(k).toString('hex'), { id: `key${i}`, tenant_id: 't', key_hash: hashApiKey(k), revoked_at: null }]));
  const db = {
    queries: 0,
    running: 0,
    mostAtOnce: 0,
    opens: [] as Array<() => void>,
    async query(_sql: string, [hash]: [Buffer]) {
      db.queries += 1;
      db.running += 1;
      db.mostAtOnce = Math.max(db.mostAtOnce, db.running);
      if (gate) await new Promise<void>((r) => db.opens.push(r));
      db.running -= 1;
      const row = rows.get(hash.toString('hex'));
      return { rows: row ? [{ ...row }] : [] };
    },
    openAll() {
      for (const open of db.opens.splice(0)) open();
    },
  };
  return db;
}

const cache = (db: ReturnType<typeof fakeDb>, o: Partial<KeyCacheOptions> = {}) => new KeyCache(db as unknown as Db, { ttlMs: 30_000, ...o });

const refusal = (p: Promise<unknown>) =>
  p.then(
    () => 'accepted',
    (e: { code?: string }) => e.code,
  );
const tick = () => new Promise((r) => setTimeout(r, 0));

describe('KeyCache', () => {
  it('refuses a missing header, another scheme and tokens not shaped like our keys without a database lookup', async () => {
    const db = fakeDb();
    const keys = cache(db);
    expect(await refusal(keys.authenticate(''))).toBe('missing_api_key');
    expect(await refusal(keys.authenticate('Basic dXNlcjpwYXNz'))).toBe('missing_api_key');
    expect(await refusal(keys.authenticate('Bearer sk-proj-abc'))).toBe('invalid_api_key');
    expect(await refusal(keys.authenticate(`Bearer ${'x'.repeat(100_000)}`))).toBe('invalid_api_key');
    expect(await refusal(keys.authenticate(`Bearer ${generateApiKey().slice(0, -1)}Z`))).toBe('invalid_api_key');
    expect(db.queries).toBe(0);
    expect(keys.size).toBe(0);
    expect(await refusal(keys.authenticate(`Bearer ${generateApiKey()}`))).toBe('invalid_api_key');
    expect(db.queries).toBe(1);
  });

  it('a flood of well-formed unknown keys fills only the small negative cache: real keys stay cached, never looked up again', async () => {
    const real = [generateApiKey(), generateApiKey(), generateApiKey()];
    const db = fakeDb(real);
    const keys = cache(db, { maxEntries: 10, maxNegative: 20 });
    for (const k of real) expect((await keys.authenticateKey(k)).tenant_id).toBe('t');
    expect(db.queries).toBe(3);
    for (let i = 0; i < 500; i++) expect(await refusal(keys.authenticateKey(generateApiKey()))).toBe('invalid_api_key');
    expect(db.queries).toBe(503);
    expect([keys.size, keys.negativeSize]).toEqual([3, 20]);
    for (const k of real) expect(keys.resolve(k)).toMatchObject({ tenant_id: 't' }); // synchronously, from the cache
    expect(db.queries).toBe(503);
    expect(keys.counts).toMatchObject({ found: 3, not_found: 500, negative_hit: 0 });
  });

  it('an unknown key is remembered: asked again, it is refused synchronously without a lookup', async () => {
    const db = fakeDb();
    const keys = cache(db);
    const junk = generateApiKey();
    expect(await refusal(keys.authenticateKey(junk))).toBe('invalid_api_key');
    expect(() => keys.resolve(junk)).toThrow(expect.objectContaining({ code: 'invalid_api_key', status: 401 }));
    expect(db.queries).toBe(1);
    expect(keys.counts.negative_hit).toBe(1);
  });

  it('at most `concurrency` lookups at once; past the waiting bound unknown keys get 503 key_lookup_busy at once; known keys go first', async () => {
    const real = generateApiKey();
    const db = fakeDb([real], true);
    const keys = cache(db, { concurrency: 2, maxWaiting: 3, maxWaitMs: 60_000, ttlMs: 1 });
    const first = keys.authenticateKey(real);
    await tick();
    db.openAll();
    await first; // cached, and expired 1 ms later: the next use refreshes it
    await new Promise((r) => setTimeout(r, 5));
    const junk = Array.from({ length: 10 }, () => refusal(keys.authenticateKey(generateApiKey())));
    await tick();
    expect(db.running).toBe(2);
    const refresh = keys.authenticateKey(real); // waits, ahead of the unknown keys already waiting
    await tick();
    expect(keys.lookups).toEqual({ active: 2, waiting: 4 });
    while (db.running > 0 || db.opens.length > 0) {
      db.openAll();
      await tick();
    }
    expect((await refresh).id).toBe('key0');
    const codes = await Promise.all(junk);
    expect(codes.filter((c) => c === 'key_lookup_busy')).toHaveLength(5);
    expect(codes.filter((c) => c === 'invalid_api_key')).toHaveLength(5);
    expect(db.mostAtOnce).toBe(2);
    expect(db.queries).toBe(2 + 5);
    expect(keys.counts.busy).toBe(5);
  });

  it('a lookup that waits longer than maxWaitMs is refused with 503 key_lookup_busy and retry-after', async () => {
    const db = fakeDb([], true);
    const keys = cache(db, { concurrency: 1, maxWaitMs: 30 });
    const running = refusal(keys.authenticateKey(generateApiKey()));
    const waiting = keys.authenticateKey(generateApiKey()).catch((e) => e);
    const err = await waiting;
    expect([err.status, err.code, err.headers]).toEqual([503, 'key_lookup_busy', { 'retry-after': '1' }]);
    db.openAll();
    expect(await running).toBe('invalid_api_key');
    expect(db.queries).toBe(1);
  });

  it('unknown keys are rate-limited per client address before the database; found keys give their token back', async () => {
    const real = Array.from({ length: 8 }, () => generateApiKey());
    const db = fakeDb(real);
    const keys = cache(db, { unknownPerMinute: 5 });
    const fromA = () => '203.0.113.7';
    for (let i = 0; i < 5; i++) expect(await refusal(keys.authenticateKey(generateApiKey(), fromA))).toBe('invalid_api_key');
    let err: { status?: number; type?: string; code?: string; headers?: Record<string, string> } = {};
    try {
      keys.resolve(generateApiKey(), fromA);
    } catch (e) {
      err = e as typeof err;
    }
    expect([err.status, err.type, err.code, err.headers]).toEqual([429, 'rate_limit_error', 'rate_limit_exceeded', { 'retry-after': '12' }]);
    expect(db.queries).toBe(5);
    // another address is not affected; real keys found from it do not use its tokens up
    const fromB = () => '203.0.113.8';
    for (const k of real) expect((await keys.authenticateKey(k, fromB)).tenant_id).toBe('t');
    for (let i = 0; i < 5; i++) expect(await refusal(keys.authenticateKey(generateApiKey(), fromB))).toBe('invalid_api_key');
    expect(await refusal(keys.authenticateKey(generateApiKey(), fromB))).toBe('rate_limit_exceeded');
    // a real key cached here is served to the limited address as ever
    expect(keys.resolve(real[0], fromA)).toMatchObject({ id: 'key0' });
    expect(keys.counts).toMatchObject({ rate_limited: 2, found: 8, not_found: 10 });
  });

  it('requests waiting on a lookup already running cost no token: a fresh real key opened 1 000 times at once is served every time; junk still runs out', async () => {
    const fresh = generateApiKey();
    const db = fakeDb([fresh], true);
    const keys = cache(db, { unknownPerMinute: 5 });
    const fromA = () => '203.0.113.9';
    const asked = Array.from({ length: 1000 }, () => refusal(Promise.resolve().then(() => keys.resolve(fresh, fromA))));
    await tick();
    expect(db.queries).toBe(1);
    db.openAll();
    expect(new Set(await Promise.all(asked))).toEqual(new Set(['accepted']));
    // the same junk key 100 times at once: one lookup, one token
    const junk = generateApiKey();
    const refused = Array.from({ length: 100 }, () => refusal(Promise.resolve().then(() => keys.resolve(junk, fromA))));
    await tick();
    db.openAll();
    expect(new Set(await Promise.all(refused))).toEqual(new Set(['invalid_api_key']));
    expect(db.queries).toBe(2);
    // the address has its 5 tokens less that one: 4 more junk keys looked up, then 429
    const more: string[] = [];
    for (let i = 0; i < 5; i++) {
      const p = refusal(Promise.resolve().then(() => keys.resolve(generateApiKey(), fromA)));
      await tick();
      db.openAll();
      more.push((await p)!);
    }
    expect(more).toEqual([...Array(4).fill('invalid_api_key'), 'rate_limit_exceeded']);
    expect(keys.counts).toMatchObject({ rate_limited: 1, found: 1, not_found: 5 });
  });
});

describe('AddressLimiter', () => {
  it('refills at perMinute a minute; bounded: new addresses share one overflow bucket once every slot is in use', () => {
    const l = new AddressLimiter(2, 3);
    const t0 = 1_000_000;
    expect([l.take('a', t0), l.take('a', t0), l.take('a', t0)]).toEqual([0, 0, 30]);
    expect(l.take('a', t0 + 30_000)).toBe(0);
    for (const x of ['b', 'c']) l.take(x, t0);
    expect(l.size).toBe(3);
    // d, e, f share the overflow bucket (2 tokens)
    expect([l.take('d', t0), l.take('e', t0), l.take('f', t0)]).toEqual([0, 0, 30]);
    expect(l.size).toBe(4);
    // two minutes on every bucket is full again: the sweep drops them and new addresses get their own
    expect(l.take('g', t0 + 120_000)).toBe(0);
    expect(l.size).toBe(1);
  });
});

describe('ClientAddresses', () => {
  it('the peer, unless it is a trusted proxy: then the right-most X-Forwarded-For entry that is not one', () => {
    const none = new ClientAddresses('');
    expect(none.readsForwardedFor).toBe(false);
    expect(none.keyOf('127.0.0.1', '198.51.100.1')).toBe('127.0.0.1');
    const a = new ClientAddresses('10.0.0.0/8, 127.0.0.1, fd00::/8');
    expect(a.keyOf('203.0.113.5', '198.51.100.1')).toBe('203.0.113.5'); // an untrusted peer's header is ignored
    expect(a.keyOf('127.0.0.1', '')).toBe('127.0.0.1');
    expect(a.keyOf('127.0.0.1', '198.51.100.1')).toBe('198.51.100.1');
    expect(a.keyOf('127.0.0.1', '6.6.6.6, 198.51.100.1, 10.1.2.3')).toBe('198.51.100.1'); // the client's own claim is left of ours
    expect(a.keyOf('127.0.0.1', '10.9.9.9, 10.1.2.3')).toBe('10.9.9.9');
    expect(a.keyOf('127.0.0.1', 'garbage, 10.1.2.3')).toBe('10.1.2.3');
    expect(a.keyOf('0000:0000:0000:0000:0000:ffff:7f00:0001', '198.51.100.1')).toBe('198.51.100.1'); // IPv4-mapped peer
    expect(a.keyOf('fd12::1', '2001:db8:1:2:aaaa::1')).toBe('2001:db8:1:2::/64');
    expect(a.keyOf('0000:0000:0000:0000:0000:0000:0000:0001', '1.2.3.4')).toBe('::/64');
    expect(new ClientAddresses('uniquelocal').keyOf('172.20.0.1', '198.51.100.9')).toBe('198.51.100.9'); // proxy-addr's named ranges, as the portal's list
    expect(() => new ClientAddresses('10.0.0.0/33')).toThrow(/not a CIDR/);
    expect(() => new ClientAddresses('proxy.internal')).toThrow(/not an IP address/);
  });
});
