// Chromium, driven by visible labels: the usage dashboard shows the spend of each São Paulo day on the
// chart without hovering (amounts over the bars, dates under them) and in the table beside it; the
// period is chosen with the presets and the date fields; the CSV exports download, and the statement's
// total is the ledger's. Screenshots go to test-artifacts/portal/ (gitignored).
import { mkdirSync, readFileSync } from 'node:fs';
import { join } from 'node:path';
import type { Browser, Page } from 'playwright-core';
import { afterAll, beforeAll, expect, it } from 'vitest';
import { createPool } from '../../src/db/pool.ts';
import { derivedRoleUrl } from '../../src/db/roles.ts';
import { startMailSink, type MailSink } from '../../src/mail/sink.ts';
import { type Portal, startPortal } from '../../src/portal/server.ts';
import { PortalClient, sinkMailbox } from './client.ts';
import { addDays, todayInSaoPaulo } from '../../src/portal/period.ts';
import { insertEntries, knownLedger, type LedgerEntry, uniq } from './usage-fixture.ts';
import { launchChromium, newPage, signIn } from '../helpers/browser.ts';
import { CHROMIUM, describeWith } from '../helpers/tools.ts';

/** The label over the bar of the day i days ago: 1,00 + i × 0,37. */
const bareAmount = (i: number) => {
  const centavos = 100 + 37 * i;
  return `${Math.floor(centavos / 100)},${String(centavos % 100).padStart(2, '0')}`;
};

const ARTIFACTS = join(process.cwd(), 'test-artifacts', 'portal');

describeWith(CHROMIUM, 'usage dashboard and exports in Chromium', () => {
  const db = createPool(process.env.DATABASE_URL!, 2);
  const portalDb = createPool(derivedRoleUrl(process.env.DATABASE_URL!, 'portal'), 4);
  let sink: MailSink;
  let portal: Portal;
  let browser: Browser;
  let page: Page;
  let tenantId: string;
  const email = `usage.e2e.${uniq()}@example.com`;
  const password = 'senha-bem-longa-123';

  beforeAll(async () => {
    mkdirSync(ARTIFACTS, { recursive: true });
    sink = await startMailSink();
    portal = await startPortal({
      db: portalDb,
      nc: null,
      reconcileIntervalMs: 0,
      signupLimitPerHour: 1000,
      env: { PIX_PROVIDER: 'simulator', SMTP_URL: sink.url },
    });
    const c = new PortalClient(portal.url, {}, { mailbox: sinkMailbox(sink) });
    expect((await c.signUp(email, password)).status).toBe(303);
    tenantId = (await db.query('select tenant_id from portal_users where email = $1', [email])).rows[0].tenant_id;
    await knownLedger(db, tenantId);
    // a debit at noon (São Paulo) of each of the last 30 days: R$ 1,00 + i × R$ 0,37
    await insertEntries(
      db,
      tenantId,
      Array.from(
        { length: 30 },
        (_, i): LedgerEntry => ({
          at: `${addDays(todayInSaoPaulo(), -i)}T15:00:00Z`,
          kind: 'debit',
          source: 'request',
          micros: 1_000_000n + BigInt(i) * 370_000n,
          balanceAfter: 0n,
          requestId: `month-${uniq()}`,
          model: 'sim/echo',
          tokens: { input: 1, output: 1 },
        }),
      ),
    );
    browser = await launchChromium();
    page = await newPage(browser, { viewport: { width: 1200, height: 1000 }, acceptDownloads: true });
  }, 120000);

  afterAll(async () => {
    await browser?.close();
    await portal?.close();
    await sink?.close();
    await db.end();
    await portalDb.end();
  }, 60000);

  it('values visible without hovering, the period chosen by its labels, the exports download', async () => {
    await signIn(page, { url: `${portal.url}/login`, email, password, landing: '**/dashboard' });

    // the presets are links named by their length
    await page.getByRole('link', { name: '7 dias' }).click();
    await page.waitForURL('**/dashboard?days=7');
    expect(await page.getByRole('link', { name: '7 dias' }).getAttribute('aria-current')).toBe('true');
    expect(await page.locator('[data-testid=spend-chart] rect').count()).toBe(7);

    // 30 days with spend every day: every bar carries its amount, every other day its date
    await page.getByRole('link', { name: '30 dias' }).click();
    await page.waitForURL('**/dashboard?days=30');
    const month = page.getByRole('img', { name: /^Gasto por dia de / });
    for (let i = 0; i < 30; i++) {
      const day = addDays(todayInSaoPaulo(), -i);
      expect(await month.getByText(bareAmount(i), { exact: true }).isVisible(), day).toBe(true);
      if ((29 - i) % 2 === 0) expect(await month.getByText(`${day.slice(8)}/${day.slice(5, 7)}`, { exact: true }).isVisible(), day).toBe(true);
    }
    await page.screenshot({ path: join(ARTIFACTS, 'usage-00-30-days.png'), fullPage: true });

    // a period of the known ledger, typed in the date fields
    await page.getByLabel('De', { exact: true }).fill('2025-03-01');
    await page.getByLabel('Até', { exact: true }).fill('2025-03-02');
    await page.getByRole('button', { name: 'Mostrar' }).click();
    await page.waitForURL('**/dashboard?from=2025-03-01&to=2025-03-02');
    await expect.poll(() => page.getByText('01/03/2025 a 02/03/2025, dias no horário de Brasília').isVisible()).toBe(true);

    // on the chart, without hovering: each day's amount over its bar, its date under it, the axis in R$
    const chart = page.getByRole('img', { name: 'Gasto por dia de 01/03/2025 a 02/03/2025' });
    expect(await chart.isVisible()).toBe(true);
    for (const label of ['1,234572', '0,000001', '01/03', '02/03', 'R$ 0,00', 'R$ 2,00'])
      expect(await chart.getByText(label, { exact: true }).isVisible(), label).toBe(true);
    // the table beside it, the same numbers
    const table = page.getByRole('table').filter({ has: page.getByRole('columnheader', { name: 'Dia' }) });
    expect(await table.getByRole('row', { name: '01/03/2025 2 R$ 1,234572' }).isVisible()).toBe(true);
    expect(await table.getByRole('row', { name: '02/03/2025 1 R$ 0,000001' }).isVisible()).toBe(true);
    expect(await table.getByRole('row', { name: 'Total 3 R$ 1,234573' }).isVisible()).toBe(true);
    // the breakdowns
    expect(await page.getByRole('heading', { name: 'Gasto por usuário final' }).isVisible()).toBe(true);
    expect(await page.getByRole('cell', { name: '=cmd|calc' }).isVisible()).toBe(true);
    await page.screenshot({ path: join(ARTIFACTS, 'usage-01-dashboard.png'), fullPage: true });

    // the statement downloads, named by its period, its amounts adding up to the ledger's
    const [statement] = await Promise.all([page.waitForEvent('download'), page.getByRole('link', { name: 'Baixar extrato (CSV)' }).click()]);
    expect(statement.suggestedFilename()).toBe('catraca-statement_2025-03-01_2025-03-02.csv');
    const text = readFileSync((await statement.path())!, 'utf8');
    const lines = text.trimEnd().split('\r\n');
    expect(lines[0].startsWith('entry_id,time_sao_paulo,time_utc,kind,source,')).toBe(true);
    expect(lines).toHaveLength(7);
    const net = lines.slice(1).reduce((s, l) => {
      const [, sign, int, frac] = /^(-?)(\d+)\.(\d{6})$/.exec(l.split(',').at(-5)!)!;
      const v = BigInt(int) * 1_000_000n + BigInt(frac);
      return s + (sign ? -v : v);
    }, 0n);
    expect(net).toBe(38_765_428n);
    const [usage] = await Promise.all([
      page.waitForEvent('download'),
      page.getByRole('link', { name: 'Baixar uso por dia, modelo, chave e usuário final (CSV)' }).click(),
    ]);
    expect(usage.suggestedFilename()).toBe('catraca-usage_2025-03-01_2025-03-02.csv');
    expect(readFileSync((await usage.path())!, 'utf8')).toContain(',1.234572\r\n');

    // English: dates as Mar 1, the same values
    await page.getByRole('link', { name: 'English' }).click();
    await page.waitForURL(/lang=en/);
    const chartEn = page.getByRole('img', { name: 'Spend per day from Mar 1, 2025 to Mar 2, 2025' });
    for (const label of ['1.234572', 'Mar 1', 'Mar 2']) expect(await chartEn.getByText(label, { exact: true }).isVisible(), label).toBe(true);
    await page.screenshot({ path: join(ARTIFACTS, 'usage-02-dashboard-en.png'), fullPage: true });
  }, 120000);
});
