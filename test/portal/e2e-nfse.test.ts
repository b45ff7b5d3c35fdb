// Chromium end-to-end, issue 28 (notas fiscais): an owner signs in, opens "Dados fiscais" from the
// nav and fills it by the visible pt-BR labels — a CNPJ with wrong check digits first, refused by
// the server with its message — then saves a valid one, tops up by Pix (the simulator's pay
// button), the Sefin Nacional simulator issues the note, and from "Notas fiscais" the owner
// downloads the XML (the bytes stored, byte for byte) and the DANFSe PDF (its text carries the
// access key). A database of its own: NFS-e issuing is database-wide (nfse_settings), it must not
// make notes of other files' top-ups. Screenshots in test-artifacts/portal/ (gitignored).
import { mkdirSync, mkdtempSync, readFileSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import type pg from 'pg';
import type { Browser, Page } from 'playwright-core';
import { afterAll, beforeAll, expect, it } from 'vitest';
import { loadConfig } from '../../src/config.ts';
import { createPool } from '../../src/db/pool.ts';
import { derivedRoleUrl } from '../../src/db/roles.ts';
import { createTenant } from '../../src/db/tenants.ts';
import { selfSignedPkcs12 } from '../../src/nfse/certificate.ts';
import { loadNfseSetup } from '../../src/nfse/settings.ts';
import type { InvoiceRow } from '../../src/nfse/store.ts';
import { type Portal, startPortal } from '../../src/portal/server.ts';
import { hashPassword } from '../../src/web/sign-in.ts';
import { launchChromium, newPage, signIn } from '../helpers/browser.ts';
import { type OwnDatabase, ownDatabase } from '../helpers/own-database.ts';
import { pdfText } from '../helpers/pdf-text.ts';
import { CHROMIUM, describeWith } from '../helpers/tools.ts';

const ARTIFACTS = join(process.cwd(), 'test-artifacts', 'portal');

describeWith(CHROMIUM, 'Notas fiscais in Chromium', () => {
  let own: OwnDatabase;
  let admin: pg.Pool;
  let portalDb: pg.Pool;
  let portal: Portal;
  let browser: Browser;
  let page: Page;
  const shot = (name: string) => page.screenshot({ path: join(ARTIFACTS, `nfse-${name}.png`), fullPage: true });

  beforeAll(async () => {
    mkdirSync(ARTIFACTS, { recursive: true });
    own = await ownDatabase('nfsee2e', { migrate: true });
    admin = createPool(own.url, 2);
    portalDb = createPool(derivedRoleUrl(own.url, 'portal'), 4);
    const dir = mkdtempSync(join(tmpdir(), 'nfse-e2e-'));
    writeFileSync(join(dir, 'a1.pfx'), selfSignedPkcs12({ name: 'CATRACA TESTE LTDA', document: '11222333000181', password: 'a1-pass-test' }).pfx);
    const setup = loadNfseSetup(
      loadConfig({
        NFSE_PROVIDER: 'simulator',
        NFSE_CERT_PFX: join(dir, 'a1.pfx'),
        NFSE_CERT_PASSWORD: 'a1-pass-test',
        NFSE_MUNICIPIO: '4205407',
        NFSE_SERVICE_CODE: '010301',
        NFSE_ISS_RATE: '2',
      }),
    );
    portal = await startPortal({
      db: portalDb,
      nc: null,
      env: { PIX_PROVIDER: 'simulator' },
      devMode: true,
      reconcileIntervalMs: 0,
      nfse: { setup, tuning: { retryMs: [300], relayIntervalMs: 150, sweepIntervalMs: 1000, leaseMs: 5000 } },
    });
    browser = await launchChromium();
    page = await newPage(browser, { acceptDownloads: true });
    page.setDefaultTimeout(15_000);
  }, 120_000);

  afterAll(async () => {
    await browser?.close();
    await portal?.close();
    await portalDb?.end();
    await admin?.end();
    await own?.drop();
  }, 60_000);

  it('fills Dados fiscais (a wrong CNPJ first), tops up, and downloads the note’s XML and PDF from Notas fiscais', async () => {
    const t = await createTenant(admin, 'Empresa do Teste');
    const email = `nfse.${Date.now()}@example.com`;
    const password = 'senha-da-nota-123';
    await admin.query(
      `insert into portal_users (id, tenant_id, email, password_hash, role, email_verified_at) values ('usr_nfse_e2e_owner', $1, $2, $3, 'owner', now())`,
      [t.id, email, await hashPassword(password)],
    );
    await signIn(page, { url: `${portal.url}/login`, email, password, landing: '**/dashboard' });

    // the top-up waits for the profile
    await page.getByRole('navigation').getByRole('link', { name: 'Adicionar saldo' }).click();
    await page.getByTestId('profile-first').waitFor();
    expect(await page.getByTestId('topup-amount').count()).toBe(0);
    await page.getByRole('link', { name: 'Preencher os Dados fiscais' }).click();
    await page.getByRole('heading', { name: 'Dados fiscais' }).waitFor();

    // a CNPJ with a wrong check digit: the server refuses it, naming it (the browser checks nothing but the required fields)
    await page.getByLabel('CNPJ ou CPF', { exact: true }).fill('11.444.777/0001-62');
    await page.getByLabel('Razão social', { exact: true }).fill('Empresa do Teste Ltda');
    await page.getByLabel('E-mail para notas', { exact: true }).fill('fiscal@empresa.example');
    await page.getByLabel('CEP', { exact: true }).fill('88015-100');
    await page.getByLabel('Logradouro', { exact: true }).fill('Rua Felipe Schmidt');
    await page.getByLabel('Número', { exact: true }).fill('100');
    await page.getByLabel('Bairro', { exact: true }).fill('Centro');
    await page.getByLabel('Código IBGE do município', { exact: true }).fill('4205407');
    await page.getByLabel('UF', { exact: true }).fill('SC');
    await page.getByLabel('Inscrição municipal', { exact: true }).fill('98765');
    await page.getByRole('button', { name: 'Salvar' }).click();
    await page.getByTestId('fiscal-error-document').waitFor();
    expect(await page.getByTestId('fiscal-error-document').textContent()).toBe('CNPJ inválido: 11.444.777/0001-62 (confira os dígitos verificadores).');
    // what was typed is kept
    expect(await page.getByLabel('Razão social', { exact: true }).inputValue()).toBe('Empresa do Teste Ltda');
    await shot('profile-refused');

    await page.getByLabel('CNPJ ou CPF', { exact: true }).fill('11.444.777/0001-61');
    await page.getByRole('button', { name: 'Salvar' }).click();
    await page.getByText('Dados fiscais salvos.').waitFor();
    expect(await page.getByLabel('CNPJ ou CPF', { exact: true }).inputValue()).toBe('11.444.777/0001-61');
    await shot('profile-saved');

    // the top-up, paid with the Pix simulator
    await page.getByRole('navigation').getByRole('link', { name: 'Adicionar saldo' }).click();
    await page.getByLabel('Valor (R$)').fill('42,00');
    await page.getByRole('button', { name: 'Gerar Pix' }).click();
    await page.getByRole('button', { name: 'Pagar com o simulador (desenvolvimento)' }).click();
    await expect.poll(() => page.getByTestId('charge-status').textContent(), { timeout: 15_000 }).toBe('Paga');
    const txid = new URL(page.url()).pathname.split('/')[2];

    // the note, issued by the Sefin simulator
    let inv: InvoiceRow | undefined;
    await expect
      .poll(
        async () => {
          inv = (await admin.query('select * from invoices where pix_txid = $1', [txid])).rows[0];
          return inv?.state;
        },
        { timeout: 30_000 },
      )
      .toBe('issued');
    if (!inv) throw new Error('no note');
    expect(inv.amount_micros).toBe(42_000_000n);
    expect(inv.dps_xml).toContain('<toma><CNPJ>11444777000161</CNPJ><IM>98765</IM><xNome>Empresa do Teste Ltda</xNome>');

    await page.getByRole('navigation').getByRole('link', { name: 'Notas fiscais' }).click();
    await page.getByRole('heading', { name: 'Notas fiscais' }).waitFor();
    const row = page.getByTestId(`invoice-${inv.id}`);
    expect(await row.getByTestId('invoice-key').textContent()).toBe(inv.access_key);
    expect(await row.getByTestId('invoice-status').textContent()).toBe('Emitida');
    expect((await row.getByRole('cell').nth(3).textContent())?.replace(/\s/g, ' ')).toBe('R$ 42,00');
    await shot('notes');

    const [xmlDownload] = await Promise.all([page.waitForEvent('download'), row.getByRole('link', { name: 'XML' }).click()]);
    expect(xmlDownload.suggestedFilename()).toBe(`NFSe-${inv.access_key}.xml`);
    expect(readFileSync((await xmlDownload.path())!).equals(inv.nfse_xml!)).toBe(true);

    const [pdfDownload] = await Promise.all([page.waitForEvent('download'), row.getByRole('link', { name: 'PDF' }).click()]);
    expect(pdfDownload.suggestedFilename()).toBe(`DANFSe-${inv.access_key}.pdf`);
    const pdf = readFileSync((await pdfDownload.path())!);
    expect(pdf.subarray(0, 5).toString('latin1')).toBe('%PDF-');
    expect(pdfText(pdf).split('\n')).toEqual(expect.arrayContaining([inv.access_key!, '11.444.777/0001-61', 'Empresa do Teste Ltda', 'R$ 42,00']));
  }, 120_000);
});
