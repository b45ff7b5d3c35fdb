// `catraca <command>`: the admin CLI. Exit codes: 0 ok, 1 failure, 2 usage error.
// With --json every command prints exactly one JSON object on stdout; messages go to stderr.
import { existsSync } from 'node:fs';
import { fileURLToPath } from 'node:url';
import { creditsGrant, keyCreate, keyRevoke, ledgerCheckCommand, modelSet, tenantCreate } from './commands.ts';
import { CliError, createContext, UsageError, type CliContext } from './context.ts';

export const USAGE = `catraca — admin CLI of the catraca gateway

Usage: catraca <command> [options] [--json]

  tenant create --name NAME                                  → {id, name}
  key create --tenant ID [--label L] [--models '*'|a/b,c/d]
             [--limit BRL] [--limit-reset daily|weekly|monthly]
             [--rate-limit N/INTERVAL  e.g. 60/60s, 100/1m]   → {id, key, label, models}
  key revoke --id KEY_ID                                     → {id, revoked: true}
  credits grant --tenant ID --amount 12.34 [--note TEXT]
                [--external-id ID  (grant at most once per id)] → {tenant, balance}
  model set --id vendor/name --pool POOL [--upstream-model M]
            [--base-url URL] [--api-key-env VAR]
            --input-price BRL_PER_1M_TOKENS --output-price BRL_PER_1M_TOKENS
            [--max-output-tokens N] [--context-length N]    → {id, pool, upstream_model, …}
  ledger check [--tenant ID]                                 → {ok, tenants_checked, mismatches}
  status                                                     (health of a running stack)
  pix pay --txid TXID [--valor 12.34]                         (dev: pay a charge at the Pix simulator)

Amounts are BRL decimal strings with at most 6 decimals ("12.34"); balances and prices are
printed the same way, exact. --api-key-env takes the NAME of an environment variable that holds
the upstream key, never the key.

Connection: DATABASE_URL / NATS_URL when set; otherwise the stack started with \`npm start\` in
this checkout (.catraca/stack.json).
Exit codes: 0 success, 1 failure, 2 usage error.
`;

type Command = (ctx: CliContext, args: string[]) => Promise<number | void>;

const COMMANDS: Record<string, Command> = {
  'tenant create': tenantCreate,
  'key create': keyCreate,
  'key revoke': keyRevoke,
  'credits grant': creditsGrant,
  'model set': modelSet,
  'ledger check': ledgerCheckCommand,
  status: runStatusCommand,
  // Development only: pays a charge at the portal's built-in Pix simulator (src/cli/pix.ts).
  'pix pay': async (ctx, args) => (await import('./pix.ts')).pixPay(ctx, args),
};

/** `catraca status` lives in src/cli/status.ts (monitoring); its runStatus takes {natsUrl, json, args}. */
async function runStatusCommand(ctx: CliContext, args: string[]): Promise<number | void> {
  const file = fileURLToPath(new URL('./status.ts', import.meta.url));
  if (!existsSync(file)) throw new CliError('status: not available in this checkout (src/cli/status.ts is missing)');
  const mod = (await import(new URL('./status.ts', import.meta.url).href)) as {
    runStatus?: (ctx: { natsUrl: string; json: boolean; args: string[] }, args: string[]) => Promise<number | void>;
  };
  if (typeof mod.runStatus !== 'function') throw new CliError('status: not available (src/cli/status.ts exports no runStatus)');
  const natsUrl = ctx.natsUrl();
  if (!natsUrl) throw new CliError('status: no NATS to ask: start the stack with `npm start` in this checkout, or set NATS_URL');
  return mod.runStatus({ natsUrl, json: ctx.json, args: args.filter((a) => a !== '--json') }, args);
}

export interface RunOptions {
  cwd?: string;
  env?: Record<string, string | undefined>;
  stdout?: (s: string) => void;
  stderr?: (s: string) => void;
}

/** Runs one command line; returns the exit code (never calls process.exit). */
export async function run(argv: string[], opts: RunOptions = {}): Promise<number> {
  const stderr = opts.stderr ?? ((s: string) => process.stderr.write(s));
  const stdout = opts.stdout ?? ((s: string) => process.stdout.write(s));
  const json = argv.includes('--json');
  const positionals: string[] = [];
  for (const a of argv) {
    if (a.startsWith('-')) break;
    positionals.push(a);
  }
  if (argv.length === 0 || argv[0] === '--help' || argv[0] === '-h' || argv[0] === 'help') {
    stdout(USAGE);
    return argv.length === 0 ? 2 : 0;
  }
  const name = positionals.length >= 2 && COMMANDS[`${positionals[0]} ${positionals[1]}`] ? `${positionals[0]} ${positionals[1]}` : positionals[0];
  const command = name ? COMMANDS[name] : undefined;
  if (!command) {
    stderr(`catraca: unknown command ${JSON.stringify(positionals.slice(0, 2).join(' ') || argv[0])}\n\n${USAGE}`);
    return 2;
  }
  const rest = argv.slice(name.split(' ').length);
  if (rest.includes('--help') || rest.includes('-h')) {
    stdout(USAGE);
    return 0;
  }
  const ctx = createContext({ json, cwd: opts.cwd, env: opts.env, stdout, stderr });
  try {
    const code = await command(ctx, rest);
    return typeof code === 'number' ? code : 0;
  } catch (err) {
    if (err instanceof CliError) {
      stderr(`catraca: ${err.message}\n`);
      if (err instanceof UsageError) stderr(`Run \`catraca --help\` for usage.\n`);
      return err.exitCode;
    }
    const e = err as Error & { code?: string };
    stderr(`catraca: ${name} failed: ${e.message}${e.code ? ` (${e.code})` : ''}\n`);
    return 1;
  }
}

export async function main(argv = process.argv.slice(2)): Promise<void> {
  const code = await run(argv);
  // Let stdout drain before leaving; pools and NATS connections are closed by the commands.
  process.exitCode = code;
}
