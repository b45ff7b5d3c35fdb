// Logs: pino, one JSON object per line on stderr — `{"level":"info","time":"<ISO>","component":…,
// …fields,"msg":…}` — or, with LOG_FORMAT=pretty (what `npm start` shows), one readable line each.
//
// Every line passes through clean() first:
//   - errors (anywhere in the fields) become {type, message, stack, code, cause, …};
//   - keys that name secrets (authorization, cookie, key, api_key, password, secret, token, …) are
//     replaced by "[redacted]"; keys are logged by id (key_id), never by value;
//   - strings, the message included, lose anything shaped like a key (`sk-…`), a bearer/basic
//     credential or the password of a URL.
// LOG_LEVEL: debug | info (default) | warn | error | silent.
// Call sites keep the shape `log.info(msg, fields)`; a request's lines carry its `request_id` field.
import pino from 'pino';

export interface Logger {
  debug(msg: string, fields?: Record<string, unknown>): void;
  info(msg: string, fields?: Record<string, unknown>): void;
  warn(msg: string, fields?: Record<string, unknown>): void;
  error(msg: string, fields?: Record<string, unknown>): void;
}

export interface ComponentLogger extends Logger {
  /** A logger whose every line also carries `bindings` (e.g. `{ request_id }`). */
  child(bindings: Record<string, unknown>): ComponentLogger;
}

export const LOG_LEVELS = ['debug', 'info', 'warn', 'error', 'silent'] as const;
export type LogLevel = (typeof LOG_LEVELS)[number];
export type LogFormat = 'json' | 'pretty';

// ------------------------------------------------------------------------------ redaction

/** Field names whose values are never logged. */
const SECRET_KEY =
  /^(authorization|proxy-authorization|cookie|set-cookie|(.*[_-])?(api[_-]?)?key|apikey|.*passw(or)?d.*|pass|.*secret.*|(.*[_-])?token|credentials?|private[_-]?key)$/i;
/** API keys (ours `sk-cat-v1-…`, OpenAI/Anthropic/OpenRouter `sk-…`), bearer/basic credentials, URL passwords. */
const SECRET_TEXT: Array<[RegExp, string]> = [
  [/\bsk-[A-Za-z0-9][A-Za-z0-9_-]{6,}/g, 'sk-…[redacted]'],
  [/\b(Bearer|Basic)\s+[A-Za-z0-9._~+/=-]{6,}/gi, '$1 [redacted]'],
  [/(\b[a-z][a-z0-9+.-]*:\/\/[^:/@\s]+:)[^@\s/]+@/gi, '$1***@'],
];
const RESERVED = new Set(['level', 'time', 'msg', 'component']);
const MAX_DEPTH = 8;

/** postgres://user:secret@host/db → postgres://user:***@host/db, for messages and logs. */
export function redactUrl(url: string): string {
  try {
    const u = new URL(url);
    if (u.password) u.password = '***';
    return u.toString();
  } catch {
    return url.replace(/:\/\/([^:/@]+):[^@]*@/, '://$1:***@');
  }
}

export function scrub(text: string): string {
  let s = text;
  for (const [re, to] of SECRET_TEXT) s = s.replace(re, to);
  return s;
}

export function isSecretKey(key: string): boolean {
  return SECRET_KEY.test(key);
}

/** An error as JSON: type, message, stack, code, status, cause (recursively), its other own fields. */
export function serializeError(err: Error, depth = 0, seen = new WeakSet<object>()): Record<string, unknown> {
  seen.add(err);
  const e = err as Error & { code?: unknown; cause?: unknown; errors?: unknown };
  const out: Record<string, unknown> = { type: e.name || e.constructor?.name || 'Error', message: scrub(String(e.message)) };
  if (e.code !== undefined) out.code = e.code;
  for (const [k, v] of Object.entries(e)) {
    if (k === 'cause' || k === 'errors' || k in out) continue;
    out[k] = isSecretKey(k) ? '[redacted]' : clean(v, depth + 1, seen);
  }
  if (e.stack) out.stack = scrub(e.stack);
  if (e.cause !== undefined) out.cause = clean(e.cause, depth + 1, seen);
  if (Array.isArray(e.errors)) out.errors = clean(e.errors, depth + 1, seen);
  return out;
}

/** A value made safe to log (see the file comment). */
export function clean(value: unknown, depth = 0, seen = new WeakSet<object>()): unknown {
  switch (typeof value) {
    case 'string':
      return scrub(value);
    case 'bigint':
      return value.toString();
    case 'function':
    case 'symbol':
      return undefined;
    case 'object':
      break;
    default:
      return value;
  }
  if (value === null) return null;
  if (seen.has(value)) return '[circular]';
  if (depth >= MAX_DEPTH) return '[too deep]';
  if (value instanceof Error) return serializeError(value, depth, seen);
  if (value instanceof Date) return Number.isNaN(value.getTime()) ? null : value.toISOString();
  if (Buffer.isBuffer(value) || value instanceof Uint8Array) return `[${value.byteLength} bytes]`;
  seen.add(value);
  try {
    if (Array.isArray(value)) return value.map((v) => clean(v, depth + 1, seen));
    if (value instanceof Map) return clean(Object.fromEntries(value), depth + 1, seen);
    if (value instanceof Set) return clean([...value], depth + 1, seen);
    const out: Record<string, unknown> = {};
    for (const [k, v] of Object.entries(value)) out[k] = isSecretKey(k) ? '[redacted]' : clean(v, depth + 1, seen);
    return out;
  } finally {
    seen.delete(value);
  }
}

function cleanFields(fields: Record<string, unknown>): Record<string, unknown> {
  const out: Record<string, unknown> = {};
  for (const [k, v] of Object.entries(fields)) {
    const key = RESERVED.has(k) ? `field_${k}` : k;
    out[key] = isSecretKey(k) ? '[redacted]' : clean(v);
  }
  return out;
}

// ---------------------------------------------------------------------------------- output

function levelFromEnv(): LogLevel {
  const v = String(process.env.LOG_LEVEL ?? 'info').toLowerCase();
  return (LOG_LEVELS as readonly string[]).includes(v) ? (v as LogLevel) : 'info';
}

function formatFromEnv(): LogFormat {
  return String(process.env.LOG_FORMAT ?? '').toLowerCase() === 'pretty' ? 'pretty' : 'json';
}

let settings: { format?: LogFormat; level?: LogLevel; write?: (line: string) => void } = {};
let root: pino.Logger | null = null;
/** Bumped by configureLogging(): component loggers rebuild their pino child from the new root. */
let generation = 0;

/**
 * Overrides LOG_FORMAT / LOG_LEVEL / the destination (stderr) for this process. Takes effect for
 * every logger, also those already created (the root is rebuilt).
 */
export function configureLogging(options: { format?: LogFormat; level?: LogLevel; write?: (line: string) => void }): void {
  settings = { ...settings, ...options };
  root = null;
  generation++;
}

function getRoot(): pino.Logger {
  if (root) return root;
  const format = settings.format ?? formatFromEnv();
  const level = settings.level ?? levelFromEnv();
  const color = format === 'pretty' && !settings.write && process.stderr.isTTY === true && !process.env.NO_COLOR;
  const write = settings.write;
  let destination: pino.DestinationStream;
  if (format === 'pretty') destination = { write: (line: string) => (write ?? writeStderr)(prettyLine(line.trimEnd(), { color }) + '\n') };
  else if (write) destination = { write };
  // Synchronous: a line written just before process.exit() is never lost.
  else destination = pino.destination({ fd: 2, sync: true });
  root = pino(
    {
      level,
      base: undefined,
      timestamp: pino.stdTimeFunctions.isoTime,
      formatters: { level: (label) => ({ level: label }) },
      // Fields arrive already cleaned (errors serialized by serializeError); pino's own `err`
      // serializer would drop their code and cause.
      serializers: { err: (v: unknown) => v },
    },
    destination,
  );
  return root;
}

function writeStderr(s: string): void {
  process.stderr.write(s);
}

export function createLogger(component: string, bindings: Record<string, unknown> = {}): ComponentLogger {
  let logger: pino.Logger | null = null;
  let builtFor = -1;
  const get = () => {
    if (!logger || builtFor !== generation) {
      logger = getRoot().child({ component, ...cleanFields(bindings) });
      builtFor = generation;
    }
    return logger;
  };
  const emit = (level: 'debug' | 'info' | 'warn' | 'error', msg: string, fields?: Record<string, unknown>) => {
    const l = get();
    if (!l.isLevelEnabled(level)) return;
    if (fields) l[level](cleanFields(fields), scrub(msg));
    else l[level](scrub(msg));
  };
  return {
    debug: (m, f) => emit('debug', m, f),
    info: (m, f) => emit('info', m, f),
    warn: (m, f) => emit('warn', m, f),
    error: (m, f) => emit('error', m, f),
    child: (more) => createLogger(component, { ...bindings, ...more }),
  };
}

let crashHandlers = false;

/**
 * Entry points call this once: an uncaught exception or unhandled rejection is logged as one JSON
 * line (with its stack) before the process exits with code 1.
 */
export function logCrashes(log: Logger): void {
  if (crashHandlers) return;
  crashHandlers = true;
  process.on('uncaughtException', (err, origin) => {
    log.error(origin === 'unhandledRejection' ? 'unhandled rejection' : 'uncaught exception', { err });
    process.exit(1);
  });
  process.on('unhandledRejection', (reason) => {
    log.error('unhandled rejection', { err: reason });
    process.exit(1);
  });
}

// ---------------------------------------------------------------------------------- pretty

const LEVEL_STYLE: Record<string, [string, string]> = {
  trace: ['TRACE', '\x1b[90m'],
  debug: ['DEBUG', '\x1b[90m'],
  info: ['INFO ', '\x1b[32m'],
  warn: ['WARN ', '\x1b[33m'],
  error: ['ERROR', '\x1b[31m'],
  fatal: ['FATAL', '\x1b[35m'],
};

function inline(v: unknown): string {
  if (typeof v === 'string') return /^[^\s"=]+$/.test(v) ? v : JSON.stringify(v);
  return JSON.stringify(v) ?? String(v);
}

/**
 * One JSON log line as a human line: `08:15:02.123 INFO  gateway  front door listening port=8080`,
 * an error's stack below it. Anything that is not a JSON log line comes back unchanged.
 */
export function prettyLine(line: string, opts: { color?: boolean } = {}): string {
  if (!line.startsWith('{')) return line;
  let o: Record<string, unknown>;
  try {
    o = JSON.parse(line);
  } catch {
    return line;
  }
  if (typeof o.level !== 'string' || typeof o.msg !== 'string') return line;
  const { level, time, component, msg, ...rest } = o;
  const [label, color] = LEVEL_STYLE[level] ?? [String(level).toUpperCase().padEnd(5), ''];
  const c = (code: string, s: string) => (opts.color && code ? `${code}${s}\x1b[0m` : s);
  const stacks: string[] = [];
  const parts: string[] = [];
  for (const [k, v] of Object.entries(rest)) {
    if (v && typeof v === 'object' && !Array.isArray(v) && typeof (v as { stack?: unknown }).stack === 'string') {
      const { stack, ...err } = v as Record<string, unknown>;
      stacks.push(String(stack));
      parts.push(`${k}=${inline(err)}`);
    } else parts.push(`${k}=${inline(v)}`);
  }
  const t = typeof time === 'string' ? time.slice(11, 23) : '';
  const head = [c('\x1b[90m', t), c(color, label), component ? c('\x1b[36m', String(component)) : '', msg, parts.length ? c('\x1b[90m', parts.join(' ')) : '']
    .filter(Boolean)
    .join(' ');
  return stacks.length ? `${head}\n${stacks.map((s) => s.replace(/^/gm, '    ')).join('\n')}` : head;
}
