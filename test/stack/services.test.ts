import { spawn } from 'node:child_process';
import { existsSync, mkdirSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { dirname, join } from 'node:path';
import { connect } from 'nats';
import pg from 'pg';
import { afterAll, describe, expect, test } from 'vitest';
import { embeddedPgDir, ensureNats, ensurePostgres, findNatsServer, freePort, natsReachable, probePostgres } from '../../src/stack/services.ts';
import { redactUrl } from '../../src/log.ts';

const dirs: string[] = [];
const tmp = (prefix: string) => {
  const d = mkdtempSync(join(tmpdir(), prefix));
  dirs.push(d);
  return d;
};
afterAll(() => {
  for (const d of dirs) rmSync(d, { recursive: true, force: true });
});

const alive = (pid: number) => {
  try {
    process.kill(pid, 0);
    return true;
  } catch {
    return false;
  }
};

describe('ensureNats', () => {
  test('uses a reachable NATS_URL as is', async () => {
    const h = await ensureNats({ url: process.env.NATS_URL, dataDir: tmp('catraca-nats-') });
    expect(h).toMatchObject({ url: process.env.NATS_URL, embedded: false });
    await h.stop();
    expect(await natsReachable(process.env.NATS_URL!)).toBe(true); // not ours: left running
  });

  test('spawns a nats-server with JetStream when the url is unreachable, and stops it', async () => {
    const dead = `nats://127.0.0.1:${await freePort()}`;
    const dataDir = tmp('catraca-nats-');
    const h = await ensureNats({ url: dead, dataDir });
    try {
      expect(h.embedded).toBe(true);
      expect(h.url).toMatch(/^nats:\/\/127\.0\.0\.1:\d+$/);
      expect(h.url).not.toBe(dead);
      const nc = await connect({ servers: h.url });
      const info = await (await nc.jetstreamManager()).getAccountInfo();
      expect(info.streams).toBe(0);
      await nc.close();
      expect(existsSync(join(dataDir, 'jetstream'))).toBe(true);
    } finally {
      await h.stop();
    }
    expect(await natsReachable(h.url)).toBe(false);
  });

  test('a leftover nats-server of a crashed run (pid file in the store) is stopped first', async () => {
    const dataDir = tmp('catraca-nats-');
    const port = await freePort();
    const pidFile = join(dataDir, 'nats-server.pid');
    const stale = spawn(findNatsServer(), ['-js', '-a', '127.0.0.1', '-p', String(port), '-sd', dataDir, '-P', pidFile], { stdio: 'ignore' });
    const deadline = Date.now() + 10000;
    while (!(await natsReachable(`nats://127.0.0.1:${port}`, { jetstream: true })) && Date.now() < deadline) await new Promise((r) => setTimeout(r, 100));
    expect(Number(readFileSync(pidFile, 'utf8'))).toBe(stale.pid);

    const h = await ensureNats({ dataDir, port });
    try {
      expect(h.url).toBe(`nats://127.0.0.1:${port}`);
      expect(alive(stale.pid!)).toBe(false);
      expect(await natsReachable(h.url, { jetstream: true })).toBe(true);
    } finally {
      await h.stop();
    }
  });
});

describe('ensurePostgres', () => {
  test('uses a reachable DATABASE_URL as is (even before its database exists)', async () => {
    const u = new URL(process.env.DATABASE_URL!);
    u.pathname = '/catraca_does_not_exist_yet';
    expect(await probePostgres(u.toString())).toBe('ok');
    const h = await ensurePostgres({ url: u.toString(), dataDir: tmp('catraca-pg-') });
    expect(h).toMatchObject({ url: u.toString(), embedded: false });
  });

  test('starts an embedded cluster when unreachable; survives a stale postmaster.pid; data persists', async () => {
    const requested = tmp('catraca-pg-');
    const dataDir = embeddedPgDir(requested);
    dirs.push(dirname(dataDir));
    const dead = `postgres://postgres@127.0.0.1:${await freePort()}/x`;
    const first = await ensurePostgres({ url: dead, dataDir: requested, database: 'postgres' });
    try {
      expect(first.embedded).toBe(true);
      expect(first.url).toMatch(/^postgres:\/\/postgres:postgres@127\.0\.0\.1:\d+\/postgres$/);
      const c = new pg.Client({ connectionString: first.url });
      await c.connect();
      await c.query('create table survives (v int)');
      await c.query('insert into survives values (42)');
      await c.end();
    } finally {
      await first.stop();
    }
    expect(await probePostgres(first.url)).toBe('unreachable');

    // A crash leaves postmaster.pid behind, naming a process that no longer exists.
    mkdirSync(dataDir, { recursive: true });
    writeFileSync(join(dataDir, 'postmaster.pid'), '999999\n' + dataDir + '\n0\n5432\n');
    const second = await ensurePostgres({ dataDir: requested, database: 'postgres' });
    try {
      const c = new pg.Client({ connectionString: second.url });
      await c.connect();
      expect((await c.query('select v from survives')).rows).toEqual([{ v: 42 }]);
      await c.end();
    } finally {
      await second.stop();
    }
  }, 120000);
});

test('redactUrl hides passwords', () => {
  expect(redactUrl('postgres://postgres:s3cret@127.0.0.1:5432/catraca')).toBe('postgres://postgres:***@127.0.0.1:5432/catraca');
  expect(redactUrl('postgres://postgres@127.0.0.1:5432/catraca')).toBe('postgres://postgres@127.0.0.1:5432/catraca');
});
