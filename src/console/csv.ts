import { formulaSafe } from '../web/csv.ts';

// CSV for the console's exports (RFC 4180: comma-separated, CRLF, fields quoted when they need
// it). A field a spreadsheet would run as a formula gets the portal's guard (src/web/csv.ts),
// unless it is a plain number (a negative margin stays a number).

export function csvField(v: unknown): string {
  let s = v === null || v === undefined ? '' : v instanceof Date ? v.toISOString() : typeof v === 'object' ? JSON.stringify(v) : String(v);
  s = formulaSafe(s);
  return /[",\r\n]/.test(s) ? `"${s.replace(/"/g, '""')}"` : s;
}

export function csv(head: string[], rows: unknown[][]): string {
  return [head, ...rows].map((r) => r.map(csvField).join(',')).join('\r\n') + '\r\n';
}
