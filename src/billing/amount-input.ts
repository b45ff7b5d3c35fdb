// Amounts typed by people (CLI flags, portal forms). One rule for every input, chosen so that an
// amount can never be silently multiplied or divided by 1000:
//
//   - digits, optionally ONE decimal separator (a dot or a comma) followed by decimals;
//   - no thousands separators: "1.000,00", "1,000.00", "1 000", "1_000" are refused;
//   - a separator followed by exactly three digits is refused unless the integer part is 0:
//     "1.500" is one thousand five hundred in pt-BR and one and a half in en-US. Write "1500",
//     or "1.5" / "1.50" / "1.5000". ("0.825" is unambiguous: no one groups thousands after a 0.)
//   - at most `maxDecimals` decimals (6 for the ledger's micro-reais, 2 for Pix centavos).
//
// Every accepted separator is therefore a decimal separator in both conventions: a thousands
// group is always exactly three digits after a leading group of 1-3 digits not starting with 0.
import { MICROS_PER_BRL } from './money.ts';

export type AmountInputError = 'empty' | 'not_a_number' | 'thousands_separator' | 'ambiguous' | 'too_many_decimals' | 'too_large';

export type AmountInputResult = { ok: true; micros: bigint } | { ok: false; error: AmountInputError; message: string };

const SHAPE = /^(\d+)(?:([.,])(\d+))?$/;

/** Parses a non-negative BRL amount typed by a person; see the rule above. */
export function parseAmountInput(text: string, opts: { maxDecimals?: number; maxIntegerDigits?: number } = {}): AmountInputResult {
  const maxDecimals = opts.maxDecimals ?? 6;
  const maxIntegerDigits = opts.maxIntegerDigits ?? 12;
  const t = String(text ?? '').trim();
  const shown = JSON.stringify(t);
  if (!t) return { ok: false, error: 'empty', message: 'the amount is empty' };
  const m = SHAPE.exec(t);
  if (!m) {
    // Digits with separators or spaces in between: a thousands separator (or a typo). Refused either way.
    if (/^\d[\d.,\s'_]*\d$/.test(t)) {
      return {
        ok: false,
        error: 'thousands_separator',
        message: `${shown} has more than one separator or a space; write amounts without thousands separators, with at most one dot or comma before the decimals (1500 or 1500.00)`,
      };
    }
    return { ok: false, error: 'not_a_number', message: `${shown} is not an amount like 12.34 or 12,34 (digits, optionally one dot or comma and decimals)` };
  }
  const [, int, sep, frac] = m;
  if (frac !== undefined && frac.length === 3 && !/^0+$/.test(int)) {
    const whole = `${int}${frac}`.replace(/^0+(?=\d)/, '');
    return {
      ok: false,
      error: 'ambiguous',
      message: `${shown} is ambiguous: a ${sep === '.' ? 'dot' : 'comma'} followed by exactly three digits reads as a thousands separator in pt-BR and as a decimal separator in en-US; write ${whole} for the thousands, or ${int}.${frac}0 for the decimals`,
    };
  }
  if (frac !== undefined && frac.length > maxDecimals) {
    return { ok: false, error: 'too_many_decimals', message: `${shown} has more than ${maxDecimals} decimal${maxDecimals === 1 ? '' : 's'}` };
  }
  if (int.replace(/^0+(?=\d)/, '').length > maxIntegerDigits) return { ok: false, error: 'too_large', message: `${shown} is too large` };
  const micros = BigInt(int) * MICROS_PER_BRL + BigInt((frac ?? '').padEnd(6, '0').slice(0, 6));
  return { ok: true, micros };
}

/** The rule in one sentence, for help texts. */
export const AMOUNT_RULE =
  'digits with at most one dot or comma before the decimals (12.34 or 12,34), no thousands separators; ' +
  'a separator followed by exactly three digits is refused as ambiguous unless the amount is below 1 ' +
  '(write 1500, or 1.5 / 1.50 / 1.5000, never 1.500)';
