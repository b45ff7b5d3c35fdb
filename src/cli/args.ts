// Flags of one command, parsed with node:util parseArgs: `--name value` or `--name=value`; boolean
// flags take no value. Unknown flags, missing values, repeated flags, stray positionals and values
// with control characters (NUL, line breaks, escapes) are usage errors (exit code 2) naming the flag.
import { parseArgs } from 'node:util';
import { AMOUNT_RULE, parseAmountInput } from '../billing/amount-input.ts';
import { UsageError } from './context.ts';

export interface FlagSpec {
  /** Flags that take a value. */
  values: string[];
  /** Flags that take none (`--json` and `--help`/`-h` always exist). */
  booleans?: string[];
  required?: string[];
}

export type Flags = Record<string, string | true | undefined>;

export function parseFlags(args: string[], spec: FlagSpec, command: string): Flags {
  const booleans = new Set(['json', 'help', ...(spec.booleans ?? [])]);
  const values = new Set(spec.values);
  const options: Record<string, { type: 'string' | 'boolean'; short?: string }> = {};
  for (const b of booleans) options[b] = { type: 'boolean' };
  options.help.short = 'h';
  for (const v of values) options[v] = { type: 'string' };
  // Not strict: parseArgs only tokenizes; the checks below give messages that name the flag.
  const { tokens } = parseArgs({ args, options, strict: false, allowPositionals: true, tokens: true });
  const flags: Flags = {};
  for (const token of tokens) {
    if (token.kind === 'positional') throw new UsageError(`${command}: unexpected argument ${JSON.stringify(token.value)}`);
    if (token.kind === 'option-terminator') throw new UsageError(`${command}: unexpected argument "--"`);
    const name = token.name;
    if (booleans.has(name)) {
      if (token.value !== undefined) throw new UsageError(`${command}: --${name} takes no value`);
      flags[name] = true;
    } else if (values.has(name)) {
      const value = token.value;
      if (value === undefined || (!token.inlineValue && value.startsWith('--') && value.length > 2))
        throw new UsageError(`${command}: --${name} needs a value`);
      if (flags[name] !== undefined) throw new UsageError(`${command}: --${name} given twice`);
      // Every value may reach PostgreSQL (which cannot store NUL) or NATS, or be shown later: no control characters.
      if (/\p{Cc}/u.test(value)) throw new UsageError(`${command}: --${name} must not contain control characters (NUL, line breaks, escapes)`);
      flags[name] = value;
    } else {
      throw new UsageError(`${command}: unknown option ${token.rawName}`);
    }
  }
  if (!flags.help) {
    for (const r of spec.required ?? []) {
      if (flags[r] === undefined || flags[r] === '') throw new UsageError(`${command}: --${r} is required`);
    }
  }
  return flags;
}

export function str(flags: Flags, name: string): string | undefined {
  const v = flags[name];
  return typeof v === 'string' ? v : undefined;
}

/**
 * A BRL amount with at most 6 decimals ("12.34", "12,34", "0.000001"); anything else is a usage
 * error. No thousands separators, and "1.500" is refused as ambiguous (see src/billing/amount-input.ts).
 */
export function brlFlag(flags: Flags, name: string, command: string): bigint | undefined {
  const v = str(flags, name);
  if (v === undefined) return undefined;
  const r = parseAmountInput(v, { maxDecimals: 6 });
  if (!r.ok) throw new UsageError(`${command}: --${name} must be a BRL amount like 12.34: ${r.message}. Amounts are ${AMOUNT_RULE}.`);
  return r.micros;
}

export function intFlag(flags: Flags, name: string, command: string, min = 1): number | undefined {
  const v = str(flags, name);
  if (v === undefined) return undefined;
  if (!/^\d+$/.test(v) || Number(v) < min || !Number.isSafeInteger(Number(v))) {
    throw new UsageError(`${command}: --${name} must be an integer ≥ ${min}, got ${JSON.stringify(v)}`);
  }
  return Number(v);
}

/** Micro-BRL as a decimal string, exact, with trailing zeros trimmed to at least 2 decimals: "112.34", "0.000001". */
export function brlString(micros: bigint): string {
  const neg = micros < 0n;
  const abs = neg ? -micros : micros;
  let frac = (abs % 1_000_000n).toString().padStart(6, '0');
  while (frac.length > 2 && frac.endsWith('0')) frac = frac.slice(0, -1);
  return `${neg ? '-' : ''}${abs / 1_000_000n}.${frac}`;
}
