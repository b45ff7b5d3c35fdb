// Checks a request body before JSON.parse sees it, in one pass over its bytes:
//   - nesting depth: a body nested deeper than `maxDepth` (arrays and objects) is refused. JSON.parse
//     itself copes with deep input, but what walks the parsed value afterwards does not: zod, the
//     worst-case estimate and JSON.stringify of the job recurse, and 10 000 levels overflow the
//     stack (a 500). No chat request comes close to 128 levels; OpenAI's own limit for a tool's
//     JSON schema is 5–10 levels;
//   - numbers: a literal JSON.parse would turn into ±Infinity (1e400) is refused, because it would
//     reach the vendor as `null` (JSON.stringify) — not what the client sent.
// Strings are skipped with Buffer#indexOf (native), so a body of large string values (the usual
// chat body) costs little more than the search for its quotes; structure and numbers are walked
// byte by byte. The scan never decides that a body is valid JSON: JSON.parse does, after it.

export const MAX_JSON_DEPTH = 128;

export type JsonScanProblem = { kind: 'too_deep'; depth: number } | { kind: 'number_out_of_range'; literal: string };

const QUOTE = 0x22;
const BACKSLASH = 0x5c;
const OPEN_BRACE = 0x7b;
const OPEN_BRACKET = 0x5b;
const CLOSE_BRACE = 0x7d;
const CLOSE_BRACKET = 0x5d;
const MINUS = 0x2d;
const ZERO = 0x30;
const NINE = 0x39;

function isNumberByte(b: number): boolean {
  // digits, '.', 'e', 'E', '+', '-'
  return (b >= ZERO && b <= NINE) || b === 0x2e || b === 0x65 || b === 0x45 || b === 0x2b || b === MINUS;
}

/** The first problem found in `buf`, or null. Malformed JSON is left for JSON.parse to refuse. */
export function scanJson(buf: Uint8Array, maxDepth = MAX_JSON_DEPTH): JsonScanProblem | null {
  const b = Buffer.isBuffer(buf) ? buf : Buffer.from(buf.buffer, buf.byteOffset, buf.byteLength);
  const n = b.length;
  let depth = 0;
  let i = 0;
  while (i < n) {
    const c = b[i];
    if (c === QUOTE) {
      // skip the string: the next quote not escaped by an odd run of backslashes
      let j = i + 1;
      for (;;) {
        const q = b.indexOf(QUOTE, j);
        if (q < 0) return null; // unterminated: JSON.parse refuses it
        let k = q - 1;
        while (k > i && b[k] === BACKSLASH) k--;
        if ((q - 1 - k) % 2 === 0) {
          i = q + 1;
          break;
        }
        j = q + 1;
      }
      continue;
    }
    if (c === OPEN_BRACE || c === OPEN_BRACKET) {
      if (++depth > maxDepth) return { kind: 'too_deep', depth };
    } else if (c === CLOSE_BRACE || c === CLOSE_BRACKET) {
      depth--;
    } else if (c === MINUS || (c >= ZERO && c <= NINE)) {
      let j = i + 1;
      let exponent = false;
      while (j < n && isNumberByte(b[j])) {
        if (b[j] === 0x65 || b[j] === 0x45) exponent = true;
        j++;
      }
      // without an exponent a literal overflows a double only past 309 digits
      if (exponent || j - i > 300) {
        const literal = b.toString('latin1', i, j);
        const v = Number(literal);
        if (v === Infinity || v === -Infinity) return { kind: 'number_out_of_range', literal: literal.length > 40 ? `${literal.slice(0, 37)}...` : literal };
      }
      i = j;
      continue;
    }
    i++;
  }
  return null;
}
