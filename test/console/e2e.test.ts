// The operator's console in Chromium, end to end, driven by visible labels (issue 21): an operator
// made by the CLI (`catraca operator create`) signs in with a TOTP code computed here from the
// secret the CLI printed, finds a tenant, grants R$ 10,00 with a reason (balance and ledger agree to
// the micro-real, `ledger check` passes, the audit log shows it), suspends the tenant (its key gets
// 403 tenant_suspended within a second on both front doors), reactivates it, changes a model's
// price (the next request is billed at it) and its vendor cost, and looks at the margin. The
// console runs as its own process (as catraca_console), beside two doors, a worker and metering;
// its log never shows a secret.
// Screenshots go to test-artifacts/console/ (gitignored); with UPDATE_SCREENSHOTS=1 the tenants
// list and the margin view also to docs/img/ (run this file alone: a fresh database holds its data only).
import { execFile } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { mkdirSync } from 'node:fs';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import type { Browser, Page } from 'playwright-core';
import { afterAll, beforeAll, expect, it } from 'vitest';
import { credit, settle } from '../../src/billing/ledger.ts';
import { usageCostMicros } from '../../src/billing/money.ts';
import { ledgerCheck } from '../../src/billing/ledger-check.ts';
import { totpFor } from '../../src/console/auth.ts';
import { createApiKey } from '../../src/db/keys.ts';
import { upsertModel } from '../../src/db/models.ts';
import { createTenant } from '../../src/db/tenants.ts';
import { launchChromium, newPage, signIn } from '../helpers/browser.ts';
import { CHROMIUM, describeWith } from '../helpers/tools.ts';
import type { TestStack } from '../helpers/stack.ts';

const ROOT = join(dirname(fileURLToPath(import.meta.url)), '..', '..');
const ARTIFACTS = join(ROOT, 'test-artifacts', 'console');
const u = randomBytes(3).toString('hex');
const MODEL = `e2e/echo-${u}`;
const OTHER_MODEL = `e2e/lorem-${u}`;
const NAMES = { main: `Padaria Aurora ${u}`, b: `Oficina Boa Vista ${u}`, c: `Estúdio Carambola ${u}` };

interface CliOperator {
  id: string;
  email: string;
  password: string;
  totp_secret: string;
  otpauth_url: string;
  recovery_codes: string[];
}

describeWith(CHROMIUM, 'the console in Chromium, with two front doors', () => {
  let stack: TestStack;
  let browser: Browser;
  let page: Page;
  let op: CliOperator;
  let consoleUrl: string;
  const tenants: Record<keyof typeof NAMES, { id: string; key: string }> = { main: { id: '', key: '' }, b: { id: '', key: '' }, c: { id: '', key: '' } };

  const shot = async (name: string, docs?: string) => {
    const path = join(ARTIFACTS, `${name}.png`);
    await page.screenshot({ path, fullPage: true });
    // the docs' copy: the top of the page (a long table is cut)
    if (docs && process.env.UPDATE_SCREENSHOTS === '1') {
      const height = Math.min(1300, await page.evaluate(() => document.documentElement.scrollHeight));
      await page.screenshot({ path: join(ROOT, 'docs', 'img', docs), fullPage: true, clip: { x: 0, y: 0, width: 1360, height } });
    }
  };
  const chat = (key: string, door: number, model = MODEL) =>
    fetch(`${stack.urlOf(stack.gateways[door])}/chat/completions`, {
      method: 'POST',
      headers: { authorization: `Bearer ${key}`, 'content-type': 'application/json' },
      body: JSON.stringify({ model, messages: [{ role: 'user', content: 'bom dia, tudo certo?' }] }),
    });

  beforeAll(async () => {
    mkdirSync(ARTIFACTS, { recursive: true });
    mkdirSync(join(ROOT, 'docs', 'img'), { recursive: true });
    const { startStack } = await import('../helpers/stack.ts');
    stack = await startStack({ gateways: 2, workers: 1 });
    await stack.spawnConsole();
    consoleUrl = stack.consoleUrl();
    await upsertModel(stack.db, { id: MODEL, pool: 'sim', upstream_model: 'echo', input_price: 1_000_000n, output_price: 2_000_000n, context_length: 8192 });
    await upsertModel(stack.db, {
      id: OTHER_MODEL,
      pool: 'sim',
      upstream_model: 'lorem',
      input_price: 3_000_000n,
      output_price: 9_000_000n,
      context_length: 8192,
    });
    for (const k of Object.keys(NAMES) as Array<keyof typeof NAMES>) {
      const t = await createTenant(stack.db, NAMES[k]);
      tenants[k] = { id: t.id, key: (await createApiKey(stack.db, { tenantId: t.id, label: 'produção' })).key };
    }
    await seedHistory(stack);
    op = await operatorFromCli(stack);
    browser = await launchChromium();
    page = await newPage(browser, { viewport: { width: 1360, height: 900 } });
  }, 120000);

  afterAll(async () => {
    await browser?.close();
    await stack?.stop();
  }, 60000);

  /** Two other tenants spent over the last 14 days (vendor costs in force since 60 days ago): the margin view has days to show. */
  async function seedHistory(s: TestStack) {
    await s.db.query(
      `insert into model_vendor_costs (model_id, valid_from, currency, input_price, output_price, usd_brl_micros) values
         ($1, now() - interval '60 days', 'USD', 150000, 600000, 5400000), ($2, now() - interval '60 days', 'BRL', 2000000, 7000000, null)`,
      [MODEL, OTHER_MODEL],
    );
    for (const k of ['b', 'c'] as const) {
      await credit(s.db, { tenantId: tenants[k].id, amountMicros: 50_000_000n, source: 'grant', note: 'e2e' });
      const keyId = (await s.db.query('select id from api_keys where tenant_id = $1', [tenants[k].id])).rows[0].id;
      for (let day = 14; day >= 1; day--) {
        for (const [model, price] of [
          [MODEL, [1_000_000n, 2_000_000n]],
          [OTHER_MODEL, [3_000_000n, 9_000_000n]],
        ] as const) {
          const input = 20_000 + day * 1500 + (k === 'b' ? 4000 : 0);
          const output = 4000 + ((day * 700) % 3000);
          await settle(s.db, {
            requestId: `hist_${u}_${k}_${day}_${model}`,
            tenantId: tenants[k].id,
            keyId,
            costMicros: usageCostMicros({ prompt_tokens: input, completion_tokens: output }, { input: price[0], output: price[1] }),
            model,
            inputTokens: input,
            outputTokens: output,
            estimated: false,
            outcome: 'completed',
            at: new Date(Date.now() - day * 86400000),
          });
        }
      }
    }
  }

  /** `catraca operator create --email … --json`, as the admin CLI's role. */
  function operatorFromCli(s: TestStack): Promise<CliOperator> {
    return new Promise((resolve, reject) =>
      execFile(
        process.execPath,
        [join(ROOT, 'bin/catraca.js'), 'operator', 'create', '--email', `ana.${u}@catraca.example`, '--json'],
        { cwd: ROOT, env: { ...process.env, DATABASE_URL: s.roleUrl('admin'), NATS_URL: s.natsUrl } },
        (err, stdout, stderr) => (err ? reject(new Error(`${err.message}: ${stderr}`)) : resolve(JSON.parse(stdout))),
      ),
    );
  }

  /** Polls both doors until the key gets `status` on each; the milliseconds each took. */
  async function untilBothDoors(key: string, status: number, code?: string): Promise<number[]> {
    const started = Date.now();
    return Promise.all(
      [0, 1].map(async (door) => {
        for (;;) {
          const res = await chat(key, door);
          const body = (await res.json()) as { error?: { code?: string } };
          if (res.status === status && (!code || body.error?.code === code)) return Date.now() - started;
          if (Date.now() - started > 5000) throw new Error(`door ${door}: still ${res.status} ${JSON.stringify(body)}`);
          await new Promise((r) => setTimeout(r, 25));
        }
      }),
    );
  }

  it('sign in with TOTP, find a tenant, grant, suspend on two doors, reactivate, change a price, see the margin', async () => {
    const main = tenants.main;
    // 1. Sign in: e-mail, password and the code of the authenticator (computed from the CLI's secret).
    await page.goto(`${consoleUrl}/tenants`);
    await page.waitForURL('**/login');
    await signIn(page, {
      email: op.email,
      password: op.password,
      code: totpFor(op.totp_secret, op.email).generate(),
      beforeSubmit: () => shot('01-login'),
      landing: '**/tenants',
    });
    expect(await page.getByTestId('operator').textContent()).toBe(op.email);

    // 2. Find the tenant by a piece of its name.
    await page.getByLabel('Buscar').fill(`aurora ${u}`);
    await page.getByRole('button', { name: 'Buscar' }).click();
    await page.waitForURL(/\/tenants\?q=/);
    expect(await page.getByTestId('tenant-row').count()).toBe(1);
    await page.getByRole('link', { name: NAMES.main }).click();
    await page.waitForURL(`**/tenants/${main.id}`);
    expect(await page.getByTestId('tenant-balance').textContent()).toBe('R$ 0,00');

    // 3. Grant R$ 10,00 with a reason: balance and ledger agree to the micro-real.
    const grant = page.getByTestId('grant-form');
    await grant.getByLabel('Valor (R$)').fill('10,00');
    await grant.getByLabel('Observação').fill('boas-vindas');
    await grant.getByLabel('Motivo').fill('cortesia de lançamento');
    await grant.getByRole('button', { name: 'Conceder crédito' }).click();
    await page.waitForURL(/done=grant/);
    expect(await page.getByTestId('flash').textContent()).toBe('Crédito concedido.');
    expect(await page.getByTestId('tenant-balance').textContent()).toBe('R$ 10,00');
    expect((await stack.db.query('select balance_micros, held_micros from tenants where id = $1', [main.id])).rows[0]).toEqual({
      balance_micros: 10_000_000n,
      held_micros: 0n,
    });
    const ledger = await stack.db.query('select kind, amount_micros, balance_after_micros, source, note from ledger where tenant_id = $1', [main.id]);
    expect(ledger.rows).toEqual([{ kind: 'credit', amount_micros: 10_000_000n, balance_after_micros: 10_000_000n, source: 'grant', note: 'boas-vindas' }]);
    expect(await ledgerCheck(stack.db, { tenantId: main.id })).toEqual({ ok: true, tenants_checked: 1, mismatches: [] });
    // … and the audit log shows it, with who, from where, the reason, before and after
    await page.getByRole('link', { name: 'Auditoria' }).click();
    const auditRow = page.getByTestId('audit-row').filter({ hasText: 'cortesia de lançamento' });
    expect(await auditRow.count()).toBe(1);
    expect(await auditRow.textContent()).toContain('crédito concedido');
    expect(await auditRow.textContent()).toContain(op.email);
    const audited = await stack.db.query(
      `select operator_id, ip, tenant_id, reason, before, after from console_audit where action = 'grant' and tenant_id = $1`,
      [main.id],
    );
    expect(audited.rows).toEqual([
      {
        operator_id: op.id,
        ip: '127.0.0.1',
        tenant_id: main.id,
        reason: 'cortesia de lançamento',
        before: { balance_micros: '0', held_micros: '0' },
        after: expect.objectContaining({ balance_micros: '10000000', amount_micros: '10000000', note: 'boas-vindas' }),
      },
    ]);
    await shot('02-audit');

    // 4. The key works on both doors (enough requests that each door admits from a lease), then
    //    suspend: 403 tenant_suspended on both doors within a second; balance and key kept.
    for (let i = 0; i < 5; i++) for (const door of [0, 1]) expect((await chat(main.key, door)).status).toBe(200);
    await page.goto(`${consoleUrl}/tenants/${main.id}`);
    await page.getByTestId('suspend-form').getByLabel('Motivo').fill('teste de suspensão pelo console');
    await page.getByRole('button', { name: 'Suspender cliente' }).click();
    await page.waitForURL(/done=suspend/);
    const suspendedIn = await untilBothDoors(main.key, 403, 'tenant_suspended');
    expect(Math.max(...suspendedIn)).toBeLessThan(1000);
    expect(await page.getByTestId('suspension').textContent()).toContain('teste de suspensão pelo console');
    await shot('03-suspended');
    expect((await stack.db.query('select count(*)::int as n from api_keys where tenant_id = $1 and revoked_at is null', [main.id])).rows[0].n).toBe(1);

    // 5. Reactivate: both doors admit it again.
    await page.getByTestId('reactivate-form').getByLabel('Motivo').fill('conferido com o cliente');
    await page.getByRole('button', { name: 'Reativar cliente' }).click();
    await page.waitForURL(/done=reactivate/);
    expect(Math.max(...(await untilBothDoors(main.key, 200)))).toBeLessThan(1000);
    const trail = await stack.db.query('select action, reason, before, after from console_audit where tenant_id = $1 order by id', [main.id]);
    expect(trail.rows.map((r) => [r.action, r.reason])).toEqual([
      ['grant', 'cortesia de lançamento'],
      ['suspend', 'teste de suspensão pelo console'],
      ['reactivate', 'conferido com o cliente'],
    ]);
    expect(trail.rows[2].before).toEqual({ suspended_at: expect.any(String), reason: 'teste de suspensão pelo console' });
    expect(trail.rows[2].after).toEqual({ suspended_at: null });

    // 6. Change the model's price: the next request, on either door, is billed at it.
    await page.getByRole('link', { name: 'Catálogo' }).click();
    await page.locator(`[data-testid=model-row][data-model="${MODEL}"]`).getByRole('link', { name: 'Editar' }).click();
    await page.waitForURL(`**/catalog/models/${MODEL}`);
    const prices = page.getByTestId('prices-form');
    await prices.getByLabel('Entrada', { exact: true }).fill('4,00');
    await prices.getByLabel('Saída', { exact: true }).fill('8,00');
    await prices.getByLabel('Preço em lote (saída)').fill('4,00');
    await prices.getByLabel('Motivo').fill('reajuste do fornecedor');
    await prices.getByRole('button', { name: 'Salvar preços' }).click();
    await page.waitForURL(/done=prices/);
    for (const door of [0, 1]) {
      const res = await chat(main.key, door);
      expect(res.status).toBe(200);
      const body = (await res.json()) as { usage: { prompt_tokens: number; completion_tokens: number } };
      const id = res.headers.get('x-request-id')!;
      await stack.waitSettled([id]);
      const debit = (await stack.db.query('select amount_micros from ledger where request_id = $1', [id])).rows[0].amount_micros;
      expect(debit).toBe(usageCostMicros(body.usage, { input: 4_000_000n, output: 8_000_000n }));
    }
    const priceAudit = await stack.db.query(`select before, after, reason from console_audit where action = 'price_change' and target = $1`, [MODEL]);
    expect(priceAudit.rows).toEqual([
      {
        before: {
          input_price: '1000000',
          cached_input_price: null,
          output_price: '2000000',
          batch_input_price: null,
          batch_cached_input_price: null,
          batch_output_price: null,
        },
        after: {
          input_price: '4000000',
          cached_input_price: null,
          output_price: '8000000',
          batch_input_price: null,
          batch_cached_input_price: null,
          batch_output_price: '4000000',
        },
        reason: 'reajuste do fornecedor',
      },
    ]);
    // and its vendor cost, for the margin: USD 0,15 in / 0,60 out at R$ 5,40
    const vendor = page.getByTestId('vendor-form');
    await vendor.getByLabel('Moeda').selectOption('USD');
    await vendor.getByLabel('Entrada', { exact: true }).fill('0,15');
    await vendor.getByLabel('Saída (inclui raciocínio)').fill('0,60');
    await vendor.getByLabel('Câmbio (R$ por US$)').fill('5,40');
    await vendor.getByRole('button', { name: 'Salvar custo' }).click();
    await page.waitForURL(/done=vendor/);
    expect(await page.getByTestId('flash').textContent()).toBe('Custo no fornecedor salvo.');

    // 7. The tenants list and the margin view (screenshots for the docs).
    for (let i = 0; i < 3; i++) expect((await chat(main.key, i % 2, OTHER_MODEL)).status).toBe(200);
    await stack.waitNoHolds(main.id);
    await page.goto(`${consoleUrl}/tenants?q=${u}`);
    expect(await page.getByTestId('tenant-row').count()).toBe(3);
    await shot('04-tenants', 'console-tenants.png');
    await page.getByRole('link', { name: 'Margem' }).click();
    await page.waitForURL('**/money');
    const rows = page.locator(`[data-testid=margin-row][data-tenant="${main.id}"]`);
    expect(await rows.count()).toBe(2);
    expect(await page.locator('[data-testid=margin-chart] rect.revenue').count()).toBe(30);
    await shot('05-margin', 'console-margin.png');
    await page.goto(`${consoleUrl}/pix`);
    expect(await page.getByTestId('reconciler').textContent()).toMatch(/^(A conferência com o PSP ainda não rodou|Última conferência com o PSP: )/);
    await page.goto(`${consoleUrl}/ledger-check`);
    await page.getByRole('button', { name: 'Conferir agora' }).click();
    expect(await page.getByTestId('check-result').getAttribute('data-ok')).toBe('true');
    await shot('06-ledger-check');
    await page.goto(`${consoleUrl}/catalog?lang=en`);
    expect(await page.locator('h1').textContent()).toBe('Catalog');
    await shot('07-catalog-en');

    // 8. The console's log never showed a secret: the password, the TOTP secret, the recovery codes, a session.
    const session = (await page.context().cookies()).find((c) => c.name === 'catraca_console_session')!.value;
    const lines = stack.consoles[0].lines.join('\n');
    expect(lines).toContain('operator signed in');
    for (const secret of [op.password, op.totp_secret, session, ...op.recovery_codes]) expect(lines).not.toContain(secret);
  }, 120000);
});
