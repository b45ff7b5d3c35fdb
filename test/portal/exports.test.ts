// CSV exports of the portal (issue 20): the statement and usage of a period in São Paulo days,
// exact content for a known ledger (day boundaries, quoting, CSV-injection safety), totals equal to
// the ledger to the micro-real, nothing of another tenant, period validation, and streaming: 50k rows
// come complete while the cursor is still open after the first bytes, a stalled download frees its
// connection, and exports at once are limited.
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createPool } from '../../src/db/pool.ts';
import { derivedRoleUrl } from '../../src/db/roles.ts';
import { startMailSink, type MailSink } from '../../src/mail/sink.ts';
import { addDays, todayInSaoPaulo } from '../../src/portal/period.ts';
import { type Portal, startPortal } from '../../src/portal/server.ts';
import { PortalClient, sinkMailbox } from './client.ts';
import { FORMULA_END_USER, knownLedger, manyDebits, otherTenantLedger, uniq } from './usage-fixture.ts';

const db = createPool(process.env.DATABASE_URL!, 4);
const portalDb = createPool(derivedRoleUrl(process.env.DATABASE_URL!, 'portal'), 6);
let sink: MailSink;
let portal: Portal;
/** A portal whose exports stall after 400 ms and run one at a time per tenant. */
let strict: Portal;

beforeAll(async () => {
  sink = await startMailSink();
  const common = { db: portalDb, nc: null, reconcileIntervalMs: 0, signupLimitPerHour: 1000, env: { PIX_PROVIDER: 'simulator', SMTP_URL: sink.url } };
  portal = await startPortal(common);
  strict = await startPortal({ ...common, registerWebhook: false, exportLimits: { perTenant: 1, total: 4, stallMs: 400 } });
});
afterAll(async () => {
  await strict?.close();
  await portal?.close();
  await sink?.close();
  await db.end();
  await portalDb.end();
});

/** A signed-in user of a new tenant: its client and tenant id. */
async function account(base: string) {
  const c = new PortalClient(base, {}, { mailbox: sinkMailbox(sink) });
  const email = `exports.${uniq()}@example.com`;
  expect((await c.signUp(email)).status).toBe(303);
  const tenantId = (await db.query('select tenant_id from portal_users where email = $1', [email])).rows[0].tenant_id as string;
  return { c, tenantId };
}

const cookieOf = (c: PortalClient) => [...c.cookies].map(([k, v]) => `${k}=${encodeURIComponent(v)}`).join('; ');

/** A signed decimal with 6 places ("-1.234567") as micro-reais. */
function micros(text: string): bigint {
  const m = /^(-?)(\d+)\.(\d{6})$/.exec(text);
  if (!m) throw new Error(`not an amount: ${text}`);
  const v = BigInt(m[2]) * 1_000_000n + BigInt(m[3]);
  return m[1] ? -v : v;
}

/** The last column of each data line (amounts are last in the usage file): lines without quoted line breaks only. */
const lastCells = (csv: string) =>
  csv
    .trimEnd()
    .split('\r\n')
    .slice(1)
    .map((line) => line.slice(line.lastIndexOf(',') + 1));

describe('the statement and usage of a known ledger', () => {
  let c: PortalClient;
  let tenantId: string;
  let f: Awaited<ReturnType<typeof knownLedger>>;
  beforeAll(async () => {
    ({ c, tenantId } = await account(portal.url));
    f = await knownLedger(db, tenantId);
    await otherTenantLedger(db);
  });

  it('statement.csv: every entry of the São Paulo days, oldest first, where each request ran, exact', async () => {
    const r = await c.get('/exports/statement.csv?from=2025-03-01&to=2025-03-02');
    expect(r.status).toBe(200);
    expect(r.headers.get('content-type')).toBe('text/csv; charset=utf-8');
    expect(r.headers.get('content-disposition')).toBe('attachment; filename="catraca-statement_2025-03-01_2025-03-02.csv"');
    expect(r.headers.get('cache-control')).toBe('no-store');
    const { ids, k1, k2, u } = f;
    expect(r.text).toBe(
      [
        'entry_id,time_sao_paulo,time_utc,kind,source,request_id,external_id,model,deployment,region,country,key_id,key_label,end_user,api,batch_id,input_tokens,output_tokens,cached_tokens,cache_write_tokens,cache_write_1h_tokens,reasoning_tokens,amount_brl,balance_after_brl,estimated,outcome,note',
        `${ids.pix},2025-03-01 09:00:00,2025-03-01T12:00:00.000000Z,credit,pix,,E2E-${u},,,,,,,,,,,,,,,,50.000000,50.000000,,,`,
        `${ids.echo1},2025-03-01 17:00:00,2025-03-01T20:00:00.000000Z,debit,request,req-1-${u},,sim/echo,brazilsouth,brazilsouth,BR,${k1},"'=HYPERLINK(""http://evil.example"")",'=cmd|calc,chat,,10,20,,,,,-0.000005,49.999995,false,completed,`,
        `${ids.echo2},2025-03-01 23:30:00,2025-03-02T02:30:00.000000Z,debit,request,req-2-${u},,sim/echo,brazilsouth,brazilsouth,BR,${k1},"'=HYPERLINK(""http://evil.example"")",'=cmd|calc,chat,,1000,200,100,50,0,20,-1.234567,48.765428,false,completed,`,
        `${ids.lorem},2025-03-02 00:00:00,2025-03-02T03:00:00.000000Z,debit,request,req-3-${u},,sim/lorem,primary,,,${k2},"Padaria, ""Zé""","cliente ""A"", filial\nnorte",messages,batch_${u},10,5,,,,,-0.000001,48.765427,true,cancelled,`,
        `${ids.refund},2025-03-02 12:00:00,2025-03-02T15:00:00.000000Z,debit,pix_refund,,D-${u},,,,,,,,,,,,,,,,-10.000000,38.765427,,,`,
        `${ids.grant},2025-03-02 17:00:00,2025-03-02T20:00:00.000000Z,credit,grant,,,,,,,,,,,,,,,,,,0.000001,38.765428,,,'+55 11 99999-0000`,
        '',
      ].join('\r\n'),
    );
  });

  it('usage.csv: requests summed by São Paulo day × model × deployment × key × end user, where they ran, exact', async () => {
    const r = await c.get('/exports/usage.csv?from=2025-03-01&to=2025-03-02');
    expect(r.status).toBe(200);
    expect(r.headers.get('content-disposition')).toBe('attachment; filename="catraca-usage_2025-03-01_2025-03-02.csv"');
    expect(r.text).toBe(
      [
        'date,model,deployment,region,country,key_id,key_label,end_user,requests,input_tokens,output_tokens,cached_tokens,cache_write_tokens,cache_write_1h_tokens,reasoning_tokens,batch_requests,batch_amount_brl,amount_brl',
        `2025-03-01,sim/echo,brazilsouth,brazilsouth,BR,${f.k1},"'=HYPERLINK(""http://evil.example"")",'=cmd|calc,2,1010,220,100,50,0,20,0,0.000000,1.234572`,
        `2025-03-02,sim/lorem,primary,,,${f.k2},"Padaria, ""Zé""","cliente ""A"", filial\nnorte",1,10,5,0,0,0,0,1,0.000001,0.000001`,
        '',
      ].join('\r\n'),
    );
    // one day alone: the 02:30 UTC debit stays on the 1st
    const day1 = await c.get('/exports/usage.csv?from=2025-03-01&to=2025-03-01');
    expect(day1.text.trimEnd().split('\r\n')).toHaveLength(2);
    expect(day1.text).toContain(`${FORMULA_END_USER},2,1010,220`);
  });

  it('totals equal the ledger to the micro-real, for several periods', async () => {
    for (const [from, to] of [
      ['2025-02-28', '2025-03-03'],
      ['2025-03-01', '2025-03-02'],
      ['2025-03-02', '2025-03-02'],
      ['2025-01-01', '2025-12-31'],
    ]) {
      const q = `from=${from}&to=${to}`;
      const ledger = (
        await db.query(
          `select coalesce(sum(case when kind = 'credit' then amount_micros else -amount_micros end), 0)::bigint as net,
                  coalesce(sum(amount_micros) filter (where kind = 'debit' and source = 'request'), 0)::bigint as spend
             from ledger where tenant_id = $1
              and created_at >= ($2::date)::timestamp at time zone 'America/Sao_Paulo'
              and created_at < ($3::date + 1)::timestamp at time zone 'America/Sao_Paulo'`,
          [tenantId, from, to],
        )
      ).rows[0];
      const statement = (await c.get(`/exports/statement.csv?${q}`)).text;
      // records are split at CRLF (the quoted end user's bare LF stays inside its record); the amount is the
      // 5th field from the end, after which no field holds a comma
      const amounts = statement
        .split('\r\n')
        .slice(1)
        .filter((l) => /^\d+,/.test(l))
        .map((l) => l.split(',').at(-5)!);
      expect(amounts.reduce((s, a) => s + micros(a), 0n)).toBe(ledger.net);
      const usage = (await c.get(`/exports/usage.csv?${q}`)).text;
      expect(
        usage
          .split('\r\n')
          .filter((l) => /^\d{4}-/.test(l))
          .reduce((s, l) => s + micros(l.slice(l.lastIndexOf(',') + 1)), 0n),
      ).toBe(ledger.spend);
    }
  });

  it("another tenant's rows are never in the files", async () => {
    for (const name of ['statement', 'usage']) {
      const text = (await c.get(`/exports/${name}.csv?from=2025-01-01&to=2025-12-31`)).text;
      expect(text).not.toContain('sim/b-only');
      expect(text).not.toContain('tenant-b-key');
      expect(text).not.toContain('b-user');
      expect(text).not.toContain('0.777777');
    }
  });

  it('a period with nothing: the header alone', async () => {
    const r = await c.get('/exports/usage.csv?from=2024-01-01&to=2024-01-31');
    expect(r.status).toBe(200);
    expect(r.text).toBe(
      'date,model,deployment,region,country,key_id,key_label,end_user,requests,input_tokens,output_tokens,cached_tokens,cache_write_tokens,cache_write_1h_tokens,reasoning_tokens,batch_requests,batch_amount_brl,amount_brl\r\n',
    );
  });
});

describe('periods', () => {
  it('bad dates, reversed or too long periods: a 400 page saying why, in both languages', async () => {
    const { c } = await account(portal.url);
    const cases: Array<[string, string]> = [
      ['from=2025-02-30&to=2025-03-01', 'Informe as datas como dias válidos no formato AAAA-MM-DD, por exemplo 2025-01-31.'],
      ['from=2025-3-1&to=2025-03-02', 'Informe as datas como dias válidos no formato AAAA-MM-DD, por exemplo 2025-01-31.'],
      ['from=2025-03-01&to=<script>', 'Informe as datas como dias válidos no formato AAAA-MM-DD, por exemplo 2025-01-31.'],
      ['from=2025-03-02&to=2025-03-01', 'A data inicial é depois da data final.'],
      ['from=2024-01-01&to=2025-02-04', 'Um período cobre no máximo 400 dias.'],
      ['days=8', 'Escolha 7, 30 ou 90 dias.'],
    ];
    for (const [q, message] of cases) {
      for (const path of ['/exports/statement.csv', '/exports/usage.csv', '/dashboard']) {
        const r = await c.get(`${path}?${q}`);
        expect(r.status, `${path}?${q}`).toBe(400);
        expect(r.headers.get('content-type')).toBe('text/html; charset=utf-8');
        expect(r.text).toContain('<h1>Período inválido</h1>');
        expect(r.text).toContain(`<p data-testid="message">${message}</p>`);
        expect(r.text).not.toContain('<script>');
      }
    }
    const en = await c.get('/exports/statement.csv?from=2024-01-01&to=2025-02-04&lang=en');
    expect(en.status).toBe(400);
    expect(en.text).toContain('<p data-testid="message">A period covers at most 400 days.</p>');
    // 400 days exactly is fine
    expect((await c.get('/exports/statement.csv?from=2024-01-01&to=2025-02-03')).status).toBe(200);
  });

  it('without a period: the last 30 São Paulo days (the statement page links it)', async () => {
    const { c } = await account(portal.url);
    expect((await c.get('/ledger')).text).toContain(
      '<a class="button" href="/exports/statement.csv" download data-testid="ledger-export">Baixar extrato dos últimos 30 dias (CSV)</a>',
    );
    const r = await c.get('/exports/statement.csv');
    expect(r.status).toBe(200);
    const today = todayInSaoPaulo();
    expect(r.headers.get('content-disposition')).toBe(`attachment; filename="catraca-statement_${addDays(today, -29)}_${today}.csv"`);
  });

  it('without a session: the sign-in page, never a file', async () => {
    const anon = new PortalClient(portal.url);
    const r = await anon.get('/exports/statement.csv?from=2025-03-01&to=2025-03-02');
    expect(r.status).toBe(303);
    expect(r.location).toBe('/login');
  });
});

/** How many connections run an export of this kind now, as PostgreSQL sees them (a cursor between two fetches is 'active'). */
async function runningExports(name: string): Promise<number> {
  const { rows } = await db.query(`select count(*)::int as n from pg_stat_activity where state = 'active' and query like $1 and pid <> pg_backend_pid()`, [
    `/* catraca export: ${name} */%`,
  ]);
  return rows[0].n;
}

describe('streaming', () => {
  const N = 50_000;
  let c: PortalClient;
  let tenantId: string;
  let sc: PortalClient;
  beforeAll(async () => {
    ({ c, tenantId } = await account(portal.url));
    await manyDebits(db, tenantId, N, '2025-06-01T03:00:00Z');
    const s = await account(strict.url);
    sc = s.c;
    await manyDebits(db, s.tenantId, N, '2025-06-01T03:00:00Z');
  }, 60000);

  it('50k rows: the first bytes arrive while the cursor is still open; the file is complete and its total is the ledger', async () => {
    const res = await fetch(`${portal.url}/exports/statement.csv?from=2025-06-01&to=2025-07-31`, { headers: { cookie: cookieOf(c) } });
    expect(res.status).toBe(200);
    const reader = res.body!.getReader();
    const decoder = new TextDecoder();
    const first = await reader.read();
    let text = decoder.decode(first.value, { stream: true });
    // the client reads nothing more for a moment: the server has not run the query to its end
    await new Promise((r) => setTimeout(r, 300));
    expect(await runningExports('statement')).toBe(1);
    for (;;) {
      const { done, value } = await reader.read();
      if (done) break;
      text += decoder.decode(value, { stream: true });
    }
    text += decoder.decode();
    const lines = text.trimEnd().split('\r\n');
    expect(lines).toHaveLength(N + 1);
    // the last: 50,000 minutes after the first
    expect(lines.at(-1)).toMatch(new RegExp(`^\\d+,2025-07-05 17:20:00,2025-07-05T20:20:00\\.000000Z,debit,request,bulk-[0-9a-f]+-${N},`));
    const total = lines.slice(1).reduce((s, l) => s + micros(l.split(',').at(-5)!), 0n);
    expect(total).toBe(-BigInt((N * (N + 1)) / 2));
    // the ledger over the same São Paulo days (the fixture's opening grant is the day before)
    const ledger = (
      await db.query(
        `select sum(case kind when 'credit' then amount_micros else -amount_micros end)::bigint as s from ledger
          where tenant_id = $1 and created_at >= '2025-06-01T03:00:00Z' and created_at < '2025-08-01T03:00:00Z'`,
        [tenantId],
      )
    ).rows[0].s;
    expect(total).toBe(ledger);
    await expect.poll(() => runningExports('statement')).toBe(0);

    const usage = (await c.get('/exports/usage.csv?from=2025-06-01&to=2025-07-31')).text;
    expect(lastCells(usage).reduce((s, a) => s + micros(a), 0n)).toBe(-ledger); // spend: the debits, positive
  });

  it('a client that stops reading: the export ends after the stall timeout and frees its connection; one at a time per tenant', async () => {
    const res = await fetch(`${strict.url}/exports/statement.csv?from=2025-06-01&to=2025-07-31`, { headers: { cookie: cookieOf(sc) } });
    const reader = res.body!.getReader();
    await reader.read();
    expect(await runningExports('statement')).toBe(1);
    // a second export of the same tenant while the first runs: refused
    const busy = await sc.get('/exports/usage.csv?from=2025-06-01&to=2025-07-31');
    expect(busy.status).toBe(429);
    expect(busy.text).toContain('Já há exportações em andamento.');
    // nothing read for longer than the stall timeout: the server ends it
    await expect.poll(() => runningExports('statement'), { timeout: 5000 }).toBe(0);
    await expect(
      (async () => {
        for (;;) if ((await reader.read()).done) return 'complete';
      })(),
    ).rejects.toThrow();
    // the slot is free again
    const again = await sc.get('/exports/usage.csv?from=2025-06-01&to=2025-07-31');
    expect(again.status).toBe(200);
  });

  it('HEAD: the headers, no body, and the export is over (its slot free again)', async () => {
    for (let i = 0; i < 3; i++) {
      const head = await fetch(`${strict.url}/exports/statement.csv?from=2025-06-01&to=2025-07-31`, { method: 'HEAD', headers: { cookie: cookieOf(sc) } });
      expect(head.status).toBe(200);
      expect(head.headers.get('content-type')).toBe('text/csv; charset=utf-8');
      expect(await head.text()).toBe('');
    }
    await expect.poll(() => runningExports('statement'), { timeout: 5000 }).toBe(0);
    expect((await sc.get('/exports/usage.csv?from=2025-06-01&to=2025-06-01')).status).toBe(200);
  });

  it('a client that goes away: the cursor is closed and the connection back in the pool', async () => {
    const ac = new AbortController();
    const res = await fetch(`${portal.url}/exports/statement.csv?from=2025-06-01&to=2025-07-31`, { headers: { cookie: cookieOf(c) }, signal: ac.signal });
    await res.body!.getReader().read();
    expect(await runningExports('statement')).toBe(1);
    ac.abort();
    await expect.poll(() => runningExports('statement'), { timeout: 5000 }).toBe(0);
    expect((await c.get('/exports/usage.csv?from=2025-06-01&to=2025-06-01')).status).toBe(200);
  });

  it('the database connection lost mid-export: the download fails (never a file that looks whole), the portal goes on', async () => {
    const res = await fetch(`${portal.url}/exports/statement.csv?from=2025-06-01&to=2025-07-31`, { headers: { cookie: cookieOf(c) } });
    const reader = res.body!.getReader();
    let bytes = (await reader.read()).value!.length;
    await db.query(`select pg_terminate_backend(pid) from pg_stat_activity where state = 'active' and query like '/* catraca export: statement */%'`);
    const outcome = await (async () => {
      for (;;) {
        const { done, value } = await reader.read();
        if (done) return 'ended as if complete';
        bytes += value.length;
      }
    })().catch((err: Error) => `failed: ${err.message}`);
    expect(outcome).toBe('failed: terminated');
    expect(bytes).toBeLessThan(7_000_000);
    expect((await c.get('/exports/usage.csv?from=2025-06-01&to=2025-06-01')).status).toBe(200);
  });
});
