// Chromium end-to-end, issue 30 ("Lotes"): a developer signs in by the visible pt-BR labels, opens
// "Lotes" from the nav, reads a batch's counts and spend in its row, and downloads its output file
// (the stored bytes) and an Anthropic batch's results; a billing member sees the same page without
// the download links, and opening a download's address directly is refused (403 page). Fixture
// rows (batches-fixture.ts), no sign-up nor running batch, so it stays quick. An admin cancels a
// batch in progress ("Cancelar", then "Sim, cancelar"): "Cancelando", and "Cancelado" with its counts
// once the lines are ended as a front door's runner ends them. Screenshots in test-artifacts/portal/ (gitignored).
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
import { finalizeIfDone, NOT_RUN } from '../../src/batch/runner.ts';
import { type BatchWorld, batchWorld, brDay, OUTPUT_JSONL, PASSWORD, QUEUED_INPUT, type RunningBatches, runningBatches } from './batches-fixture.ts';

const ARTIFACTS = join(process.cwd(), 'test-artifacts', 'portal');

describeWith(CHROMIUM, 'Lotes in Chromium', () => {
  const db = createPool(process.env.DATABASE_URL!, 2);
  const portalDb = createPool(derivedRoleUrl(process.env.DATABASE_URL!, 'portal'), 2);
  let portal: Portal;
  let browser: Browser;
  let w: BatchWorld;
  let run: RunningBatches;
  const shot = (page: Page, name: string) => page.screenshot({ path: join(ARTIFACTS, `batches-${name}.png`), fullPage: true });

  beforeAll(async () => {
    mkdirSync(ARTIFACTS, { recursive: true });
    portal = await startPortal({ db: portalDb, nc: null, reconcileIntervalMs: 0, registerWebhook: false, env: { PIX_PROVIDER: 'simulator' } });
    w = await batchWorld(db, await hashPassword(PASSWORD));
    run = await runningBatches(db, w.tenantId);
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
      '',
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

  it('an admin cancels a batch in progress: the confirmation, "Cancelando", then "Cancelado" with its counts; its input downloads', async () => {
    const admin = await newPage(browser, { acceptDownloads: true });
    admin.setDefaultTimeout(15_000);
    await signIn(admin, { url: `${portal.url}/login`, email: w.emails.admin, password: PASSWORD, landing: '**/dashboard' });
    await admin.getByRole('link', { name: 'Lotes', exact: true }).click();
    const row = admin.getByRole('row', { name: new RegExp(run.queued) });
    const [input] = await Promise.all([admin.waitForEvent('download'), row.getByRole('link', { name: 'Entrada' }).click()]);
    expect(readFileSync((await input.path())!, 'utf8')).toBe(QUEUED_INPUT);
    expect(await row.getByTestId('batch-status').textContent()).toBe('Em andamento');
    await row.getByRole('link', { name: 'Cancelar', exact: true }).click();
    await admin.getByRole('heading', { name: `Cancelar o lote ${run.queued}?` }).waitFor();
    await shot(admin, 'cancel-confirm');
    await admin.getByRole('button', { name: 'Sim, cancelar' }).click();
    await admin.waitForURL(`**/batches?cancelled=${run.queued}`);
    expect(await admin.getByText(`O lote ${run.queued} está sendo cancelado.`).count()).toBe(1);
    const cancelling = admin.getByRole('row', { name: new RegExp(run.queued) });
    expect(await cancelling.getByTestId('batch-status').textContent()).toBe('Cancelando');
    // no second cancel offered
    expect(await cancelling.getByRole('link', { name: 'Cancelar', exact: true }).count()).toBe(0);
    // the front door's runners: the lines not started end not run, the running one answers, the batch ends
    await db.query(
      `insert into batch_results (batch_id, line, custom_id, error, ok) select $1, g, 'q-' || g, $2, false from generate_series(0, 3) g on conflict do nothing`,
      [run.queued, NOT_RUN.cancelled],
    );
    await db.query(
      `with r as (update batch_results set status_code = 200, body = '{"ok":1}', ok = true where batch_id = $1 and line = 1 and ok is null returning ok)
       update batches set completed = completed + (select count(*) from r) where id = $1`,
      [run.queued],
    );
    expect((await finalizeIfDone(db, run.queued, 30))?.status).toBe('cancelled');
    await admin.reload();
    const cancelled = admin.getByRole('row', { name: new RegExp(run.queued) });
    const cells = (await cancelled.getByRole('cell').allInnerTexts()).map((t) => t.replace(/\s+/g, ' ').trim());
    expect([cells[2], cells[4], cells[5], cells[6], cells[8], cells[9]]).toEqual(['Cancelado', '4', '2', '0', 'Entrada · Saída · Erros', '']);
    await shot(admin, 'cancelled');
  });
});
