import { execSync } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { parseArgs } from 'node:util';
import { connect, StorageType } from 'nats';
import pg from 'pg';
import { type Cell, table } from '../src/cli/table.ts';
import { readCpuSeconds } from './procs.ts';

// Where batch files live (docs/batch.md, "Where files live"): PostgreSQL's bytea column against the
// JetStream object store, for the sizes a batch file has. For each size, --rounds puts and gets of
// one file in each store, on this machine's PostgreSQL and NATS (127.0.0.1), measured as wall time
// and as the CPU of the server that stores it (the PostgreSQL backend of the connection; the
// nats-server process) and of this client. Each store is given what a batch file needs: PostgreSQL
// a table like batch_files (its own throwaway database), JetStream a file-storage bucket with one
// replica (a cluster's would be 3: more work for the object store, not measured here).
//
//   npx tsx bench/files-store.ts [--sizes 1,8,64] [--rounds 5] [--server postgres://postgres@127.0.0.1:5432] [--nats nats://127.0.0.1:4222]

const { values } = parseArgs({
  options: {
    sizes: { type: 'string', default: '1,8,64' },
    rounds: { type: 'string', default: '5' },
    server: { type: 'string', default: 'postgres://postgres@127.0.0.1:5432' },
    nats: { type: 'string', default: process.env.NATS_URL ?? 'nats://127.0.0.1:4222' },
  },
});

const MiB = 1024 * 1024;
const DB = 'catraca_files_bench';
const BUCKET = `catraca-files-bench-${process.pid}`;

/** A JSONL-like payload of `bytes` (random hex in lines: neither store compresses it away). */
function payload(bytes: number): Uint8Array {
  const hex = randomBytes(Math.ceil(bytes / 2)).toString('hex');
  const buf = Buffer.from(hex.slice(0, bytes));
  for (let i = 200; i < buf.length; i += 201) buf[i] = 0x0a;
  return buf;
}

function natsServerPid(): number | null {
  const out = execSync('pgrep -o -x nats-server || true').toString().trim();
  return out ? Number(out) : null;
}

interface Sample {
  wallMs: number;
  serverCpuMs: number;
  clientCpuMs: number;
}

const med = (xs: number[]) => [...xs].sort((a, b) => a - b)[Math.floor(xs.length / 2)]!;
const round = (x: number) => Math.round(x * 10) / 10;

async function measure(serverCpu: () => number, fn: () => Promise<void>): Promise<Sample> {
  const c0 = process.cpuUsage();
  const s0 = serverCpu();
  const t0 = performance.now();
  await fn();
  const wallMs = performance.now() - t0;
  const c = process.cpuUsage(c0);
  return { wallMs, serverCpuMs: (serverCpu() - s0) * 1000, clientCpuMs: (c.user + c.system) / 1000 };
}

async function main() {
  const sizes = values.sizes!.split(',').map(Number);
  const rounds = Number(values.rounds);
  const admin = new pg.Client({ connectionString: `${values.server}/postgres` });
  await admin.connect();
  await admin.query(`drop database if exists ${DB}`);
  await admin.query(`create database ${DB}`);
  const db = new pg.Client({ connectionString: `${values.server}/${DB}` });
  await db.connect();
  await db.query(
    `create table files (id text primary key, tenant_id text not null, bytes int not null, content bytea not null, created_at timestamptz not null default now())`,
  );
  const backend = (await db.query('select pg_backend_pid() as pid')).rows[0].pid as number;
  const pgCpu = () => readCpuSeconds(backend) ?? Number.NaN;
  const nc = await connect({ servers: values.nats, maxPingOut: 10 });
  const os = await nc.jetstream().views.os(BUCKET, { storage: StorageType.File, replicas: 1 });
  const natsPid = natsServerPid();
  const natsCpu = () => (natsPid ? (readCpuSeconds(natsPid) ?? Number.NaN) : Number.NaN);

  const rows: Cell[][] = [['size', 'store', 'put wall ms', 'put server CPU ms', 'put client CPU ms', 'get wall ms', 'get server CPU ms', 'get client CPU ms']];
  try {
    for (const mib of sizes) {
      const data = payload(mib * MiB);
      for (const store of ['postgres', 'object store'] as const) {
        const puts: Sample[] = [];
        const gets: Sample[] = [];
        for (let r = 0; r < rounds + 1; r++) {
          const id = `file-${mib}-${store.length}-${r}`;
          const put =
            store !== 'object store'
              ? await measure(pgCpu, async () => {
                  await db.query('insert into files (id, tenant_id, bytes, content) values ($1, $2, $3, $4)', [id, 'ten_bench', data.byteLength, data]);
                })
              : await measure(natsCpu, async () => {
                  await os.putBlob({ name: id }, data);
                });
          let got = 0;
          const get =
            store === 'postgres'
              ? await measure(pgCpu, async () => {
                  const { rows: rs } = await db.query('select content from files where id = $1', [id]);
                  got = (rs[0].content as Buffer).byteLength;
                })
              : await measure(natsCpu, async () => {
                  const b = await os.getBlob(id);
                  got = b?.byteLength ?? 0;
                });
          if (got !== data.byteLength) throw new Error(`${store} returned ${got} bytes of ${data.byteLength}`);
          if (r === 0) continue; // the first round warms each store up
          puts.push(put);
          gets.push(get);
        }
        rows.push([
          `${mib} MiB`,
          store,
          round(med(puts.map((s) => s.wallMs))),
          round(med(puts.map((s) => s.serverCpuMs))),
          round(med(puts.map((s) => s.clientCpuMs))),
          round(med(gets.map((s) => s.wallMs))),
          round(med(gets.map((s) => s.serverCpuMs))),
          round(med(gets.map((s) => s.clientCpuMs))),
        ]);
      }
    }
  } finally {
    await os.destroy().catch(() => {});
    await nc.close();
    await db.end();
    await admin.query(`drop database if exists ${DB}`);
    await admin.end();
  }
  process.stdout.write(`${table(rows)}\n(medians of ${rounds} rounds after one warm-up round; nats-server pid ${natsPid ?? 'not found'})\n`);
}

main().catch((err) => {
  process.stderr.write(`error: ${(err as Error).stack ?? err}\n`);
  process.exit(2);
});
