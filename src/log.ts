// One-line JSON logs on stderr. Callers pass structured fields; nothing here ever receives an API
// key or an upstream secret (keys are identified by their id, never their value).
const levels = { debug: 10, info: 20, warn: 30, error: 40, silent: 99 } as const;
type Level = keyof typeof levels;
const threshold = levels[(process.env.LOG_LEVEL as Level) ?? 'info'] ?? levels.info;

export interface Logger {
  debug(msg: string, fields?: Record<string, unknown>): void;
  info(msg: string, fields?: Record<string, unknown>): void;
  warn(msg: string, fields?: Record<string, unknown>): void;
  error(msg: string, fields?: Record<string, unknown>): void;
}

export function createLogger(component: string): Logger {
  const emit = (level: Level, msg: string, fields?: Record<string, unknown>) => {
    if (levels[level] < threshold) return;
    const line: Record<string, unknown> = { t: new Date().toISOString(), level, component, msg };
    if (fields) for (const [k, v] of Object.entries(fields)) line[k] = v instanceof Error ? v.message : v;
    process.stderr.write(JSON.stringify(line) + '\n');
  };
  return {
    debug: (m, f) => emit('debug', m, f),
    info: (m, f) => emit('info', m, f),
    warn: (m, f) => emit('warn', m, f),
    error: (m, f) => emit('error', m, f),
  };
}
