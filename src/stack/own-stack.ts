// A stack of its own for integration tests and benchmarks: a nats-server in a temporary directory
// (or the NATS it is given), an embedded PostgreSQL in a temporary directory (or the one it is
// given, as a superuser), migrated; catraca processes started through startProcess, each
// connecting as its own PostgreSQL role (passwords derived from the URL, src/db/roles.ts). The
// caller seeds what it needs (as the superuser: `databaseUrl`) and picks which processes run. `npm start` (src/stack/main.ts) is built on the same pieces but
// keeps its data, reuses running services and restarts its children.
import { mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { migrate } from '../db/migrate.ts';
import { derivedRolePasswords, type LoginRole, roleUrl } from '../db/roles.ts';
import { Teardown } from '../process/teardown.ts';
import { startProcess, type ProcessName, type StartedProcess, type StartProcessOptions } from './processes.ts';
import { embeddedPgDir, ensureNats, ensurePostgres, freePort, type ServiceHandle } from './services.ts';

export interface OwnStackOptions {
  /** Use this NATS as it is (a shared server, a cluster's URL list, one with authentication). */
  natsUrl?: string;
  /** More arguments for the own nats-server (`-m PORT` for monitoring, `-l FILE`). */
  natsArgs?: string[];
  /** Use this PostgreSQL as it is (migrated); default: an embedded one of this stack's own. */
  databaseUrl?: string;
  /** The database of the own PostgreSQL (default catraca). */
  database?: string;
  /** Start of the temporary directories' names (default `catraca-`). */
  tmpPrefix?: string;
  /** What every process gets unless start() says otherwise; `env` is merged. */
  processDefaults: Omit<StartProcessOptions, 'natsUrl' | 'databaseUrl'>;
}

export interface OwnStack {
  natsUrl: string;
  /** As the superuser it was given (or of its own PostgreSQL): for seeding and checks. */
  databaseUrl: string;
  /** A role's URL: what each process connects with (the admin CLI's too). */
  roleUrl(role: LoginRole): string;
  /** This stack's own nats-server (null: the NATS it was given). */
  readonly nats: ServiceHandle | null;
  /** The postmaster of this stack's own PostgreSQL (null: the one it was given): its CPU is the stack's. */
  postmasterPid: number | null;
  /** Every process started, in order. */
  processes: StartedProcess[];
  /** Starts a process with this stack's NATS_URL and its role's DATABASE_URL: the defaults, then `opts` (env merged). */
  start(kind: ProcessName, opts?: Partial<StartProcessOptions>): StartedProcess;
  /** Stops the own nats-server and starts it again on the same port and store (chaos tests). */
  restartNats(downMs?: number): Promise<void>;
  /** A step for stop(), after the processes and before PostgreSQL and NATS (such steps run in reverse order). */
  onStop(step: () => unknown): void;
  /** Front doors and portals, then workers, then metering (each kind together), the onStop steps, PostgreSQL, NATS. */
  stop(): Promise<void>;
}

/** The order processes stop in: nothing takes new requests, then jobs finish, then the last usage is metered. */
const STOP_ORDER: ProcessName[][] = [['gateway', 'portal', 'console'], ['worker'], ['metering']];

export async function startOwnStack(opts: OwnStackOptions): Promise<OwnStack> {
  const teardown = new Teardown();
  const prefix = opts.tmpPrefix ?? 'catraca-';
  const tmp = (what: string) => {
    const dir = mkdtempSync(join(tmpdir(), `${prefix}${what}-`));
    teardown.add(() => rmSync(dir, { recursive: true, force: true }));
    return dir;
  };
  try {
    let nats = null as ServiceHandle | null;
    let natsDir = '';
    let natsPort = 0;
    const startNats = async () => (nats = await ensureNats({ dataDir: natsDir, port: natsPort, args: opts.natsArgs }));
    const ownNats = async () => {
      natsDir = tmp('nats');
      natsPort = await freePort();
      teardown.add(() => nats?.stop());
      return (await startNats()).url;
    };
    const ownPostgres = async () => {
      const dir = join(tmp('pg'), 'pg');
      // as root the cluster lives elsewhere (see embeddedPgDir): that directory goes too
      teardown.add(() => rmSync(embeddedPgDir(dir), { recursive: true, force: true }));
      const pg = await ensurePostgres({ dataDir: dir, port: await freePort(), database: opts.database });
      teardown.add(() => pg.stop());
      return { url: pg.url, pid: Number(readFileSync(join(embeddedPgDir(dir), 'postmaster.pid'), 'utf8').split('\n')[0]) };
    };
    const natsUrl = opts.natsUrl || (await ownNats());
    const pg = opts.databaseUrl ? null : await ownPostgres();
    const databaseUrl = pg?.url ?? opts.databaseUrl!;
    const passwords = derivedRolePasswords(databaseUrl);
    await migrate(databaseUrl, { rolePasswords: passwords });
    const urlOf = (role: LoginRole) => roleUrl(databaseUrl, role, passwords[role]);

    const processes: StartedProcess[] = [];
    let stopping: Promise<void> | null = null;
    const stopProcesses = async () => {
      for (const kinds of STOP_ORDER) {
        await Promise.all(processes.filter((p) => kinds.includes(p.kind)).map((p) => p.stop('SIGTERM', 15000)));
      }
    };
    return {
      natsUrl,
      databaseUrl,
      roleUrl: urlOf,
      get nats() {
        return nats;
      },
      postmasterPid: pg?.pid ?? null,
      processes,
      start(kind, o = {}) {
        const { processDefaults: d } = opts;
        const p = startProcess(kind, { ...d, natsUrl, databaseUrl: urlOf(kind), ...o, env: { ...d.env, ...o.env } });
        processes.push(p);
        return p;
      },
      async restartNats(downMs = 500) {
        if (!nats) throw new Error('restartNats needs a stack-owned nats-server');
        await nats.stop();
        await new Promise((r) => setTimeout(r, downMs));
        await startNats();
      },
      onStop: (step) => teardown.add(step),
      stop: () => (stopping ??= stopProcesses().then(() => teardown.run())),
    };
  } catch (err) {
    await teardown.run().catch(() => {});
    throw err;
  }
}
