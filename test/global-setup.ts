// vitest globalSetup: real services for the whole run, isolated from anything else on the machine.
//   NATS: always a nats-server of our own (JetStream, free port, temporary store), so a test run
//         never shares subjects or streams with a running stack. Tests may stop/restart it:
//         TEST_NATS_PORT, TEST_NATS_STORE, TEST_NATS_PID, TEST_NATS_PIDFILE, TEST_NATS_BIN,
//         TEST_NATS_ARGS (JSON array) describe it; teardown kills the pid in TEST_NATS_PIDFILE too.
//   PostgreSQL: DATABASE_URL when set and reachable, else 127.0.0.1:5432 when it answers, else an
//         embedded cluster (persistent under .catraca/test-pg, or /tmp/catraca-<hash>/ as root).
//         (CATRACA_TEST_EMBEDDED_PG=1 forces the embedded cluster, to try the CI path.)
//         Every run gets a fresh database catraca_test_<timestamp>_<rand>, migrated, dropped after.
//         The processes' roles get passwords derived from DATABASE_URL's (derivedRoleUrl gives their URLs).
// Test files see NATS_URL and DATABASE_URL in process.env (also via inject(), see setup-env.ts).
import { randomBytes } from 'node:crypto';
import { existsSync, mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import pg from 'pg';
import type { TestProject } from 'vitest/node';
import { migrate } from '../src/db/migrate.ts';
import { derivedRolePasswords } from '../src/db/roles.ts';
import { ensureNats, ensurePostgres, findNatsServer, freePort, probePostgres, type ServiceHandle } from '../src/stack/services.ts';

const ROOT = join(dirname(fileURLToPath(import.meta.url)), '..');

declare module 'vitest' {
  export interface ProvidedContext {
    testEnv: Record<string, string>;
  }
}

function withDatabase(url: string, name: string): string {
  const u = new URL(url);
  u.pathname = `/${name}`;
  return u.toString();
}

async function adminQuery(serverUrl: string, sql: string): Promise<pg.QueryResult> {
  const client = new pg.Client({ connectionString: withDatabase(serverUrl, 'postgres') });
  client.on('error', () => {});
  await client.connect();
  try {
    return await client.query(sql);
  } finally {
    await client.end().catch(() => {});
  }
}

export default async function setup(project: TestProject) {
  const started = Date.now();
  const teardown: Array<() => Promise<void>> = [];
  const runTeardown = async () => {
    for (const fn of teardown.splice(0).reverse()) await fn().catch((err) => console.error('[global-setup] teardown step failed:', err));
  };

  try {
    // ------------------------------------------------------------------------------- NATS
    const store = mkdtempSync(join(tmpdir(), 'catraca-test-nats-'));
    const port = await freePort();
    const nats: ServiceHandle = await ensureNats({ dataDir: store, port });
    const pidFile = join(store, 'nats-server.pid');
    const natsPid = existsSync(pidFile) ? readFileSync(pidFile, 'utf8').trim() : '';
    teardown.push(async () => {
      await nats.stop();
      // A test that restarted the server with -P $TEST_NATS_PIDFILE left a process we do not own as a child.
      if (existsSync(pidFile)) {
        const pid = Number(readFileSync(pidFile, 'utf8').trim());
        try {
          if (pid > 0) process.kill(pid, 'SIGTERM');
        } catch {}
      }
      rmSync(store, { recursive: true, force: true });
    });

    // -------------------------------------------------------------------------- PostgreSQL
    let serverUrl: string;
    const forceEmbedded = process.env.CATRACA_TEST_EMBEDDED_PG === '1';
    if (!forceEmbedded && process.env.DATABASE_URL && (await probePostgres(process.env.DATABASE_URL)) === 'ok') serverUrl = process.env.DATABASE_URL;
    else if (!forceEmbedded && (await probePostgres('postgres://postgres@127.0.0.1:5432/postgres')) === 'ok')
      serverUrl = 'postgres://postgres@127.0.0.1:5432/postgres';
    else {
      const embedded = await ensurePostgres({ dataDir: join(ROOT, '.catraca', 'test-pg'), database: 'postgres' });
      teardown.push(() => embedded.stop());
      serverUrl = embedded.url;
    }
    const dbName = `catraca_test_${Date.now()}_${randomBytes(3).toString('hex')}`;
    const databaseUrl = withDatabase(serverUrl, dbName);
    await adminQuery(serverUrl, `create database "${dbName}"`);
    teardown.push(async () => {
      await adminQuery(serverUrl, `drop database if exists "${dbName}" with (force)`);
    });
    // Databases of crashed earlier runs (older than 6 hours) are dropped too.
    const { rows } = await adminQuery(serverUrl, `select datname from pg_database where datname like 'catraca\\_test\\_%'`);
    for (const { datname } of rows as Array<{ datname: string }>) {
      const ts = Number(/^catraca_test_(\d+)_/.exec(datname)?.[1]);
      if (ts && ts < Date.now() - 6 * 3600_000) await adminQuery(serverUrl, `drop database if exists "${datname}" with (force)`).catch(() => {});
    }
    // the roles of the processes get their passwords (src/db/roles.ts): test stacks connect each process as its role
    await migrate(databaseUrl, { rolePasswords: derivedRolePasswords(databaseUrl) });

    const testEnv: Record<string, string> = {
      NATS_URL: nats.url,
      DATABASE_URL: databaseUrl,
      TEST_NATS_PORT: String(port),
      TEST_NATS_STORE: store,
      TEST_NATS_PID: natsPid,
      TEST_NATS_PIDFILE: pidFile,
      TEST_NATS_BIN: findNatsServer(),
      TEST_NATS_ARGS: JSON.stringify(['-js', '-a', '127.0.0.1', '-p', String(port), '-sd', store, '-P', pidFile]),
    };
    // Forks inherit the environment of this process; provide() covers pools that do not.
    Object.assign(process.env, testEnv);
    project.provide('testEnv', testEnv);
    if (process.env.CATRACA_TEST_VERBOSE) console.error(`[global-setup] ready in ${Date.now() - started} ms: nats ${nats.url}, db ${dbName}`);
  } catch (err) {
    await runTeardown();
    throw err;
  }

  return runTeardown;
}
