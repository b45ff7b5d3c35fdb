// Chromium end-to-end, issue 29 (Recarga automática): the owner opens "Recarga automática", chooses
// a weekly recurrence with a R$ 100,00 target and a R$ 200,00 maximum by the visible pt-BR labels,
// gets the authorization QR and copia e cola; the simulated payer authorizes at their bank (the
// PSP's /rec callback) and the page shows it active with its first charge; the payer cancels at
// their bank and the page shows it cancelled. The payer's fields start from "Dados fiscais". Screenshots go to test-artifacts/portal/ (gitignored).
import { mkdirSync } from 'node:fs';
import { join } from 'node:path';
import type { Browser, Page } from 'playwright-core';
import { afterAll, beforeAll, expect, it } from 'vitest';
import { createPool } from '../../src/db/pool.ts';
import { type MailSink, startMailSink } from '../../src/mail/sink.ts';
import { saveProfile } from '../../src/nfse/profiles.ts';
import { hasValidCrc } from '../../src/pix/brcode.ts';
import { httpRequest } from '../../src/pix/http.ts';
import { getSetting, SETTINGS } from '../../src/pix/settings.ts';
import { startPortal, type Portal } from '../../src/portal/server.ts';
import { launchChromium, newPage, signIn } from '../helpers/browser.ts';
import { CHROMIUM, describeWith } from '../helpers/tools.ts';

const ARTIFACTS = join(process.cwd(), 'test-artifacts', 'portal');

describeWith(CHROMIUM, 'Recarga automática in Chromium', () => {
  const db = createPool(process.env.DATABASE_URL!, 2);
  let portal: Portal;
  let sink: MailSink;
  let browser: Browser;
  let page: Page;
  const shot = (name: string) => page.screenshot({ path: join(ARTIFACTS, `recurring-${name}.png`), fullPage: true });
  const payer = async (path: string, body: unknown = {}) => {
    const id = await getSetting(db, SETTINGS.simulatorClientId);
    const secret = await getSetting(db, SETTINGS.simulatorClientSecret);
    const res = await httpRequest(`${portal.simulator!.url}${path}`, {
      method: 'POST',
      headers: { authorization: `Basic ${Buffer.from(`${id}:${secret}`).toString('base64')}`, 'content-type': 'application/json' },
      body: JSON.stringify(body),
    });
    return res.status;
  };

  beforeAll(async () => {
    mkdirSync(ARTIFACTS, { recursive: true });
    sink = await startMailSink();
    portal = await startPortal({ db, nc: null, reconcileIntervalMs: 0, signupLimitPerHour: 1000, env: { PIX_PROVIDER: 'simulator', SMTP_URL: sink.url } });
    browser = await launchChromium();
    page = await newPage(browser);
    page.setDefaultTimeout(10_000);
  }, 120000);

  afterAll(async () => {
    await browser?.close();
    await portal?.close();
    await sink?.close();
    await db.end();
  }, 60000);

  it('authorizes a weekly recurrence (R$ 200,00 maximum, R$ 100,00 target), shows it active, then cancelled by the payer', async () => {
    const email = `auto.${Date.now()}@example.com`;
    const password = 'senha-da-recarga-123';
    await page.goto(`${portal.url}/signup`);
    await page.getByLabel('E-mail').fill(email);
    await page.getByLabel('Senha').fill(password);
    await page.getByRole('button', { name: 'Criar conta' }).click();
    await page.getByRole('heading', { name: 'Confira seu e-mail' }).waitFor();
    const mail = await sink.waitFor((m) => m.to.includes(email) && m.text.includes('/verify?token='));
    await page.goto(/https?:\/\/\S+\/verify\?token=[A-Za-z0-9_-]{43}/.exec(mail.text)![0]);
    await signIn(page, { url: `${portal.url}/login`, email, password, landing: '**/dashboard' });

    // the tenant's "Dados fiscais": the payer's fields start from them
    const tenantId = (await db.query('select tenant_id from portal_users where email = $1', [email])).rows[0].tenant_id as string;
    const saved = await saveProfile(
      db,
      tenantId,
      {
        document: '11444777000161',
        name: 'Empresa Pagadora Ltda',
        cep: '88015-100',
        street: 'Rua Felipe Schmidt',
        number: '100',
        district: 'Centro',
        cityCode: '4205407',
        uf: 'SC',
      },
      null,
    );
    expect(saved.ok).toBe(true);

    await page.getByRole('navigation').getByRole('link', { name: 'Adicionar saldo' }).click();
    await page.getByRole('link', { name: 'Recarga automática por Pix Automático' }).click();
    await page.getByRole('heading', { name: 'Recarga automática' }).waitFor();
    await page.getByLabel('Periodicidade').selectOption({ label: 'Semanal' });
    await page.getByLabel('Saldo alvo').fill('100,00');
    await page.getByLabel('Valor máximo por cobrança').fill('200,00');
    expect(await page.getByLabel('CPF ou CNPJ do pagador').inputValue()).toBe('11.444.777/0001-61');
    expect(await page.getByLabel('Nome do pagador').inputValue()).toBe('Empresa Pagadora Ltda');
    // this payer is someone else: the fields are the tenant's to change
    await page.getByLabel('CPF ou CNPJ do pagador').fill('123.456.789-09');
    await page.getByLabel('Nome do pagador').fill('Fulana de Tal');
    await shot('form');
    await page.getByRole('button', { name: 'Ativar recarga automática' }).click();

    await expect.poll(() => page.getByTestId('auto-status').textContent()).toBe('Aguardando autorização');
    const brCode = (await page.getByLabel('Pix copia e cola').inputValue()).trim();
    expect(hasValidCrc(brCode)).toBe(true);
    expect(brCode).toMatch(/80\d\d0014br\.gov\.bcb\.pix25\d\d.*\/qr\/v2\/rec\//);
    expect(await page.getByRole('img', { name: 'QR code Pix Automático' }).isVisible()).toBe(true);
    await shot('qr');

    // the payer scans it and authorizes at their bank (their own maximum R$ 200,00)
    const { rows } = await db.query(`select id_rec, tenant_id, max_micros, target_micros, periodicity from pix_recurrences where br_code = $1`, [brCode]);
    expect(rows[0]).toMatchObject({ max_micros: 200_000_000n, target_micros: 100_000_000n, periodicity: 'SEMANAL' });
    expect(await payer(`/sim/rec/${rows[0].id_rec}/autorizar`, { valorMaximo: '200.00' })).toBe(200);
    await page.reload();
    expect(await page.getByTestId('auto-status').textContent()).toBe('Ativa');
    // balance R$ 0,00, no spend: the first charge brings it to the target, R$ 100,00
    expect(await page.getByTestId('auto-charges').getByRole('row').nth(1).textContent()).toMatch(/R\$\s100,00.*Agendada/);
    await shot('active');

    // the payer cancels at their bank: the PSP's callback, then the page
    expect(await payer(`/sim/rec/${rows[0].id_rec}/cancelar`)).toBe(200);
    await expect.poll(async () => (await db.query('select status from pix_recurrences where id_rec = $1', [rows[0].id_rec])).rows[0].status).toBe('CANCELADA');
    await page.reload();
    expect(await page.getByTestId('auto-status').textContent()).toBe('Cancelada');
    expect(await page.getByTestId('auto-ended').textContent()).toContain('Cancelada por pagador (SLDB)');
    expect(await page.getByTestId('auto-charges').getByRole('row').nth(1).textContent()).toContain('Cancelada');
    // and the form is there again
    expect(await page.getByRole('button', { name: 'Ativar recarga automática' }).isVisible()).toBe(true);
    await shot('cancelled');
  }, 90_000);
});
