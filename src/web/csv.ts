import { safeText } from '../portal/csv.ts';

// The CSV formula guard the portal's exports use (src/portal/csv.ts, safeText: CSV injection,
// OWASP), shared with the console's exports: text a spreadsheet would run as a formula (starting
// with = + - @, a tab or a carriage return) gets a leading apostrophe. `formulaSafe` keeps a plain
// number as it is (a negative margin stays a number).

export { safeText };

const NUMBER = /^-?\d+(\.\d+)?$/;

export const formulaSafe = (s: string): string => (NUMBER.test(s) ? s : safeText(s));
