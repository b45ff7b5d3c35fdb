// Chromium for the browser tests (the portal's and the console's): the system's, driven by
// playwright-core. A suite that needs it is declared with `describeWith(CHROMIUM, …)` (./tools.ts):
// skipped where it is missing, failed under CI.
import { type Browser, type BrowserContextOptions, chromium, type Page } from 'playwright-core';
import { CHROMIUM, pathOf } from './tools.ts';

/** Headless Chromium, quiet (no sync, updates or background requests). */
export function launchChromium(): Promise<Browser> {
  return chromium.launch({
    executablePath: pathOf(CHROMIUM),
    args: ['--headless', '--no-sandbox', '--disable-gpu', '--disable-background-networking', '--disable-component-update', '--disable-sync', '--no-first-run'],
  });
}

/** A page in a context of its own (its own cookies: one person), in pt-BR, 1200 × 900 unless `o` says otherwise. */
export async function newPage(browser: Browser, o: BrowserContextOptions = {}): Promise<Page> {
  return (await browser.newContext({ viewport: { width: 1200, height: 900 }, locale: 'pt-BR', ...o })).newPage();
}

/**
 * Signs in on the sign-in page `page` is at (or opens `url` first), by the visible pt-BR labels
 * of the portal's and the console's forms: e-mail, password, the authenticator's code when given;
 * `beforeSubmit` runs with the form filled in (a screenshot); then waits for `landing`.
 */
export async function signIn(
  page: Page,
  o: { url?: string; email: string; password: string; code?: string; landing: string; beforeSubmit?: () => Promise<unknown> },
): Promise<void> {
  if (o.url) await page.goto(o.url);
  await page.getByLabel('E-mail').fill(o.email);
  await page.getByLabel('Senha').fill(o.password);
  if (o.code !== undefined) await page.getByLabel('Código do autenticador').fill(o.code);
  await o.beforeSubmit?.();
  await page.getByRole('button', { name: 'Entrar' }).click();
  await page.waitForURL(o.landing);
}
