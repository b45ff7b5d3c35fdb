// Chromium end-to-end, issue 20 (team members): the owner invites a developer; the developer opens
// the link from the SMTP sink, sets a password, creates a key; cannot see billing nor revoke the
// owner's key — the server answers 403 / 404 to direct requests, not only hidden links; the owner
// removes the developer and the developer's open session ends. Driven by the visible labels (pt-BR).
// Screenshots go to test-artifacts/portal/ (gitignored).
import { mkdirSync } from 'node:fs';
import { join } from 'node:path';
import type { Browser, Page } from 'playwright-core';
import { afterAll, beforeAll, expect, it } from 'vitest';
import { createPool } from '../../src/db/pool.ts';
import { type MailSink, startMailSink } from '../../src/mail/sink.ts';
import { startPortal, type Portal } from '../../src/portal/server.ts';
import { launchChromium, newPage, signIn } from '../helpers/browser.ts';
import { CHROMIUM, describeWith } from '../helpers/tools.ts';

const ARTIFACTS = join(process.cwd(), 'test-artifacts', 'portal');

describeWith(CHROMIUM, 'team members in Chromium', () => {
  const db = createPool(process.env.DATABASE_URL!, 2);
  let portal: Portal;
  let sink: MailSink;
  let browser: Browser;
  let owner: Page;
  let dev: Page;
  const shot = (page: Page, name: string) => page.screenshot({ path: join(ARTIFACTS, `members-${name}.png`), fullPage: true });
  /** The first link of this kind in the newest e-mail to this address. */
  const linkIn = async (to: string, path: string) => {
    const mail = await sink.waitFor((m) => m.to.includes(to) && m.text.includes(`/${path}?token=`));
    return new RegExp(`https?://\\S+/${path}\\?token=[A-Za-z0-9_-]{43}`).exec(mail.text)![0];
  };

  beforeAll(async () => {
    mkdirSync(ARTIFACTS, { recursive: true });
    sink = await startMailSink();
    portal = await startPortal({
      db,
      nc: null,
      reconcileIntervalMs: 0,
      registerWebhook: false,
      signupLimitPerHour: 1000,
      env: { PIX_PROVIDER: 'simulator', SMTP_URL: sink.url },
    });
    browser = await launchChromium();
    // two people, two browsers (separate cookie jars)
    owner = await newPage(browser);
    dev = await newPage(browser);
  }, 120000);

  afterAll(async () => {
    await browser?.close();
    await portal?.close();
    await sink?.close();
    await db.end();
  }, 60000);

  it('invite a developer, who creates a key and is kept from billing and the owner’s key; removed, their session ends', async () => {
    const ownerEmail = `dona.${Date.now()}@example.com`;
    const devEmail = `dev.${Date.now()}@example.com`;
    const ownerPassword = 'senha-da-dona-123';
    const devPassword = 'senha-do-dev-4567';

    // 1. The owner signs up, confirms the address from the e-mail, signs in, makes a key.
    await owner.goto(`${portal.url}/signup`);
    await owner.getByLabel('E-mail').fill(ownerEmail);
    await owner.getByLabel('Senha').fill(ownerPassword);
    await owner.getByLabel('Nome da empresa ou projeto (opcional)').fill('Padaria do Zé');
    await owner.getByRole('button', { name: 'Criar conta' }).click();
    await owner.getByRole('heading', { name: 'Confira seu e-mail' }).waitFor();
    await owner.goto(await linkIn(ownerEmail, 'verify'));
    await owner.getByRole('link', { name: 'Entrar' }).first().click();
    await signIn(owner, { email: ownerEmail, password: ownerPassword, landing: '**/dashboard' });
    await owner.getByRole('link', { name: 'Chaves de API' }).click();
    await owner.getByLabel('Rótulo').fill('chave-da-dona');
    await owner.getByRole('button', { name: 'Criar chave' }).click();
    await owner.getByRole('heading', { name: 'Sua nova chave: chave-da-dona' }).waitFor();
    const ownerKeyHref = await owner
      .getByRole('row', { name: /chave-da-dona/ })
      .getByRole('link', { name: 'Revogar' })
      .getAttribute('href');
    expect(ownerKeyHref).toMatch(/^\/keys\/key_[a-z0-9]+\/revoke$/);

    // 2. Members → invite the developer.
    await owner.getByRole('link', { name: 'Membros' }).click();
    await owner.getByRole('heading', { name: 'Membros da equipe' }).waitFor();
    const inviteForm = owner.locator('section', { has: owner.getByRole('heading', { name: 'Convidar alguém' }) });
    await inviteForm.getByLabel('E-mail').fill(devEmail);
    await inviteForm.getByRole('combobox').selectOption({ label: 'Desenvolvedor' });
    await shot(owner, '01-invite');
    await inviteForm.getByRole('button', { name: 'Convidar' }).click();
    expect(await owner.getByRole('status').textContent()).toBe('Convite enviado.');
    expect(await owner.getByRole('row', { name: new RegExp(devEmail.replace(/\./g, '\\.')) }).textContent()).toContain('Desenvolvedor');
    await shot(owner, '02-invited');

    // 3. The developer opens the link from the e-mail, sets a password: signed in as a member.
    const link = await linkIn(devEmail, 'invite');
    await dev.goto(link);
    await dev.getByRole('heading', { name: 'Convite para Padaria do Zé' }).waitFor();
    expect(await dev.getByText(`${ownerEmail} convidou ${devEmail}`).count()).toBe(1);
    await shot(dev, '03-invitation');
    await dev.getByLabel('Senha').fill(devPassword);
    await dev.getByRole('button', { name: 'Aceitar convite' }).click();
    await dev.waitForURL('**/dashboard');
    // the navigation has no billing and no members
    for (const name of ['Adicionar saldo', 'Extrato', 'Membros']) expect(await dev.getByRole('link', { name }).count()).toBe(0);
    await shot(dev, '04-dev-dashboard');

    // 4. A key of their own; the owner's key is not on their page.
    await dev.getByRole('link', { name: 'Chaves de API' }).click();
    await dev.getByLabel('Rótulo').fill('chave-do-dev');
    await dev.getByRole('button', { name: 'Criar chave' }).click();
    const created = dev.locator('section', { has: dev.getByRole('heading', { name: 'Sua nova chave: chave-do-dev' }) });
    expect(await created.getByRole('textbox').inputValue()).toMatch(/^sk-cat-v1-[0-9a-f]{64}$/);
    await dev.goto(`${portal.url}/keys`);
    expect(await dev.getByRole('row', { name: /chave-do-dev/ }).count()).toBe(1);
    expect(await dev.getByRole('row', { name: /chave-da-dona/ }).count()).toBe(0);
    await shot(dev, '05-dev-keys');

    // 5. Billing and the owner's key, asked for directly: refused by the server.
    for (const path of ['/ledger', '/topup', '/members']) {
      const res = await dev.goto(`${portal.url}${path}`);
      expect({ path, status: res!.status() }).toEqual({ path, status: 403 });
      expect(await dev.title()).toBe('Acesso negado · catraca');
      expect(await dev.getByText('Seu papel (Desenvolvedor) não permite esta página ou ação.').count()).toBe(1);
    }
    await shot(dev, '06-dev-403');
    expect((await dev.goto(`${portal.url}${ownerKeyHref}`))!.status()).toBe(404);
    await dev.goto(`${portal.url}/keys`);
    const csrf = await dev.locator('input[name=_csrf]').first().inputValue();
    const forced = await dev.request.post(`${portal.url}${ownerKeyHref}`, { form: { _csrf: csrf }, maxRedirects: 0 });
    expect(forced.status()).toBe(404);
    expect((await db.query(`select revoked_at from api_keys where label = 'chave-da-dona'`)).rows).toEqual([{ revoked_at: null }]);

    // 6. The owner sees the developer's key and its creator, then removes the developer.
    await owner.getByRole('link', { name: 'Chaves de API' }).click();
    expect(await owner.getByRole('row', { name: /chave-do-dev/ }).textContent()).toContain(devEmail);
    await owner.getByRole('link', { name: 'Membros' }).click();
    await owner
      .getByRole('row', { name: new RegExp(devEmail.replace(/\./g, '\\.')) })
      .getByRole('link', { name: 'Remover' })
      .click();
    await owner.getByRole('heading', { name: `Remover ${devEmail}?` }).waitFor();
    expect(await owner.getByLabel(/Revogar também as chaves de API ativas que esta pessoa criou \(1;/).isChecked()).toBe(true);
    await shot(owner, '07-remove-confirm');
    await owner.getByRole('button', { name: 'Sim, remover' }).click();
    expect(await owner.getByRole('status').textContent()).toBe('Membro removido. As sessões dele foram encerradas.');
    expect(await owner.getByRole('row', { name: new RegExp(devEmail.replace(/\./g, '\\.')) }).count()).toBe(0);
    await shot(owner, '08-removed');

    // 7. The developer's open page: the next request is signed out; their key was revoked.
    await dev.reload();
    await dev.waitForURL('**/login');
    await dev.getByRole('heading', { name: 'Entrar' }).waitFor();
    await shot(dev, '09-dev-signed-out');
    expect((await db.query(`select revoked_at is not null as revoked from api_keys where label = 'chave-do-dev'`)).rows).toEqual([{ revoked: true }]);
  }, 120000);
});
