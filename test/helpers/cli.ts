import { execFile } from 'node:child_process';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';

export const ROOT = join(dirname(fileURLToPath(import.meta.url)), '..', '..');
const BIN = join(ROOT, 'bin', 'catraca.js');

export interface CliResult {
  code: number;
  stdout: string;
  stderr: string;
  // biome-ignore lint/suspicious/noExplicitAny: each command prints its own JSON document
  json: any;
}

/**
 * `catraca <args>` as a child process, as an operator runs it: the run's DATABASE_URL and NATS_URL
 * unless `env` says otherwise (undefined removes a variable); stdout parsed as JSON when it is.
 */
export function cli(args: string[], env: Record<string, string | undefined> = {}, cwd = ROOT): Promise<CliResult> {
  const base: Record<string, string | undefined> = { ...process.env, DATABASE_URL: process.env.DATABASE_URL, NATS_URL: process.env.NATS_URL };
  const merged = { ...base, ...env };
  for (const k of Object.keys(merged)) if (merged[k] === undefined) delete merged[k];
  return new Promise((resolve) => {
    execFile(process.execPath, [BIN, ...args], { cwd, env: merged as NodeJS.ProcessEnv, timeout: 90_000 }, (err, stdout, stderr) => {
      const code = err ? ((err as { code?: number }).code ?? 1) : 0;
      let json: unknown;
      try {
        json = stdout.trim() ? JSON.parse(stdout) : undefined;
      } catch {
        json = undefined;
      }
      resolve({ code: typeof code === 'number' ? code : 1, stdout, stderr, json });
    });
  });
}
