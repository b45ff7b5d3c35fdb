import { inflateSync } from 'node:zlib';

// The text a PDF made by pdfkit shows, for tests: each content stream inflated, each TJ/Tj
// operator's hex strings decoded (pdfkit's standard fonts use WinAnsiEncoding: Latin-1 but for
// the few characters below), one line per operator.

const WIN_ANSI = new Map<number, string>([
  [0x96, '–'],
  [0x97, '—'],
  [0x91, '‘'],
  [0x92, '’'],
  [0x93, '“'],
  [0x94, '”'],
  [0x95, '•'],
  [0x85, '…'],
]);
const decode = (hex: string) =>
  Array.from(Buffer.from(hex, 'hex'))
    .map((b) => WIN_ANSI.get(b) ?? String.fromCharCode(b))
    .join('');

export function pdfText(pdf: Buffer): string {
  const raw = pdf.toString('latin1');
  const lines: string[] = [];
  const streams = /stream\r?\n/g;
  for (let m = streams.exec(raw); m; m = streams.exec(raw)) {
    const start = m.index + m[0].length;
    const end = raw.indexOf('endstream', start);
    if (end < 0) break;
    let content: string;
    try {
      content = inflateSync(pdf.subarray(start, end)).toString('latin1');
    } catch {
      content = raw.slice(start, end);
    }
    for (const op of content.matchAll(/\[((?:<[0-9a-fA-F]*>|[\s\d.-])*)\]\s*TJ|<([0-9a-fA-F]*)>\s*Tj/g)) {
      const parts = op[1] !== undefined ? [...op[1].matchAll(/<([0-9a-fA-F]*)>/g)].map((x) => x[1]) : [op[2]];
      lines.push(parts.map(decode).join(''));
    }
    streams.lastIndex = end;
  }
  return lines.join('\n');
}
