import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import fc from 'fast-check';
import { createPool } from '../../src/db/pool.ts';
import { createTenant } from '../../src/db/tenants.ts';
import { startPortal, type Portal } from '../../src/portal/server.ts';
import { getSetting, SETTINGS } from '../../src/pix/settings.ts';
import { rawRequest, type RawResponse } from './raw-http.ts';

// Property-based fuzzing of the Pix webhook (POST /webhooks/pix/{secret}[/pix], src/pix/service.ts):
// random bodies, bad txids (NUL, %-escapes, very long), wrong types, odd secrets in the path. The
// documented answers (src/portal/README.md): 401 bad secret, 400 a body that is not a notice,
// 413 over 256 KiB, 405 another method, 200 {received} for well-formed notices (each audited:
// unknown_txid, amount_mismatch, not_confirmed, …), 503 only when the PSP cannot be reached.
// Never a 500, never a credit, and the portal keeps answering.

const db = createPool(process.env.DATABASE_URL!, 4);
let portal: Portal;
let port: number;
let secret: string;
let tenantId: string;
let txid: string;
const SEED = Number(process.env.FUZZ_SEED ?? Date.now() % 2 ** 31);
const runs = (n: number) => ({ numRuns: Number(process.env.FUZZ_RUNS ?? n), seed: SEED, endOnFailure: true });

beforeAll(async () => {
  portal = await startPortal({ db, nc: null, reconcileIntervalMs: 0, env: { PIX_PROVIDER: 'simulator' } });
  port = Number(new URL(portal.url).port);
  secret = (await getSetting(db, SETTINGS.webhookSecret))!;
  tenantId = (await createTenant(db, 'pix-fuzz')).id;
  txid = (await portal.pix.createTopUp(tenantId, 25_000_000n)).txid; // a real, unpaid charge of ours
  console.log(`fuzz seed ${SEED}`);
});
afterAll(async () => {
  await portal?.close();
  await db.end();
});

async function expectNothingCredited() {
  const t = await db.query('select balance_micros from tenants where id = $1', [tenantId]);
  expect(t.rows[0].balance_micros).toBe(0n);
  const l = await db.query("select count(*)::int as n from ledger where tenant_id = $1 or (source = 'pix' and note = $2)", [tenantId, txid]);
  expect(l.rows[0].n).toBe(0);
  const c = await db.query('select status, end_to_end_id from pix_charges where txid = $1', [txid]);
  expect(c.rows[0]).toEqual({ status: 'ATIVA', end_to_end_id: null });
}

async function expectUp() {
  const r = await rawRequest({ port, method: 'GET', path: '/healthz' });
  expect(r.status).toBe(200);
}

function expectDocumented(r: RawResponse, allowed: number[]) {
  const text = r.body.toString('utf8').slice(0, 200);
  expect(allowed, `status ${r.status}: ${text}`).toContain(r.status);
  expect(r.json, 'a JSON answer').toBeTypeOf('object');
  if (r.status === 200) expect(r.json).toEqual({ received: expect.any(Number) });
  else expect(Object.keys(r.json as object)).toEqual(['error']);
}

const post = (path: string, body: Buffer | string, method = 'POST') =>
  rawRequest({ port, method, path, headers: [['content-type', 'application/json']], body, timeoutMs: 15000 });
const hook = () => `/webhooks/pix/${secret}/pix`;

const e2e = fc.stringMatching(/^[a-zA-Z0-9]{32}$/);
const badTxid = fc.oneof(
  fc.string({ maxLength: 40 }),
  fc.string({ minLength: 1, maxLength: 20 }).map((s) => `${s}\u0000${s}`),
  fc.constantFrom('\u0000', 'a'.repeat(30) + '\u0000', '%00', '%zz', '%', '%E0%A4%A', '..%2F..%2Fetc', "'; drop table ledger; --", '\ud800', 'ab\ncd'),
  fc.integer({ min: 36, max: 100_000 }).map((n) => 'x'.repeat(n)),
  fc.stringMatching(/^[a-zA-Z0-9]{26,35}$/), // well-formed, not ours
  fc.constant(null).map(() => txid.toUpperCase()), // ours, in the wrong case
  fc.constant(null).map(() => `${txid}\u0000`),
  fc.constant(null).map(() => `${txid}%00`),
);
const valor = fc.oneof(fc.constantFrom('25.00', '25.0', '25', '0.00', '-25.00', '1e3', '25,00', ''), fc.string({ maxLength: 12 }));
const notice = fc.record(
  {
    endToEndId: fc.oneof(e2e, fc.string({ maxLength: 40 })),
    txid: fc.oneof(
      badTxid,
      fc.constant(null),
      fc.constant(null).map(() => txid),
    ),
    valor,
    horario: fc.oneof(
      fc.date({ noInvalidDate: true }).map((d) => d.toISOString()),
      fc.string({ maxLength: 30 }),
    ),
    devolucoes: fc.option(
      fc.array(
        fc.record({
          id: fc.string({ maxLength: 40 }),
          rtrId: fc.option(fc.string()),
          valor,
          status: fc.constantFrom('EM_PROCESSAMENTO', 'DEVOLVIDO', 'NAO_REALIZADO', 'X'),
        }),
        { maxLength: 2 },
      ),
      { nil: undefined },
    ),
  },
  { requiredKeys: ['endToEndId', 'txid', 'valor', 'horario'] },
);

describe('fuzz: Pix webhook', () => {
  it('random bodies: 400 (not a notice) or 200 (notices audited), never a credit', async () => {
    await fc.assert(
      fc.asyncProperty(
        fc.oneof(
          fc.jsonValue({ maxDepth: 5 }).map((v) => JSON.stringify(v)),
          fc.uint8Array({ maxLength: 300 }).map((b) => Buffer.from(b)),
          fc.string({ maxLength: 300 }),
        ),
        async (body) => {
          expectDocumented(await post(hook(), body), [400]);
        },
      ),
      runs(120),
    );
    await expectNothingCredited();
    await expectUp();
  }, 60000);

  it('notices with bad txids, wrong amounts and wrong types: 200 or 400, never a 500, never a credit', async () => {
    await fc.assert(
      fc.asyncProperty(fc.array(notice, { minLength: 1, maxLength: 3 }), async (pix) => {
        const r = await post(hook(), JSON.stringify({ pix }));
        expectDocumented(r, [200, 400]);
        await expectNothingCredited();
      }),
      runs(150),
    );
    // wrong types for each field of a notice
    const wrong = fc.oneof(fc.jsonValue({ maxDepth: 2 }).filter((v) => typeof v !== 'string'));
    await fc.assert(
      fc.asyncProperty(fc.constantFrom('endToEndId', 'txid', 'valor', 'horario', 'devolucoes', 'pix'), wrong, async (field, v) => {
        const item: Record<string, unknown> = { endToEndId: 'E12345678202501011200abcdefghijk', txid, valor: '25.00', horario: new Date().toISOString() };
        const body = field === 'pix' ? { pix: v } : { pix: [{ ...item, [field]: v }] };
        if (field === 'txid' && v === null) return; // a notice without txid is documented (audited as no_txid)
        expectDocumented(
          await post(hook(), JSON.stringify(body)),
          field === 'devolucoes' && (v === null || (Array.isArray(v) && v.length === 0)) ? [200] : [400],
        );
      }),
      runs(80),
    );
    await expectNothingCredited();
    await expectUp();
  }, 60000);

  it('bad txids are audited (NUL replaced, length capped) and refused as unknown', async () => {
    for (const bad of ['a\u0000b'.padEnd(32, 'c'), `${txid}\u0000`, 'x'.repeat(5000), '%zz%00']) {
      const r = await post(
        hook(),
        JSON.stringify({ pix: [{ endToEndId: 'E12345678202501011200abcdefghijk', txid: bad, valor: '25.00', horario: new Date().toISOString() }] }),
      );
      expectDocumented(r, [200]);
    }
    const { rows } = await db.query(
      "select txid from pix_webhook_events where outcome = 'unknown_txid' and (txid like 'a_b%' or txid like 'xxxx%' or txid like '\\%zz%') order by id desc limit 3",
    );
    for (const row of rows) {
      expect(row.txid).not.toContain('\u0000');
      expect(row.txid.length).toBeLessThanOrEqual(200);
    }
    await expectNothingCredited();
  }, 30000);

  it('odd secrets and paths: 401/403/404/405/413 (429 once the address used up its wrong secrets), never a 500', async () => {
    expectDocumented(await post(hook(), '{}', 'PUT'), [405]);
    expectDocumented(await post(hook(), Buffer.alloc(300 * 1024, 0x20)), [413]);
    const oddSecret = fc.oneof(
      fc.constantFrom('%zz', '%', '%00', '%E0%A4%A', `${secret}%00`, `${secret.slice(0, -1)}%zz`, '%2F', '..', 'a%2Fb'),
      fc.string({ minLength: 1, maxLength: 64 }).map((s) => encodeURIComponent(s)),
      fc.integer({ min: 100, max: 6000 }).map((n) => 'z'.repeat(n)),
    );
    await fc.assert(
      fc.asyncProperty(oddSecret, fc.boolean(), async (s, withPix) => {
        const r = await post(
          `/webhooks/pix/${s}${withPix ? '/pix' : ''}`,
          JSON.stringify({ pix: [{ endToEndId: 'E12345678202501011200abcdefghijk', txid, valor: '25.00', horario: new Date().toISOString() }] }),
        );
        // (`..` and `.` are dot segments: the path becomes another page of the portal, and a POST without its CSRF token is a 403)
        expect([401, 403, 404, 429], `${r.status} ${r.body.toString().slice(0, 100)}`).toContain(r.status);
      }),
      runs(80),
    );
    await expectNothingCredited();
    await expectUp();
  }, 60000);
});
