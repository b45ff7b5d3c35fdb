import { copyFileSync, mkdtempSync, readdirSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import pg from 'pg';
import type { Settlement } from '../src/billing/ledger.ts';
import { MIGRATION_FILE, migrate } from '../src/db/migrate.ts';
import { readCpuSeconds } from './procs.ts';

// What the PostgreSQL-only benchmarks (settle-batch.ts, admit-batch.ts) share: a fresh database
// migrated up to a given migration, and every statement of one call printed with its actual time.

/** Drops and creates `name` on `server`, then migrates it, only up to migration `upto` when given. Returns the files applied. */
export async function freshDatabase(server: string, name: string, upto?: string): Promise<string[]> {
  const admin = new pg.Client({ connectionString: `${server}/postgres` });
  await admin.connect();
  await admin.query(`drop database if exists "${name}" with (force)`);
  await admin.query(`create database "${name}"`);
  await admin.end();
  const url = `${server}/${name}`;
  if (!upto) return migrate(url);
  const all = join(dirname(fileURLToPath(import.meta.url)), '..', 'src', 'db', 'migrations');
  const dir = mkdtempSync(join(tmpdir(), 'catraca-pg-bench-'));
  try {
    for (const f of readdirSync(all).filter((f) => MIGRATION_FILE.test(f) && f.slice(0, upto.length) <= upto)) copyFileSync(join(all, f), join(dir, f));
    return await migrate(url, { dir });
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
}

/**
 * Prints every statement `fn` runs on `client` with its actual time (auto_explain at notice level,
 * nested statements), after 20 unprinted calls so the plans are past their custom-plan phase.
 * BENCH_PLANS=1 prints the plans too.
 */
export async function explainCalls(client: pg.ClientBase): Promise<(what: string, fn: () => Promise<unknown>) => Promise<void>> {
  await client.query("load 'auto_explain'");
  await client.query(
    "set auto_explain.log_min_duration = 0; set auto_explain.log_analyze = on; set auto_explain.log_nested_statements = on; set auto_explain.log_level = 'notice'; set auto_explain.log_format = 'text'",
  );
  const notices: string[] = [];
  client.on('notice', (m) => notices.push(m.message ?? ''));
  return async (what, fn) => {
    for (let i = 0; i < 20; i++) await fn();
    notices.length = 0;
    await fn();
    console.log(`\n--- statements of one ${what} (auto_explain, actual times) ---`);
    for (const m of notices) {
      const [head, ...plan] = m.split('\n');
      const query =
        plan
          .find((l) => l.startsWith('Query Text:'))
          ?.slice(12)
          .replace(/\s+/g, ' ') ?? '';
      console.log(`${head.replace('duration: ', '')}  ${query.slice(0, 150)}`);
      if (process.env.BENCH_PLANS) console.log(plan.filter((l) => !l.startsWith('Query Text:')).join('\n'));
    }
  };
}

/** CPU seconds (user + system) a PostgreSQL backend has used so far (it must run on this machine). */
export function backendCpuSeconds(pid: number): number {
  const s = readCpuSeconds(pid);
  if (s === null) throw new Error(`no /proc/${pid}/stat: is PostgreSQL running on this machine?`);
  return s;
}

/** The usage of bench request number `i` (costs and token counts varied by `i`), as metering settles it. */
export function benchSettlement(i: number, ids: { requestId: string; tenantId: string; keyId: string; hold?: string }): Settlement {
  return {
    ...ids,
    costMicros: BigInt(500 + ((i * 7919) % 4500)),
    model: 'bench/mock',
    inputTokens: 120 + (i % 50),
    outputTokens: 200 + (i % 300),
    estimated: false,
    outcome: 'completed',
    at: new Date(),
  };
}
