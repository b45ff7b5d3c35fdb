import { csrfField, html, type SafeHtml } from '../../web/html.ts';
import type { ViewCtx } from './layout.ts';

export function loginPage(c: ViewCtx, v: { email?: string } = {}): SafeHtml {
  return html`<section class="card narrow">
<h1>${c.t('auth.login_title')}</h1>
<form method="post" action="/login">
${csrfField(c)}
<label>${c.t('auth.email')}<input type="email" name="email" autocomplete="username" required value="${v.email ?? ''}"></label>
<label>${c.t('auth.password')}<input type="password" name="password" autocomplete="current-password" required></label>
<button type="submit">${c.t('auth.login_button')}</button>
</form>
<p><a href="/signup">${c.t('auth.no_account')}</a></p>
</section>`;
}

export function signupPage(c: ViewCtx, v: { email?: string; org?: string } = {}): SafeHtml {
  return html`<section class="card narrow">
<h1>${c.t('auth.signup_title')}</h1>
<form method="post" action="/signup">
${csrfField(c)}
<label>${c.t('auth.email')}<input type="email" name="email" autocomplete="username" required value="${v.email ?? ''}"></label>
<label>${c.t('auth.password')}<input type="password" name="password" autocomplete="new-password" minlength="10" required><small>${c.t('auth.password_hint')}</small></label>
<label>${c.t('auth.org_name')}<input type="text" name="org" maxlength="100" value="${v.org ?? ''}"></label>
<button type="submit">${c.t('auth.signup_button')}</button>
</form>
<p><a href="/login">${c.t('auth.have_account')}</a></p>
</section>`;
}

/** After a sign-up, whether or not the address had an account: the same page. */
export function checkEmailPage(c: ViewCtx, v: { email: string; devMail: boolean }): SafeHtml {
  return html`<section class="card narrow" data-testid="check-email">
<h1>${c.t('auth.check_email_title')}</h1>
<p>${c.t('auth.check_email', { email: v.email })}</p>
${v.devMail ? html`<p class="muted">${c.t('auth.dev_mail')} <a href="/dev/mail">/dev/mail</a>.</p>` : ''}
<p><a class="button" href="/login">${c.t('auth.login_button')}</a></p>
</section>`;
}

export function resetPage(c: ViewCtx, token: string): SafeHtml {
  return html`<section class="card narrow">
<h1>${c.t('auth.reset_title')}</h1>
<form method="post" action="/reset">
${csrfField(c)}
<input type="hidden" name="token" value="${token}">
<label>${c.t('auth.password')}<input type="password" name="password" autocomplete="new-password" minlength="10" required><small>${c.t('auth.password_hint')}</small></label>
<button type="submit">${c.t('auth.reset_button')}</button>
</form>
</section>`;
}
