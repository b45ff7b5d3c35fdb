// Minimal HTML templating with escaping by default.
export class SafeHtml {
  constructor(readonly value: string) {}
  toString() {
    return this.value;
  }
}

export function escapeHtml(s: unknown): string {
  return String(s ?? '').replace(/[&<>"']/g, (c) => ({ '&': '&amp;', '<': '&lt;', '>': '&gt;', '"': '&quot;', "'": '&#39;' })[c]!);
}

type Part = SafeHtml | string | number | bigint | null | undefined | false | Part[];

function render(v: Part): string {
  if (v === null || v === undefined || v === false) return '';
  if (v instanceof SafeHtml) return v.value;
  if (Array.isArray(v)) return v.map(render).join('');
  return escapeHtml(v);
}

export function html(strings: TemplateStringsArray, ...values: Part[]): SafeHtml {
  let out = strings[0];
  for (let i = 0; i < values.length; i++) out += render(values[i]) + strings[i + 1];
  return new SafeHtml(out);
}

export const raw = (s: string) => new SafeHtml(s);

// View pieces every web app's forms share.

/** The synchronizer token of a form (the session's CSRF secret, or before sign-in the double-submit token). */
export const csrfField = (c: { csrf: string }): SafeHtml => html`<input type="hidden" name="_csrf" value="${c.csrf}">`;
