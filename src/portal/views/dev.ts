import { html, type SafeHtml } from '../../web/html.ts';
import type { ViewCtx } from './layout.ts';

/** Development only: the e-mails the embedded SMTP sink received (links clickable). */
export function devMailPage(c: ViewCtx, messages: Array<{ id: string; date: string; to: string[]; subject: string; text: string }>): SafeHtml {
  const linked = (text: string) => text.split(/(https?:\/\/[^\s<>"]+)/g).map((part, i) => (i % 2 === 1 ? html`<a href="${part}">${part}</a>` : html`${part}`));
  return html`<h1>${c.t('dev.mail_title')}</h1>
<p class="muted">${c.t('dev.mail_note')}</p>
${messages.length === 0 ? html`<p class="muted">${c.t('common.none')}</p>` : ''}
${messages.map(
  (m) => html`<article class="card" data-testid="mail" data-to="${m.to.join(',')}">
<h2>${m.subject}</h2>
<p class="muted">${m.to.join(', ')} · ${m.date}</p>
<pre class="mail">${linked(m.text)}</pre>
</article>`,
)}`;
}
