// Production defaults: the Pix simulator, its pay button and sim/* only when asked for; the portal
// refuses to start without a complete BCB API Pix configuration, and refuses the simulator or dev
// mode on anything but a loopback address.
import { execFile } from 'node:child_process';
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { networkInterfaces, tmpdir } from 'node:os';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { afterAll, describe, expect, it } from 'vitest';
import { createPool } from '../../src/db/pool.ts';
import { defaultPortalHost, loadPortalEnv, resolvePortalSetup } from '../../src/portal/config.ts';
import { isLoopbackHost, trustedProxies } from '../../src/web/proxy.ts';
import { startPortal } from '../../src/portal/server.ts';
import { tcpReachable } from '../../src/stack/services.ts';
import { startMailSink } from '../../src/mail/sink.ts';
import { ownDatabase } from '../helpers/own-database.ts';
import { DOCKER_COMPOSE, describeWith, pathOf } from '../helpers/tools.ts';
import { PortalClient, sinkMailbox } from './client.ts';

const ROOT = join(dirname(fileURLToPath(import.meta.url)), '..', '..');
const dir = mkdtempSync(join(tmpdir(), 'catraca-pix-certs-'));
const cert = join(dir, 'cert.pem');
const key = join(dir, 'key.pem');
writeFileSync(cert, '-----BEGIN CERTIFICATE-----\nnot checked until a TLS handshake\n-----END CERTIFICATE-----\n');
writeFileSync(key, '-----BEGIN PRIVATE KEY-----\nnot checked until a TLS handshake\n-----END PRIVATE KEY-----\n');
const BCB = {
  PIX_PROVIDER: 'bcb',
  PIX_API_URL: 'https://127.0.0.1:9/v2',
  PIX_OAUTH_URL: 'https://127.0.0.1:9/oauth/token',
  PIX_CLIENT_ID: 'client-id',
  PIX_CLIENT_SECRET: 'client-secret',
  PIX_KEY: 'pix@catraca.example',
  PIX_CERT_FILE: cert,
  PIX_CERT_KEY_FILE: key,
};
const db = createPool(process.env.DATABASE_URL!, 2);
afterAll(async () => {
  await db.end();
  rmSync(dir, { recursive: true, force: true });
});

const resolve = (env: Record<string, string>, host: string, o: { adapterGiven?: boolean; devMode?: boolean } = {}) =>
  resolvePortalSetup(loadPortalEnv(env), { host, ...o });

describe('resolvePortalSetup: nothing defaults to the simulator', () => {
  it('no PIX_PROVIDER and no CATRACA_DEV: refused, naming what to set', () => {
    expect(() => resolve({}, '0.0.0.0')).toThrow(
      'PIX_PROVIDER is not set. In production set PIX_PROVIDER=bcb with PIX_API_URL, PIX_OAUTH_URL, PIX_CLIENT_ID, PIX_CLIENT_SECRET, PIX_KEY, PIX_CERT_FILE and PIX_CERT_KEY_FILE (see .env.example). For local development run `npm start`, or set CATRACA_DEV=1 (the built-in Pix simulator, on 127.0.0.1 only).',
    );
    expect(() => resolve({}, '127.0.0.1')).toThrow('PIX_PROVIDER is not set.');
  });

  it('the simulator and dev mode: loopback only', () => {
    expect(resolve({ CATRACA_DEV: '1' }, '127.0.0.1')).toEqual({ provider: 'simulator', devMode: true });
    expect(resolve({ PIX_PROVIDER: 'simulator' }, '::1')).toEqual({ provider: 'simulator', devMode: true });
    expect(resolve({ PIX_PROVIDER: 'simulator', PORTAL_DEV_MODE: '0' }, 'localhost')).toEqual({ provider: 'simulator', devMode: false });
    for (const host of ['0.0.0.0', '::', '192.168.0.10', 'portal.example.com']) {
      expect(() => resolve({ CATRACA_DEV: '1' }, host)).toThrow(
        `the portal would listen on ${host} with the Pix simulator: anyone who can reach it could credit themselves up to R$ 5.000,00 per click`,
      );
      expect(() => resolve({ PIX_PROVIDER: 'simulator', PORTAL_DEV_MODE: '0' }, host)).toThrow('set PORTAL_HOST=127.0.0.1, or PIX_PROVIDER=bcb');
    }
    expect(() => resolve({ CATRACA_DEV: '1', PIX_SIM_HOST: '0.0.0.0' }, '127.0.0.1')).toThrow(
      'PIX_SIM_HOST=0.0.0.0: the Pix simulator listens on a loopback address only',
    );
    // An injected adapter (tests) with dev mode is held to the same rule.
    expect(() => resolve({}, '0.0.0.0', { adapterGiven: true, devMode: true })).toThrow('the portal would listen on 0.0.0.0 with dev mode');
    expect(resolve({}, '0.0.0.0', { adapterGiven: true })).toEqual({ provider: 'custom', devMode: false });
  });

  it('bcb needs a complete configuration (https URLs, credentials, chave, readable certificate files)', () => {
    expect(() => resolve({ PIX_PROVIDER: 'bcb', PIX_API_URL: 'http://psp.example/v2', PIX_CERT_FILE: join(dir, 'missing.pem') }, '0.0.0.0')).toThrow(
      'PIX_PROVIDER=bcb needs a complete BCB API Pix configuration: PIX_API_URL must be an https:// URL (the BCB API Pix runs over TLS); PIX_OAUTH_URL is not set; PIX_CLIENT_ID is not set; PIX_CLIENT_SECRET is not set; PIX_KEY (our Pix key, the chave that receives the charges) is not set; ' +
        `PIX_CERT_FILE=${join(dir, 'missing.pem')} cannot be read; PIX_CERT_KEY_FILE is not set (see .env.example)`,
    );
    const ok = resolve(BCB, '0.0.0.0');
    expect(ok).toEqual({
      provider: 'bcb',
      devMode: false,
      bcb: {
        apiUrl: 'https://127.0.0.1:9/v2',
        oauthUrl: 'https://127.0.0.1:9/oauth/token',
        clientId: 'client-id',
        clientSecret: 'client-secret',
        chave: 'pix@catraca.example',
        certFile: cert,
        keyFile: key,
        caFile: undefined,
      },
    });
    expect(() => resolve({ ...BCB, PORTAL_DEV_MODE: '1' }, '127.0.0.1')).toThrow('PORTAL_DEV_MODE=1 needs PIX_PROVIDER=simulator');
    // CATRACA_DEV only changes defaults: an explicit bcb wins.
    expect(resolve({ ...BCB, CATRACA_DEV: '1' }, '0.0.0.0').provider).toBe('bcb');
  });

  it('an empty variable is an unset one (compose passes ${VAR:-} as "")', () => {
    const env = loadPortalEnv({ ...BCB, PIX_WEBHOOK_SECRET: '', PIX_CA_FILE: '', PORTAL_TRUST_PROXY: '', PIX_WEBHOOK_BASE_URL: '' });
    expect([env.PIX_WEBHOOK_SECRET, env.PIX_CA_FILE, env.PIX_WEBHOOK_BASE_URL, env.PORTAL_TRUST_PROXY]).toEqual([undefined, undefined, undefined, false]);
    expect(() => resolve({ PIX_PROVIDER: '' }, '0.0.0.0')).toThrow('PIX_PROVIDER is not set.');
  });

  it('PORTAL_TRUSTED_PROXIES: addresses, CIDRs and proxy-addr presets; anything else refused naming it; PORTAL_TRUST_PROXY=1 means loopback', () => {
    expect(trustedProxies(loadPortalEnv({ PORTAL_TRUSTED_PROXIES: '10.0.0.0/8, 192.0.2.7,fd00::/8' }))).toEqual(['10.0.0.0/8', '192.0.2.7', 'fd00::/8']);
    expect(trustedProxies(loadPortalEnv({ PORTAL_TRUSTED_PROXIES: 'uniquelocal' }))).toEqual(['uniquelocal']);
    expect(trustedProxies(loadPortalEnv({}))).toEqual([]);
    expect(trustedProxies(loadPortalEnv({ PORTAL_TRUST_PROXY: '1' }))).toEqual(['127.0.0.0/8', '::1/128']);
    for (const bad of ['10.0.0.0/33', 'proxy.example.com', '10.0.0.1/8/2'])
      expect(() => loadPortalEnv({ PORTAL_TRUSTED_PROXIES: bad })).toThrow('PORTAL_TRUSTED_PROXIES: a comma list of IP addresses, CIDRs or named ranges');
  });

  it('PORTAL_HOST unset: 127.0.0.1 in development, 0.0.0.0 otherwise', () => {
    expect(defaultPortalHost(loadPortalEnv({}))).toBe('0.0.0.0');
    expect(defaultPortalHost(loadPortalEnv({ PIX_PROVIDER: 'bcb' }))).toBe('0.0.0.0');
    expect(defaultPortalHost(loadPortalEnv({ CATRACA_DEV: '1' }))).toBe('127.0.0.1');
    expect(defaultPortalHost(loadPortalEnv({ PIX_PROVIDER: 'simulator' }))).toBe('127.0.0.1');
    expect(['127.0.0.1', '127.1.2.3', '::1', '[::1]', 'localhost', '::ffff:127.0.0.1'].every(isLoopbackHost)).toBe(true);
    expect(['0.0.0.0', '::', '10.0.0.1', '128.0.0.1', 'localhost.evil.com'].some(isLoopbackHost)).toBe(false);
  });
});

function runPortal(env: Record<string, string>): Promise<{ code: number | null; stderr: string }> {
  const base: Record<string, string> = {
    PATH: process.env.PATH!,
    DATABASE_URL: process.env.DATABASE_URL!,
    NATS_URL: process.env.NATS_URL!,
    PORTAL_PORT: '0',
    LOG_LEVEL: 'info',
  };
  return new Promise((res) => {
    execFile(
      process.execPath,
      ['--import', 'tsx', join(ROOT, 'src/portal/main.ts')],
      { cwd: ROOT, env: { ...base, ...env }, timeout: 20000 },
      (err, _stdout, stderr) => {
        res({ code: err ? ((err as { code?: number }).code ?? null) : 0, stderr });
      },
    );
  });
}

describe('the portal process refuses to start', () => {
  it('with no Pix configuration at all (the old default was the simulator on 0.0.0.0)', async () => {
    const r = await runPortal({});
    expect(r.code).toBe(1);
    expect(r.stderr).toContain('catraca portal: PIX_PROVIDER is not set. In production set PIX_PROVIDER=bcb with PIX_API_URL');
  });

  it('with dev mode on 0.0.0.0, and with an incomplete bcb configuration', async () => {
    const dev = await runPortal({ CATRACA_DEV: '1', PORTAL_HOST: '0.0.0.0' });
    expect(dev.code).toBe(1);
    expect(dev.stderr).toContain('catraca portal: the portal would listen on 0.0.0.0 with the Pix simulator');
    const bcb = await runPortal({ PIX_PROVIDER: 'bcb', PIX_API_URL: 'https://psp.example/v2' });
    expect(bcb.code).toBe(1);
    expect(bcb.stderr).toContain('catraca portal: PIX_PROVIDER=bcb needs a complete BCB API Pix configuration: PIX_OAUTH_URL is not set;');
  });
});

describe('a bcb portal on all interfaces', () => {
  it('starts, and has no simulator and no pay button', async () => {
    // (its own database: connecting the bcb PSP removes the simulator's credentials, which the
    // portals of other test files read from the shared one)
    const own = await ownDatabase('bcb', { migrate: true });
    const ownDb = createPool(own.url, 2);
    const sink = await startMailSink();
    const portal = await startPortal({
      db: ownDb,
      nc: null,
      host: '0.0.0.0',
      registerWebhook: false,
      reconcileIntervalMs: 0,
      signupLimitPerHour: 1000,
      env: { ...BCB, SMTP_URL: sink.url },
    });
    try {
      expect(portal.simulator).toBe(null);
      expect(portal.pix.psp.name).toBe('bcb');
      const ext = Object.values(networkInterfaces())
        .flat()
        .find((i) => i && i.family === 'IPv4' && !i.internal);
      if (ext) expect(await tcpReachable(ext.address, Number(new URL(portal.url).port), 1000)).toBe(true);
      const c = new PortalClient(portal.url, {}, { mailbox: sinkMailbox(sink) });
      expect((await c.signUp(`bcb.${Math.random().toString(36).slice(2, 10)}@example.com`)).status).toBe(303);
      const dash = await c.get('/dashboard');
      const pay = await c.post(`/topup/${'a'.repeat(32)}/simulate`, { _csrf: PortalClient.csrf(dash.text) });
      expect(pay.status).toBe(404);
      // and no /dev/mail
      expect((await c.get('/dev/mail')).status).toBe(404);
    } finally {
      await portal.close();
      await sink.close();
      await ownDb.end();
      await own.drop();
    }
  });
});

// docker-compose.yml: Debian's docker-compose 1.29 must accept it (`config`) with the required
// variables, and refuse it without any one of them (docker-compose missing: skipped, failed under CI).
const REQUIRED = {
  POSTGRES_PASSWORD: '0123456789abcdef',
  PORTAL_PUBLIC_URL: 'https://portal.example.com.br',
  GATEWAY_PUBLIC_URL: 'https://api.example.com.br/v1',
  PIX_API_URL: 'https://pix.psp.example/v2',
  PIX_OAUTH_URL: 'https://pix.psp.example/oauth/token',
  PIX_CLIENT_ID: 'id',
  PIX_CLIENT_SECRET: 'secret',
  PIX_KEY: 'pix@example.com.br',
  PIX_CERT_DIR: dir,
  // NATS: one password per role and one between the nodes (deploy/nats/; checked in test/nats-auth.test.ts)
  NATS_ROUTE_PASSWORD: 'nroute0123',
  NATS_GATEWAY_PASSWORD: 'ngateway0123',
  NATS_WORKER_PASSWORD: 'nworker0123',
  NATS_METERING_PASSWORD: 'nmetering0123',
  NATS_PORTAL_PASSWORD: 'nportal0123',
  NATS_CLI_PASSWORD: 'ncli0123',
  NATS_CONSOLE_PASSWORD: 'nconsole0123',
  // PostgreSQL: one role per process (src/db/roles.ts; checked in test/nats-auth.test.ts)
  DB_GATEWAY_PASSWORD: 'dbgateway0123',
  DB_WORKER_PASSWORD: 'dbworker0123',
  DB_METERING_PASSWORD: 'dbmetering0123',
  DB_PORTAL_PASSWORD: 'dbportal0123',
  DB_ADMIN_PASSWORD: 'dbadmin0123',
  DB_CONSOLE_PASSWORD: 'dbconsole0123',
};
function composeConfig(env: Record<string, string>): Promise<{ code: number; stdout: string; stderr: string }> {
  // Run from an empty directory so that no .env file is read.
  const cwd = mkdtempSync(join(tmpdir(), 'catraca-compose-'));
  return new Promise((res) => {
    execFile(
      pathOf(DOCKER_COMPOSE),
      ['-f', join(ROOT, 'docker-compose.yml'), '--project-directory', cwd, 'config'],
      { cwd, env: { PATH: process.env.PATH!, ...env }, timeout: 30000 },
      (err, stdout, stderr) => {
        rmSync(cwd, { recursive: true, force: true });
        res({ code: err ? Number((err as { code?: number }).code ?? 1) : 0, stdout, stderr });
      },
    );
  });
}

describeWith(DOCKER_COMPOSE, 'docker-compose.yml (docker-compose 1.29 config)', () => {
  it('is accepted with the required variables: bcb portal, no secret literals, vendor keys, grace periods', async () => {
    const r = await composeConfig(REQUIRED);
    expect(r.stderr).toBe('');
    expect(r.code).toBe(0);
    expect(r.stdout).toContain('DATABASE_URL: postgres://catraca:0123456789abcdef@postgres:5432/catraca');
    expect(r.stdout).toContain('PIX_PROVIDER: bcb');
    expect(r.stdout).not.toMatch(/PIX_PROVIDER: simulator|CATRACA_DEV|--with-sim|CATRACA_SEED_SIM/);
    for (const k of ['OPENAI_API_KEY', 'ANTHROPIC_API_KEY', 'OPENROUTER_API_KEY']) expect(r.stdout).toContain(`${k}: ''`);
    // Above DRAIN_TIMEOUT_MS (30 s): migrate, gateway, metering, portal and console 45 s; the worker 75 s.
    expect(r.stdout.match(/stop_grace_period: 45s/g)).toHaveLength(5);
    expect(r.stdout.match(/stop_grace_period: 75s/g)).toHaveLength(1);
    const file = readFileSync(join(ROOT, 'docker-compose.yml'), 'utf8');
    expect(file).not.toMatch(/catraca:catraca@|POSTGRES_PASSWORD: catraca|^name:/m);
    // Every app service runs compiled JavaScript from the image's runtime stage, never tsx.
    expect(r.stdout).not.toContain('tsx');
    expect(r.stdout.match(/target: runtime/g)).toHaveLength(6);
    for (const entry of [
      'dist/src/stack/migrate-main.js',
      'dist/src/gateway/main.js',
      'dist/workers/main.js',
      'dist/src/metering/main.js',
      'dist/src/portal/main.js',
      'dist/src/console/main.js',
    ]) {
      expect(r.stdout).toMatch(new RegExp(`command:\\n\\s+- node\\n\\s+- ${entry.replace(/\./g, '\\.')}\\n`));
    }
  });

  it('publishes the front door, the portal and the console on loopback only (the TLS proxy on the host reaches the first two there)', async () => {
    const r = await composeConfig(REQUIRED);
    expect(r.code).toBe(0);
    const ports = [...r.stdout.matchAll(/^ {4}ports:\n((?: {4}- .*\n(?: {6}.*\n)*)+)/gm)].map((m) => m[1]);
    expect(ports).toEqual(['    - 127.0.0.1:8082:8082/tcp\n', '    - 127.0.0.1:8080:8080/tcp\n', '    - 127.0.0.1:8081:8081/tcp\n']);
    // and nothing else is published: NATS, PostgreSQL and /metrics stay on the compose network
    expect(r.stdout.match(/^ {4}ports:/gm)).toHaveLength(3);
    // behind the proxy each door believes its X-Forwarded-For, else every client is the proxy
    expect(r.stdout).toMatch(/^ {6}PORTAL_TRUSTED_PROXIES: uniquelocal$/m);
    expect(r.stdout).toMatch(/^ {6}GATEWAY_TRUSTED_PROXIES: uniquelocal$/m);
  });

  it('puts the console on a network of its own, shared with PostgreSQL and NATS only: no other container reaches its sign-in page', async () => {
    const r = await composeConfig(REQUIRED);
    expect(r.code).toBe(0);
    const services = r.stdout.slice(r.stdout.indexOf('\nservices:\n'));
    const networksOf: Record<string, string[]> = {};
    for (const m of services.matchAll(/^ {2}([a-z0-9-]+):\n((?: {4}.*\n|- .*\n| {6}.*\n)*)/gm)) {
      const block = /^ {4}networks:\n((?: {6}.*\n)+)/m.exec(m[2]);
      // a service naming no network is on `default`
      networksOf[m[1]] = block ? [...block[1].matchAll(/^ {6}([a-z0-9-]+):/gm)].map((n) => n[1]).sort() : ['default'];
    }
    expect(networksOf).toMatchObject({
      console: ['console'],
      postgres: ['console', 'default'],
      'nats-1': ['console', 'default'],
      'nats-2': ['console', 'default'],
      'nats-3': ['console', 'default'],
      gateway: ['default'],
      worker: ['default'],
      metering: ['default'],
      portal: ['default'],
      migrate: ['default'],
      cli: ['default'],
    });
    expect(r.stdout).toMatch(/^networks:\n(?: {2}.*\n)*? {2}console: \{\}\n/m);
  });

  it('is refused without any one required variable, naming it', async () => {
    for (const name of Object.keys(REQUIRED)) {
      const env: Record<string, string> = { ...REQUIRED };
      delete env[name];
      const r = await composeConfig(env);
      expect(r.code, name).toBe(1);
      expect(r.stderr, name).toContain(`set ${name} in .env`);
    }
  }, 120000);
});
