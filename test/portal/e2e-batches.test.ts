// Chromium end-to-end, issue 30 ("Lotes"): a developer signs in by the visible pt-BR labels, opens
// "Lotes" from the nav, reads a batch's counts and spend in its row, and downloads its output file
// (the stored bytes) and an Anthropic batch's results; a billing member sees the same page without
// the download links, and opening a download's address directly is refused (403 page). Fixture
// rows (batches-fixture.ts), no sign-up nor running batch, so it stays quick. Screenshots in
// test-artifacts/portal/ (gitignored).
import { mkdirSync, readFileSync } from 'node:fs';
import { join } from 'node:path';
import type { Browser, Page } from 'playwright-core';
import { afterAll, beforeAll, expect, it } from 'vitest';
import { createPool } from '../../src/db/pool.ts';
import { derivedRoleUrl } from '../../src/db/roles.ts';
import { type Portal, startPortal } from '../../src/portal/server.ts';
import { hashPassword } from '../../src/web/sign-in.ts';
import { launchChromium, newPage, signIn } from '../helpers/browser.ts';
import { CHROMIUM, describeWith } from '../helpers/tools.ts';
import { type BatchWorld, batchWorld, OUTPUT_JSONL, PASSWORD, brDay } from './batches-fixture.ts';

const ARTIFACTS = join(process.cwd(), 'test-artifacts', 'portal');

describeWith(CHROMIUM, 'Lotes in Chromium', () => {
  const db = createPool(process.env.DATABASE_URL!, 2);
  const portalDb = createPool(derivedRoleUrl(process.env.DATABASE_URL!, 'portal'), 2);
  let portal: Portal;
  let browser: Browser;
  let w: BatchWorld;
  const shot = (page: Page, name: string) => page.screenshot({ path: join(ARTIFACTS, `batches-${name}.png`), fullPage: true });

  beforeAll(async () => {
    mkdirSync(ARTIFACTS, { recursive: true });
    portal = await startPortal({ db: portalDb, nc: null, reconcileIntervalMs: 0, registerWebhook: false, env: { PIX_PROVIDER: 'simulator' } });
    w = await batchWorld(db, await hashPassword(PASSWORD));
    browser = await launchChromium();
  }, 120000);

  afterAll(async () => {
    await browser?.close();
    await portal?.close();
    await portalDb.end();
    await db.end();
  }, 60000);

  it('a developer reads a batch’s row and downloads its output and an Anthropic batch’s results; billing sees the page but may not download', async () => {
    const dev = await newPage(browser, { acceptDownloads: true });
    dev.setDefaultTimeout(15_000);
    await signIn(dev, { url: `${portal.url}/login`, email: w.emails.developer, password: PASSWORD, landing: '**/dashboard' });
    await dev.getByRole('link', { name: 'Lotes', exact: true }).click();
    await dev.getByRole('heading', { name: 'Lotes' }).waitFor();
    const chat = dev.getByRole('row', { name: new RegExp(w.chat) });
    expect((await chat.getByRole('cell').allInnerTexts()).map((t) => t.replace(/\s+/g, ' ').trim())).toEqual([
      w.chat,
      'OpenAI /v1/chat/completions',
      'Concluído',
      `${brDay(2)}, 10:00 ${brDay(2)}, 10:07`,
      '3',
      '2',
      '1',
      'R$ 3,58',
      'Saída · Erros',
    ]);
    await shot(dev, 'developer');
    const [output] = await Promise.all([dev.waitForEvent('download'), chat.getByRole('link', { name: 'Saída' }).click()]);
    expect(output.suggestedFilename()).toBe(`${w.chat}_output.jsonl`);
    expect(readFileSync((await output.path())!, 'utf8')).toBe(OUTPUT_JSONL);
    const messages = dev.getByRole('row', { name: new RegExp(w.messages) });
    expect(await messages.getByRole('cell', { name: 'R$ 0,02' }).count()).toBe(1);
    const [results] = await Promise.all([dev.waitForEvent('download'), messages.getByRole('link', { name: 'Resultados' }).click()]);
    expect(
      readFileSync((await results.path())!, 'utf8')
        .split('\n')
        .map((l) => (l ? JSON.parse(l).result.type : '')),
    ).toEqual(['succeeded', 'errored', '']);

    const billing = await newPage(browser);
    billing.setDefaultTimeout(15_000);
    await signIn(billing, { url: `${portal.url}/login`, email: w.emails.billing, password: PASSWORD, landing: '**/dashboard' });
    await billing.getByRole('link', { name: 'Lotes', exact: true }).click();
    const row = billing.getByRole('row', { name: new RegExp(w.chat) });
    expect((await row.getByRole('cell').allInnerTexts()).map((t) => t.replace(/\s+/g, ' ').trim())).toEqual([
      w.chat,
      'OpenAI /v1/chat/completions',
      'Concluído',
      `${brDay(2)}, 10:00 ${brDay(2)}, 10:07`,
      '3',
      '2',
      '1',
      'R$ 3,58',
    ]);
    expect(await billing.getByRole('link', { name: 'Saída' }).count()).toBe(0);
    await shot(billing, 'billing');
    const refused = await billing.goto(`${portal.url}/batches/${w.chat}/output`);
    expect(refused?.status()).toBe(403);
    await billing.getByTestId('message').waitFor();
    expect(await billing.getByTestId('message').textContent()).toContain('Financeiro');
  });
});
