import { execFile, execFileSync } from 'node:child_process';
import { appendFileSync, chmodSync, existsSync, mkdirSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { promisify } from 'node:util';
import pg from 'pg';

// A PostgreSQL cluster of a test's own, from the PostgreSQL binaries on the machine (Debian's
// postgresql-15: initdb, pg_ctl, pg_basebackup), with WAL archiving, for the backup-and-restore
// drill (docs/operations.md, "Backup and restore"). PostgreSQL refuses to run as root: as root,
// every binary runs as the `postgres` user (runuser).

const run = promisify(execFile);

export const PG_BIN = process.env.PG_BIN || '/usr/lib/postgresql/15/bin';

/** Whether initdb, pg_ctl and pg_basebackup are there. */
export function pgBinariesPresent(): boolean {
  return ['initdb', 'pg_ctl', 'pg_basebackup'].every((b) => existsSync(join(PG_BIN, b)));
}

const asRoot = process.getuid?.() === 0;

async function pgRun(bin: string, args: string[]): Promise<string> {
  const [cmd, argv] = asRoot ? ['runuser', ['-u', 'postgres', '--', join(PG_BIN, bin), ...args]] : [join(PG_BIN, bin), args];
  try {
    const { stdout } = await run(cmd, argv, { timeout: 60_000 });
    return stdout;
  } catch (err) {
    const e = err as { stderr?: string; message: string };
    throw new Error(`${bin} ${args.join(' ')}: ${e.message} ${e.stderr ?? ''}`);
  }
}

/** A directory the cluster's user may write (mode 0700 for a data directory). */
function ownDir(path: string, mode = 0o700): string {
  mkdirSync(path, { recursive: true });
  chmodSync(path, mode);
  if (asRoot) execFileSyncChown(path);
  return path;
}

function execFileSyncChown(path: string): void {
  // the postgres user must own what it writes
  execFileSync('chown', ['-R', 'postgres:postgres', path]);
}

export interface PgCluster {
  dir: string;
  port: number;
  /** the superuser `catraca`, database catraca */
  url: string;
  start(): Promise<void>;
  /** `immediate`: as a crash (no shutdown checkpoint, the WAL not yet archived stays unarchived) */
  stop(mode?: 'fast' | 'immediate'): Promise<void>;
}

export interface Workspace {
  root: string;
  /** where archive_command copies WAL segments */
  archive: string;
  remove(): void;
}

export function workspace(): Workspace {
  const root = mkdtempSync(join(tmpdir(), 'catraca-drill-'));
  chmodSync(root, 0o755);
  const archive = join(root, 'wal-archive');
  ownDir(archive);
  if (asRoot) execFileSyncChown(root);
  return { root, archive, remove: () => rmSync(root, { recursive: true, force: true }) };
}

function cluster(dir: string, port: number): PgCluster {
  const c: PgCluster = {
    dir,
    port,
    url: `postgres://catraca@127.0.0.1:${port}/catraca`,
    start: async () => {
      await pgRun('pg_ctl', ['-D', dir, '-l', join(dir, 'server.log'), '-w', '-t', '60', 'start']);
    },
    stop: async (mode = 'fast') => {
      await pgRun('pg_ctl', ['-D', dir, '-m', mode, '-w', 'stop']).catch(() => {});
    },
  };
  return c;
}

/**
 * A new cluster with WAL archiving into `archive` (archive_timeout `archiveTimeoutS`), 1 MiB WAL
 * segments (the drill fills some in seconds), trust authentication on 127.0.0.1, started, with a
 * database `catraca` owned by the superuser `catraca`.
 */
export async function primaryCluster(ws: Workspace, port: number, archiveTimeoutS: number): Promise<PgCluster> {
  const dir = ownDir(join(ws.root, 'primary'));
  await pgRun('initdb', ['-D', dir, '-U', 'catraca', '--auth=trust', '-E', 'UTF8', '--locale=C', '--wal-segsize=1']);
  appendFileSync(
    join(dir, 'postgresql.conf'),
    [
      `port = ${port}`,
      `listen_addresses = '127.0.0.1'`,
      `unix_socket_directories = '${dir}'`,
      'max_connections = 200',
      'wal_level = replica',
      'archive_mode = on',
      `archive_command = 'test ! -f ${ws.archive}/%f && cp %p ${ws.archive}/%f'`,
      `archive_timeout = ${archiveTimeoutS}`,
      'max_wal_senders = 4',
      '',
    ].join('\n'),
  );
  const c = cluster(dir, port);
  await c.start();
  const admin = new pg.Client({ connectionString: `postgres://catraca@127.0.0.1:${port}/postgres` });
  await admin.connect();
  await admin.query('create database catraca');
  await admin.end();
  return c;
}

/** `pg_basebackup` of a running cluster into `ws.root/<name>` (plain format, its WAL streamed in, a fast checkpoint). */
export async function baseBackup(ws: Workspace, from: PgCluster, name: string): Promise<string> {
  const dir = join(ws.root, name);
  await pgRun('pg_basebackup', ['-h', '127.0.0.1', '-p', String(from.port), '-U', 'catraca', '-D', dir, '-Fp', '-X', 'stream', '-c', 'fast']);
  return dir;
}

/**
 * A new cluster from a base backup, recovering every segment of the WAL archive (restore_command),
 * then promoted: what `docs/operations.md` tells an operator to do. Resolves once it accepts
 * writes.
 */
export async function restoreCluster(ws: Workspace, backupDir: string, name: string, port: number): Promise<PgCluster> {
  const dir = join(ws.root, name);
  await run('cp', ['-a', backupDir, dir]);
  chmodSync(dir, 0o700);
  writeFileSync(join(dir, 'recovery.signal'), '');
  appendFileSync(
    join(dir, 'postgresql.auto.conf'),
    [`port = ${port}`, `unix_socket_directories = '${dir}'`, `restore_command = 'cp ${ws.archive}/%f %p'`, 'archive_mode = off', ''].join('\n'),
  );
  if (asRoot) execFileSyncChown(dir);
  const c = cluster(dir, port);
  await c.start();
  const deadline = Date.now() + 60_000;
  for (;;) {
    const client = new pg.Client({ connectionString: c.url });
    try {
      await client.connect();
      const { rows } = await client.query('select pg_is_in_recovery() as r');
      if (!rows[0].r) return c;
    } catch {
      // still starting or recovering
    } finally {
      await client.end().catch(() => {});
    }
    if (Date.now() > deadline) throw new Error(`the restored cluster did not finish recovery within 60 s (see ${dir}/server.log)`);
    await new Promise((r) => setTimeout(r, 100));
  }
}
