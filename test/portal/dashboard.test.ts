// The usage dashboard (issue 20): spend per São Paulo day for a chosen period, as a chart whose values
// are written on it and as a table of the same numbers, and the spend by model, key and end user.
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createPool } from '../../src/db/pool.ts';
import { derivedRoleUrl } from '../../src/db/roles.ts';
import { startMailSink, type MailSink } from '../../src/mail/sink.ts';
import { addDays, todayInSaoPaulo } from '../../src/portal/period.ts';
import { type Portal, startPortal } from '../../src/portal/server.ts';
import { PortalClient, sinkMailbox } from './client.ts';
import { insertEntries, knownLedger, type LedgerEntry, otherTenantLedger, uniq } from './usage-fixture.ts';

const db = createPool(process.env.DATABASE_URL!, 4);
const portalDb = createPool(derivedRoleUrl(process.env.DATABASE_URL!, 'portal'), 4);
let sink: MailSink;
let portal: Portal;

beforeAll(async () => {
  sink = await startMailSink();
  portal = await startPortal({
    db: portalDb,
    nc: null,
    reconcileIntervalMs: 0,
    signupLimitPerHour: 1000,
    env: { PIX_PROVIDER: 'simulator', SMTP_URL: sink.url },
  });
});
afterAll(async () => {
  await portal?.close();
  await sink?.close();
  await db.end();
  await portalDb.end();
});

async function account() {
  const c = new PortalClient(portal.url, {}, { mailbox: sinkMailbox(sink) });
  const email = `dash.${uniq()}@example.com`;
  expect((await c.signUp(email)).status).toBe(303);
  const tenantId = (await db.query('select tenant_id from portal_users where email = $1', [email])).rows[0].tenant_id as string;
  return { c, tenantId };
}

/** The rows of a table of the page as arrays of cell texts (tags dropped, entities decoded). */
function tableRows(page: string, testid: string): string[][] {
  const table = new RegExp(`<table data-testid="${testid}">([\\s\\S]*?)</table>`).exec(page)?.[1];
  if (!table) throw new Error(`no table ${testid}`);
  return [...table.matchAll(/<tr[^>]*>([\s\S]*?)<\/tr>/g)].map((tr) =>
    [...tr[1].matchAll(/<t[hd][^>]*>([\s\S]*?)<\/t[hd]>/g)].map((td) =>
      td[1]
        .replace(/<[^>]+>/g, '')
        .replace(/&quot;/g, '"')
        .replace(/&#39;/g, "'")
        .replace(/&lt;/g, '<')
        .replace(/&gt;/g, '>')
        .replace(/&amp;/g, '&')
        .trim(),
    ),
  );
}

describe('a known ledger on the dashboard', () => {
  let c: PortalClient;
  let page: string;
  beforeAll(async () => {
    const a = await account();
    c = a.c;
    await knownLedger(db, a.tenantId);
    await otherTenantLedger(db);
    const r = await c.get('/dashboard?from=2025-03-01&to=2025-03-02');
    expect(r.status).toBe(200);
    page = r.text;
  });

  it('spend per São Paulo day: the table (newest first, a total), the same numbers as the bars', () => {
    expect(tableRows(page, 'day-table')).toEqual([
      ['Dia', 'Requisições', 'Gasto'],
      ['02/03/2025', '1', 'R$ 0,000001'],
      ['01/03/2025', '2', 'R$ 1,234572'],
      ['Total', '3', 'R$ 1,234573'],
    ]);
    const bars = [...page.matchAll(/<rect [^>]*data-day="([\d-]+)" data-micros="(\d+)"/g)].map((m) => [m[1], m[2]]);
    expect(bars).toEqual([
      ['2025-03-01', '1234572'],
      ['2025-03-02', '1'],
    ]);
    expect(page).toContain('<p class="muted" data-testid="period-range">01/03/2025 a 02/03/2025, dias no horário de Brasília</p>');
  });

  it('values on the chart without hovering: amounts over the bars, dd/mm dates, a value axis in R$', () => {
    const values = [...page.matchAll(/<text class="lbl value" data-day="([\d-]+)"[^>]*>([^<]*)<\/text>/g)].map((m) => [m[1], m[2]]);
    expect(values).toEqual([
      ['2025-03-01', '1,234572'],
      ['2025-03-02', '0,000001'],
    ]);
    const dates = [...page.matchAll(/<text class="lbl date"[^>]*>([^<]*)<\/text>/g)].map((m) => m[1]);
    expect(dates).toEqual(['01/03', '02/03']);
    // the axis: 0 to 4 steps of R$ 0,50 (the smallest 1-2-5 step whose 4 reach R$ 1,234572)
    const ticks = [...page.matchAll(/<text [^>]*class="lbl tick"[^>]*>([^<]*)<\/text>/g)].map((m) => m[1]);
    expect(ticks).toEqual(['R$ 0,00', 'R$ 0,50', 'R$ 1,00', 'R$ 1,50', 'R$ 2,00']);
  });

  it('spend by model, by key and by end user for the period; nothing of another tenant', () => {
    expect(tableRows(page, 'by-model')).toEqual([
      ['Modelo', 'Requisições', 'Tokens de entrada', 'Tokens de saída', 'Gasto em lote', 'Gasto'],
      ['sim/echo', '2', '1.010', '220', 'R$ 0,00', 'R$ 1,234572'],
      ['sim/lorem', '1', '10', '5', 'R$ 0,000001', 'R$ 0,000001'],
    ]);
    expect(tableRows(page, 'by-key')).toEqual([
      ['Chave', 'Requisições', 'Gasto'],
      ['=HYPERLINK("http://evil.example")', '2', 'R$ 1,234572'],
      ['Padaria, "Zé"', '1', 'R$ 0,000001'],
    ]);
    expect(tableRows(page, 'by-end-user')).toEqual([
      ['Usuário final', 'Requisições', 'Gasto'],
      ['=cmd|calc', '2', 'R$ 1,234572'],
      ['cliente "A", filial\nnorte', '1', 'R$ 0,000001'],
    ]);
    expect(page).not.toContain('sim/b-only');
    expect(page).not.toContain('tenant-b-key');
  });

  it('the export links carry the period', () => {
    expect(page).toContain('href="/exports/statement.csv?from=2025-03-01&amp;to=2025-03-02"');
    expect(page).toContain('href="/exports/usage.csv?from=2025-03-01&amp;to=2025-03-02"');
  });

  it('in English: Mar 1 dates, R$ 1.234572 amounts', async () => {
    const en = (await c.get('/dashboard?from=2025-03-01&to=2025-03-02&lang=en')).text;
    expect(tableRows(en, 'day-table')).toEqual([
      ['Day', 'Requests', 'Spend'],
      ['Mar 2, 2025', '1', 'R$ 0.000001'],
      ['Mar 1, 2025', '2', 'R$ 1.234572'],
      ['Total', '3', 'R$ 1.234573'],
    ]);
    expect([...en.matchAll(/<text class="lbl date"[^>]*>([^<]*)<\/text>/g)].map((m) => m[1])).toEqual(['Mar 1', 'Mar 2']);
    expect(en).toContain('Mar 1, 2025 to Mar 2, 2025, days in São Paulo time');
    expect(en).toContain('<h2>Spend per end user</h2>');
  });
});

describe('periods and buckets', () => {
  it('the presets: 7, 30 and 90 days up to today (São Paulo), one bar and one table row per day', async () => {
    const { c, tenantId } = await account();
    const today = todayInSaoPaulo();
    // today at 00:30 São Paulo (03:30 UTC) and yesterday at 23:30 São Paulo (02:30 UTC today)
    await insertEntries(db, tenantId, [
      {
        at: `${today}T03:30:00Z`,
        kind: 'debit',
        source: 'request',
        micros: 2_500_000n,
        balanceAfter: 0n,
        requestId: `t-${uniq()}`,
        model: 'sim/echo',
        tokens: { input: 1, output: 1 },
      },
      {
        at: `${today}T02:30:00Z`,
        kind: 'debit',
        source: 'request',
        micros: 1_000_000n,
        balanceAfter: 0n,
        requestId: `y-${uniq()}`,
        model: 'sim/echo',
        tokens: { input: 1, output: 1 },
      },
    ]);
    for (const [q, n] of [
      ['', 30],
      ['?days=7', 7],
      ['?days=30', 30],
      ['?days=90', 90],
    ] as const) {
      const page = (await c.get(`/dashboard${q}`)).text;
      const bars = [...page.matchAll(/<rect [^>]*data-day="([\d-]+)" data-micros="(\d+)"/g)].map((m) => [m[1], m[2]]);
      expect(bars).toHaveLength(n);
      expect(bars[0][0]).toBe(addDays(today, -(n - 1)));
      expect(bars.at(-1)).toEqual([today, '2500000']);
      expect(bars.at(-2)).toEqual([addDays(today, -1), '1000000']);
      const rows = tableRows(page, 'day-table');
      expect(rows).toHaveLength(n + 2);
      expect(rows.at(-1)).toEqual(['Total', '2', 'R$ 3,50']);
      expect(page).toMatch(new RegExp(`<a href="/dashboard\\?days=${n}" class="preset current" aria-current="true">${n} dias</a>`));
    }
    // 90 days: the busiest day keeps its label over the bar, the others are in the table
    const long = (await c.get('/dashboard?days=90')).text;
    expect([...long.matchAll(/<text class="lbl value" data-day="([\d-]+)"/g)].map((m) => m[1])).toEqual([today]);
  });

  it('more than 20 end users: the 20 that spent most, and the others in one row', async () => {
    const { c, tenantId } = await account();
    await insertEntries(db, tenantId, [
      ...Array.from({ length: 23 }, (_, n) => n + 1).map(
        (i): LedgerEntry => ({
          at: '2025-05-10T15:00:00Z',
          kind: 'debit',
          source: 'request',
          micros: BigInt(i) * 10_000n,
          balanceAfter: 0n,
          requestId: `eu-${uniq()}`,
          model: 'sim/echo',
          endUser: `user-${String(i).padStart(2, '0')}`,
          tokens: { input: 1, output: 1 },
        }),
      ),
      {
        at: '2025-05-10T16:00:00Z',
        kind: 'debit',
        source: 'request',
        micros: 5_000n,
        balanceAfter: 0n,
        requestId: `eu-${uniq()}`,
        model: 'sim/echo',
        tokens: { input: 1, output: 1 },
      },
    ]);
    const rows = tableRows((await c.get('/dashboard?from=2025-05-10&to=2025-05-10')).text, 'by-end-user');
    expect(rows).toHaveLength(1 + 20 + 1);
    expect(rows[1]).toEqual(['user-23', '1', 'R$ 0,23']);
    expect(rows[20]).toEqual(['user-04', '1', 'R$ 0,04']);
    // user-03, -02, -01 and the requests that named no end user: 4 more, R$ 0,065
    expect(rows[21]).toEqual(['Outros 4 usuários finais', '4', 'R$ 0,065']);
  });
});
