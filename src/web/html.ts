import { html, type SafeHtml } from '../portal/html.ts';

// View pieces every web app's forms share.

/** The synchronizer token of a form (the session's CSRF secret, or before sign-in the double-submit token). */
export const csrfField = (c: { csrf: string }): SafeHtml => html`<input type="hidden" name="_csrf" value="${c.csrf}">`;
