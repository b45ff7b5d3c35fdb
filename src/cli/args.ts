// A small, strict flag parser: `--name value` or `--name=value`; boolean flags take no value.
// Unknown flags, missing values and stray positionals are usage errors (exit code 2).
import { parseBrl } from '../billing/money.ts';
import { UsageError } from './context.ts';

export interface FlagSpec {
  /** Flags that take a value. */
  values: string[];
  /** Flags that take none. */
  booleans?: string[];
  required?: string[];
}

export type Flags = Record<string, string | true | undefined>;

export function parseFlags(args: string[], spec: FlagSpec, command: string): Flags {
  const flags: Flags = {};
  const booleans = new Set(['json', 'help', ...(spec.booleans ?? [])]);
  const values = new Set(spec.values);
  for (let i = 0; i < args.length; i++) {
    const arg = args[i];
    if (!arg.startsWith('--')) throw new UsageError(`${command}: unexpected argument ${JSON.stringify(arg)}`);
    const eq = arg.indexOf('=');
    const name = arg.slice(2, eq === -1 ? undefined : eq);
    if (booleans.has(name)) {
      if (eq !== -1) throw new UsageError(`${command}: --${name} takes no value`);
      flags[name] = true;
    } else if (values.has(name)) {
      let value: string | undefined;
      if (eq !== -1) value = arg.slice(eq + 1);
      else {
        value = args[++i];
        if (value === undefined || (value.startsWith('--') && value.length > 2)) throw new UsageError(`${command}: --${name} needs a value`);
      }
      if (flags[name] !== undefined) throw new UsageError(`${command}: --${name} given twice`);
      flags[name] = value;
    } else {
      throw new UsageError(`${command}: unknown option --${name}`);
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

/** A BRL amount with at most 6 decimals ("12.34", "0.000001"); anything else is a usage error. */
export function brlFlag(flags: Flags, name: string, command: string): bigint | undefined {
  const v = str(flags, name);
  if (v === undefined) return undefined;
  try {
    return parseBrl(v);
  } catch {
    throw new UsageError(`${command}: --${name} must be a BRL amount like 12.34 (digits, at most 6 decimals), got ${JSON.stringify(v)}`);
  }
}

export function intFlag(flags: Flags, name: string, command: string, min = 1): number | undefined {
  const v = str(flags, name);
  if (v === undefined) return undefined;
  if (!/^\d+$/.test(v) || Number(v) < min || !Number.isSafeInteger(Number(v))) {
    throw new UsageError(`${command}: --${name} must be an integer ≥ ${min}, got ${JSON.stringify(v)}`);
  }
  return Number(v);
}

const UNIT_SECONDS: Record<string, number> = { s: 1, m: 60, h: 3600, d: 86400 };

/** "60/60s", "100/1m", "10/s", "1000/1h", "5000/1d" → requests per interval (seconds). */
export function parseRateLimit(text: string): { requests: number; intervalS: number } | null {
  const m = /^(\d+)\/(\d*)([smhd])$/.exec(text.trim());
  if (!m) return null;
  const requests = Number(m[1]);
  const intervalS = Number(m[2] || '1') * UNIT_SECONDS[m[3]];
  if (requests < 1 || intervalS < 1 || !Number.isSafeInteger(requests) || !Number.isSafeInteger(intervalS)) return null;
  return { requests, intervalS };
}

/** Micro-BRL as a decimal string, exact, with trailing zeros trimmed to at least 2 decimals: "112.34", "0.000001". */
export function brlString(micros: bigint): string {
  const neg = micros < 0n;
  const abs = neg ? -micros : micros;
  let frac = (abs % 1_000_000n).toString().padStart(6, '0');
  while (frac.length > 2 && frac.endsWith('0')) frac = frac.slice(0, -1);
  return `${neg ? '-' : ''}${abs / 1_000_000n}.${frac}`;
}
