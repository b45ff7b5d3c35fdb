// What every admin command receives: output helpers and how to reach the database and NATS.
import { readStackState, type StackState } from '../stack/state.ts';

/** A failure the user can act on: its message goes to stderr, the process exits with `exitCode`. */
export class CliError extends Error {
  constructor(
    message: string,
    readonly exitCode = 1,
  ) {
    super(message);
    this.name = 'CliError';
  }
}

/** Wrong command line (unknown command or flag, missing or malformed value): exit code 2. */
export class UsageError extends CliError {
  constructor(message: string) {
    super(message, 2);
    this.name = 'UsageError';
  }
}

export interface CliContext {
  /** `--json` was given: print exactly one JSON object on stdout. */
  json: boolean;
  cwd: string;
  env: Record<string, string | undefined>;
  /** The stack started by `npm start` in this checkout, when it is running. */
  stack: StackState | null;
  /** DATABASE_URL, else the running stack's; throws a CliError telling how to get one. */
  databaseUrl(): string;
  /** NATS_URL, else the running stack's, else null. */
  natsUrl(): string | null;
  /** Prints the result: `value` as one JSON line with --json, `human` otherwise. */
  out(value: Record<string, unknown>, human: string): void;
  /** A note for the operator on stderr (never on stdout, so --json output stays one object). */
  warn(message: string): void;
}

export function createContext(opts: {
  json: boolean;
  cwd?: string;
  env?: Record<string, string | undefined>;
  stdout?: (s: string) => void;
  stderr?: (s: string) => void;
}): CliContext {
  const cwd = opts.cwd ?? process.cwd();
  const env = opts.env ?? process.env;
  const stdout = opts.stdout ?? ((s: string) => process.stdout.write(s));
  const stderr = opts.stderr ?? ((s: string) => process.stderr.write(s));
  let stack: StackState | null | undefined;
  const getStack = () => (stack === undefined ? (stack = readStackState(cwd)) : stack);
  return {
    json: opts.json,
    cwd,
    env,
    get stack() {
      return getStack();
    },
    databaseUrl() {
      const url = env.DATABASE_URL || getStack()?.database_url;
      if (!url) {
        throw new CliError('no database to talk to: start the stack with `npm start` in this checkout (in another terminal), or set DATABASE_URL');
      }
      return url;
    },
    natsUrl() {
      return env.NATS_URL || getStack()?.nats_url || null;
    },
    out(value, human) {
      stdout(opts.json ? JSON.stringify(value) + '\n' : human + '\n');
    },
    warn(message) {
      stderr(`catraca: warning: ${message}\n`);
    },
  };
}
