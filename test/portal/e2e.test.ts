// Chromium end-to-end: sign up → the verification e-mail (SMTP sink) → sign in → top up R$ 50,00 with the Pix simulator → balance → key restricted
// to one model → the openai client uses it (allowed 200, other model 403) → usage shows it →
// revoke → 401. Screenshots of every page go to test-artifacts/portal/ (gitignored).
import { mkdirSync } from 'node:fs';
import { join } from 'node:path';
import OpenAI from 'openai';
import type { Browser, Page } from 'playwright-core';
import { afterAll, beforeAll, expect, it } from 'vitest';
import { type MailSink, startMailSink } from '../../src/mail/sink.ts';
import { paySimulatedCharge } from '../../src/pix/simulator/pay.ts';
import { startPortal, type Portal } from '../../src/portal/server.ts';
import { launchChromium, newPage, signIn } from '../helpers/browser.ts';
import { startStack, type TestStack } from '../helpers/stack.ts';
import { CHROMIUM, describeWith } from '../helpers/tools.ts';

const ARTIFACTS = join(process.cwd(), 'test-artifacts', 'portal');

describeWith(CHROMIUM, 'portal in Chromium, end to end through the gateway', () => {
  let stack: TestStack;
  let portal: Portal;
  let sink: MailSink;
  let browser: Browser;
  let page: Page;
  const shot = (name: string) => page.screenshot({ path: join(ARTIFACTS, `${name}.png`), fullPage: true });

  beforeAll(async () => {
    mkdirSync(ARTIFACTS, { recursive: true });
    stack = await startStack({ gateways: 1, workers: 1 });
    sink = await startMailSink();
    portal = await startPortal({
      db: stack.db,
      nc: stack.nc,
      gatewayUrl: stack.baseUrl,
      reconcileIntervalMs: 0,
      signupLimitPerHour: 1000,
      env: { PIX_PROVIDER: 'simulator', SMTP_URL: sink.url },
    });
    browser = await launchChromium();
    page = await newPage(browser);
  }, 120000);

  afterAll(async () => {
    await browser?.close();
    await portal?.close();
    await sink?.close();
    await stack?.stop();
  }, 60000);

  it('sign up, top up, key, API call, usage, revoke', async () => {
    const email = `e2e.${Date.now()}@example.com`;
    const password = 'senha-bem-longa-123';

    // 1. Sign up (pt-BR by default): "check your e-mail"; signed in before verifying, the
    // dashboard works and a top-up asks for the e-mail first; the e-mailed link verifies;
    // sign out, sign in.
    await page.goto(`${portal.url}/signup`);
    await shot('01-signup');
    await page.fill('input[name=email]', email);
    await page.fill('input[name=password]', password);
    await page.fill('input[name=org]', 'Padaria do Zé');
    await page.click('button[type=submit]');
    await page.waitForSelector('[data-testid=check-email]');
    expect(await page.textContent('[data-testid=check-email]')).toContain(`Enviamos um e-mail para ${email}.`);
    await shot('01b-check-email');
    const mail = await sink.waitFor((m) => m.to.includes(email));
    expect(mail.subject).toBe('Confirme seu e-mail no catraca');
    const link = /https?:\/\/\S+\/verify\?token=[A-Za-z0-9_-]{43}/.exec(mail.text)![0];
    await signIn(page, { url: `${portal.url}/login`, email, password, landing: '**/dashboard' });
    await expect.poll(() => page.textContent('[data-testid=balance]')).toBe('R$ 0,00');
    await page.goto(`${portal.url}/topup`);
    expect(await page.isVisible('[data-testid=verify-first]')).toBe(true);
    expect(await page.isVisible('[data-testid=topup-amount]')).toBe(false);
    await shot('01c-verify-first');
    await page.goto(link);
    expect(await page.textContent('[data-testid=message]')).toBe('Seu e-mail foi confirmado. Você já pode adicionar saldo por Pix.');
    await shot('01d-verified');
    await page.goto(`${portal.url}/dashboard`);
    await page.click('[data-testid=logout]');
    await page.waitForURL('**/login?bye=1');
    await shot('02-login');
    await signIn(page, { email, password, landing: '**/dashboard' });

    // 2. Top up R$ 50,00; the charge page shows QR, copia e cola, expiry, and updates by itself.
    await page.click('a[href="/topup"] >> nth=0');
    await page.fill('[data-testid=topup-amount]', '50,00');
    await shot('03-topup');
    await page.click('[data-testid=topup-submit]');
    await page.waitForURL(/\/topup\/[a-f0-9]{32}$/);
    const txid = page.url().split('/').pop()!;
    expect(await page.textContent('h1')).toBe('Pix de R$ 50,00');
    expect(await page.getAttribute('[data-testid=qr]', 'src')).toMatch(/^data:image\/png;base64,/);
    expect(await page.inputValue('[data-testid=brcode]')).toMatch(/^000201010212.*br\.gov\.bcb\.pix.*6304[0-9A-F]{4}$/);
    expect(await page.textContent('[data-testid=expires]')).toMatch(/^Expira em /);
    expect(await page.textContent('[data-testid=charge-status]')).toBe('Aguardando pagamento');
    await shot('04-charge-waiting');
    // Pay as the CLI would (`catraca pix pay --txid`), with the page open: it must update by itself.
    const paid = await paySimulatedCharge(stack.db, { txid, simulatorUrl: portal.simulator!.url });
    expect(paid.ok).toBe(true);
    await page.waitForFunction(() => document.querySelector('[data-testid=charge-status]')?.textContent === 'Paga', null, { timeout: 10000 });
    expect(await page.textContent('[data-testid=charge-balance]')).toBe('Novo saldo: R$ 50,00');
    expect(await page.textContent('[data-testid=header-balance] strong')).toBe('R$ 50,00');
    await shot('05-charge-paid');
    await page.goto(`${portal.url}/dashboard`);
    expect(await page.textContent('[data-testid=balance]')).toBe('R$ 50,00');

    // 3. A key restricted to sim/echo; shown once with a copy button.
    await page.goto(`${portal.url}/keys`);
    await page.fill('[data-testid=key-label]', 'meu-agente');
    await page.check('[data-testid=scope-some]');
    await page.check('input[name=models][value="sim/echo"]');
    await page.fill('[data-testid=key-limit]', '10,00');
    await page.selectOption('[data-testid=key-limit-reset]', 'daily');
    await page.fill('[data-testid=key-rate-requests]', '100');
    await page.selectOption('[data-testid=key-rate-interval]', 'm');
    await page.selectOption('[data-testid=key-expires]', '30d');
    await page.click('[data-testid=create-key]');
    const key = await page.inputValue('[data-testid=new-key]');
    expect(key).toMatch(/^sk-cat-v1-[0-9a-f]{64}$/);
    expect(await page.isVisible('[data-testid=copy-key]')).toBe(true);
    expect(await page.textContent('[data-testid=created-key] .warning')).toContain('única vez');
    await shot('06-key-created');
    await page.goto(`${portal.url}/keys`);
    expect(await page.content()).not.toContain(key);
    const row = page.locator('[data-testid=key-row]', { hasText: 'meu-agente' });
    expect(await row.textContent()).toContain('sim/echo');
    expect(await row.textContent()).toContain('R$ 10,00 (diariamente)');
    expect(await row.locator('[data-testid=key-rate]').textContent()).toBe('100 por minuto');
    expect(await row.locator('[data-testid=key-expires]').textContent()).not.toBe('nunca');

    // 4. The openai client with that key: the allowed model works, another model is 403.
    const client = new OpenAI({ baseURL: stack.baseUrl, apiKey: key, maxRetries: 0 });
    const { data: done, response } = await client.chat.completions
      .create({ model: 'sim/echo', messages: [{ role: 'user', content: 'olá mundo' }] })
      .withResponse();
    expect(done.choices[0].message.content?.length).toBeGreaterThan(0);
    // The rate limit set in the portal is the one the front door enforces.
    expect(response.headers.get('x-ratelimit-limit')).toBe('100');
    expect(response.headers.get('x-ratelimit-remaining')).toBe('99');
    const forbidden = await client.chat.completions.create({ model: 'sim/lorem', messages: [{ role: 'user', content: 'oi' }] }).catch((e) => e);
    expect(forbidden).toBeInstanceOf(OpenAI.APIError);
    expect((forbidden as InstanceType<typeof OpenAI.APIError>).status).toBe(403);
    const tenantId = (await stack.db.query('select tenant_id from portal_users where email = $1', [email])).rows[0].tenant_id;
    await stack.waitNoHolds(tenantId);
    const debit = (await stack.db.query(`select amount_micros from ledger where tenant_id = $1 and source = 'request'`, [tenantId])).rows;
    expect(debit.length).toBe(1);

    // 5. Usage: per model, per key, the chart, the ledger, the catalog.
    await page.goto(`${portal.url}/dashboard`);
    expect(await page.textContent('[data-testid=by-model]')).toContain('sim/echo');
    expect(await page.textContent('[data-testid=by-key]')).toContain('meu-agente');
    expect(await page.locator('[data-testid=spend-chart] rect').count()).toBe(30);
    await shot('07-usage');
    await page.goto(`${portal.url}/ledger`);
    expect(await page.locator('[data-testid=ledger-row][data-source=request]').count()).toBe(1);
    expect(await page.locator('[data-testid=ledger-row][data-source=pix]').count()).toBe(1);
    expect(await page.textContent('[data-testid=ledger]')).toContain('+R$ 50,00');
    await shot('08-ledger');
    await page.goto(`${portal.url}/models`);
    expect(await page.textContent('[data-testid=models]')).toContain('R$ 1,00');
    await shot('09-models');
    await page.goto(`${portal.url}/models?lang=en`);
    expect(await page.textContent('h1')).toBe('Models and prices');
    await shot('10-models-en');
    await page.goto(`${portal.url}/keys?lang=pt-BR`);

    // 6. Revoke with confirmation: the API refuses the key at once.
    await row.locator('[data-testid=revoke-link]').click();
    await page.waitForURL(/\/keys\/key_[^/]+\/revoke$/);
    await shot('11-revoke-confirm');
    await page.click('[data-testid=confirm-revoke]');
    expect(await page.textContent('[data-testid=flash]')).toBe('Chave revogada.');
    await shot('12-revoked');
    const started = Date.now();
    let status = 0;
    while (Date.now() - started < 1000) {
      const r = await client.chat.completions.create({ model: 'sim/echo', messages: [{ role: 'user', content: 'ainda?' }] }).catch((e) => e);
      status = r instanceof OpenAI.APIError ? (r.status ?? 0) : 200;
      if (status === 401) break;
      await new Promise((res) => setTimeout(res, 50));
    }
    expect(status).toBe(401);
  }, 120000);
});
