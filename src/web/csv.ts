// The CSV formula guard of every web app's exports (the portal's streamed exports, src/portal/csv.ts,
// and the console's, src/console/csv.ts): CSV injection, OWASP.

const FORMULA_START = /^[=+\-@\t\r]/;

/**
 * A text cell a spreadsheet will not run (CSV injection, OWASP): text that starts with = + - @, a
 * tab or a carriage return gets a leading apostrophe, which spreadsheets show as text. For text that
 * came from anyone (key labels, end users, notes, model names); numbers we format ourselves never start so.
 */
export function safeText(v: string | null | undefined): string {
  if (v === null || v === undefined) return '';
  return FORMULA_START.test(v) ? `'${v}` : v;
}

const NUMBER = /^-?\d+(\.\d+)?$/;

/** `safeText` that keeps a plain number as it is (a negative margin stays a number). */
export const formulaSafe = (s: string): string => (NUMBER.test(s) ? s : safeText(s));
