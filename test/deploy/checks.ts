import { execFile } from 'node:child_process';
import { readFileSync } from 'node:fs';
import https from 'node:https';
import net from 'node:net';
import { networkInterfaces } from 'node:os';
import { join } from 'node:path';
import { promisify } from 'node:util';
import OpenAI from 'openai';
import { PortalClient } from '../portal/client.ts';

// The deploy test's checks (scripts/deploy-test.sh runs this on the host once every container of
// the production compose file is healthy). Everything goes through the ports compose publishes
// on the host's loopback — the front door 8080, the portal 8081, the console 8082, and the mocks'
// own — or through `docker-compose run cli`, as an operator would; the roles are looked at from a
// container on the compose network (test/deploy/containers/probe.ts). Fails (exit 1) listing
// every check that did not hold; values are exact (micro-reais, token counts, statuses).

const run = promisify(execFile);
const COMPOSE = (process.env.DEPLOY_TEST_COMPOSE ?? '').split('\n').filter(Boolean);
const ENV_FILE = process.env.DEPLOY_TEST_ENV_FILE ?? '';
const PKI = process.env.DEPLOY_TEST_PKI ?? '';
const PIX = process.env.DEPLOY_TEST_PIX ?? '';
if (!COMPOSE.length || !ENV_FILE || !PKI || !PIX) throw new Error('run by scripts/deploy-test.sh (DEPLOY_TEST_* unset)');
const dotenv = Object.fromEntries(
  readFileSync(ENV_FILE, 'utf8')
    .split('\n')
    .filter((l) => /^[A-Z0-9_]+=/.test(l))
    .map((l) => [l.slice(0, l.indexOf('=')), l.slice(l.indexOf('=') + 1)]),
);

const failures: string[] = [];
const started = Date.now();
const say = (msg: string) => process.stderr.write(`[checks ${((Date.now() - started) / 1000).toFixed(1).padStart(5)}s] ${msg}\n`);
function expectEq(what: string, actual: unknown, expected: unknown) {
  const a = JSON.stringify(actual);
  const e = JSON.stringify(expected);
  if (a === e) say(`ok    ${what}: ${a}`);
  else {
    say(`FAIL  ${what}: ${a}, expected ${e}`);
    failures.push(`${what}: ${a}, expected ${e}`);
  }
}
const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));
async function until<T>(what: string, fn: () => Promise<T | undefined>, ms = 20000): Promise<T> {
  const deadline = Date.now() + ms;
  for (;;) {
    const v = await fn().catch(() => undefined);
    if (v !== undefined) return v;
    if (Date.now() > deadline) throw new Error(`${what}: not within ${ms} ms`);
    await sleep(250);
  }
}

const compose = async (args: string[], env: Record<string, string> = {}) =>
  (await run(COMPOSE[0]!, [...COMPOSE.slice(1), ...args], { env: { ...process.env, ...env }, maxBuffer: 16 << 20 })).stdout;
/** The admin CLI as the operator runs it: `docker-compose run --rm cli …` (its own NATS user and database role). */
const cli = async <T>(...args: string[]): Promise<T> => {
  const out = await compose(['run', '--rm', '-T', 'cli', ...args, '--json']);
  return JSON.parse(out.trim().split('\n').pop() ?? '') as T;
};
const publishedPort = async (service: string, port: number) => {
  const out = (await compose(['port', service, String(port)])).trim();
  return out;
};

/** "12.345678" (BRL, as the CLI prints) → micro-reais, exactly. */
function micros(brl: string): bigint {
  const m = /^(-?)(\d+)(?:\.(\d{1,6}))?$/.exec(brl);
  if (!m) throw new Error(`not an amount: ${brl}`);
  const v = BigInt(m[2]!) * 1_000_000n + BigInt((m[3] ?? '').padEnd(6, '0'));
  return m[1] ? -v : v;
}
type TenantRow = { id: string; name: string; balance: string; held: string };
const tenant = async (id: string) => (await cli<{ tenants: TenantRow[] }>('tenant', 'list')).tenants.find((t) => t.id === id);

// --- 1. the operator's CLI: a tenant, credits, a model at the vendor, a key ----------------------
const INPUT_PRICE = 1_500_000n; // micro-BRL per 1M tokens (R$ 1,50)
const OUTPUT_PRICE = 6_000_000n; // R$ 6,00
const t = await cli<{ id: string; name: string }>('tenant', 'create', '--name', 'Deploy Test Ltda');
expectEq('cli tenant create', t.name, 'Deploy Test Ltda');
const granted = await cli<{ balance: string }>('credits', 'grant', '--tenant', t.id, '--amount', '10.00', '--note', 'deploy test');
expectEq('cli credits grant: balance', micros(granted.balance).toString(), '10000000');
await cli(
  'model',
  'set',
  '--id',
  'mock/gpt-4o-mini',
  '--pool',
  'openai',
  '--protocol',
  'openai',
  '--upstream-model',
  'gpt-4o-mini',
  '--base-url',
  'http://vendor:9100/v1',
  '--api-key-env',
  'OPENAI_API_KEY',
  '--input-price',
  '1.5',
  '--output-price',
  '6',
  '--max-output-tokens',
  '4096',
  '--context-length',
  '128000',
);
const key = await cli<{ id: string; key: string }>('key', 'create', '--tenant', t.id, '--label', 'deploy-test');
expectEq('cli key create: key shape', /^sk-cat-v1-[0-9a-f]{64}$/.test(key.key), true);

// --- 2. a streamed request through the front door, billed exactly --------------------------------
const openai = new OpenAI({ baseURL: 'http://127.0.0.1:8080/v1', apiKey: key.key, maxRetries: 0 });
const usage = await until('a streamed chat completion', async () => {
  const stream = await openai.chat.completions.create({
    model: 'mock/gpt-4o-mini',
    messages: [{ role: 'user', content: 'Say hello to the deploy test.' }],
    max_tokens: 64,
    stream: true,
    stream_options: { include_usage: true },
  });
  let text = '';
  let u: OpenAI.CompletionUsage | undefined;
  let finish: string | null = null;
  for await (const chunk of stream) {
    text += chunk.choices[0]?.delta?.content ?? '';
    finish = chunk.choices[0]?.finish_reason ?? finish;
    if (chunk.usage) u = chunk.usage;
  }
  expectEq('stream: finish_reason', finish, 'stop');
  expectEq('stream: text is not empty', text.length > 0, true);
  return u;
});
expectEq('stream: completion tokens (the vendor mock sends 24)', usage.completion_tokens, 24);
const cost = (BigInt(usage.prompt_tokens) * INPUT_PRICE + BigInt(usage.completion_tokens) * OUTPUT_PRICE + 999_999n) / 1_000_000n;
const settled = await until('metering settles the request', async () => {
  const row = await tenant(t.id);
  return row && micros(row.held) === 0n && micros(row.balance) !== 10_000_000n ? row : undefined;
});
expectEq('billed exactly: balance after one streamed request (micro-reais)', micros(settled.balance).toString(), (10_000_000n - cost).toString());
expectEq('billed exactly: nothing held (micro-reais)', micros(settled.held).toString(), '0');
const credits = (await (await fetch('http://127.0.0.1:8080/v1/credits', { headers: { authorization: `Bearer ${key.key}` } })).json()) as {
  data: { total_credits: number; total_usage: number };
};
expectEq('/v1/credits total_usage (BRL)', credits.data.total_usage, Number(cost) / 1e6);

// --- 3. the portal: sign-up page, a new account by e-mail, a Pix top-up through the PSP over mTLS --
const portal = new PortalClient('http://127.0.0.1:8081');
const signupPage = await portal.get('/signup');
expectEq('portal GET /signup status', signupPage.status, 200);
expectEq('portal /signup has the form', /<form[^>]*action="\/signup"/.test(signupPage.text) && /name="email"/.test(signupPage.text), true);
const mailPort = await publishedPort('mail', 8025);
const email = `deploy-${Date.now()}@example.com`;
const mailbox = {
  async text(to: string, pattern: RegExp) {
    return until(`an e-mail to ${to}`, async () => {
      const messages = (await (await fetch(`http://${mailPort}/messages`)).json()) as { to: string[]; text: string }[];
      return messages.reverse().find((m) => m.to.includes(to) && pattern.test(m.text))?.text;
    });
  },
};
const signupClient = new PortalClient('http://127.0.0.1:8081', {}, { mailbox });
const signed = await signupClient.post('/signup', {
  _csrf: await signupClient.csrfOf('/signup'),
  email,
  password: 'correct horse battery staple',
  org: 'Pix Deploy Ltda',
});
expectEq('portal POST /signup status', signed.status, 200);
const link = await signupClient.verificationLink(email);
expectEq('portal verification link', (await signupClient.get(link)).status, 200);
const signin = await signupClient.signIn(email, 'correct horse battery staple');
expectEq('portal sign-in', [signin.status, signin.location], [303, '/dashboard']);
const topup = await signupClient.post('/topup', { _csrf: await signupClient.csrfOf('/topup'), amount: '50,00' });
expectEq('portal POST /topup', topup.status, 303);
const txid = /^\/topup\/([a-zA-Z0-9]+)$/.exec(topup.location ?? '')?.[1] ?? '';
expectEq('portal charge txid', /^[a-f0-9]{32}$/.test(txid), true);

const [pspHost, pspPort] = (await publishedPort('psp', 8443)).split(':');
const pspCall = (path: string, withCert: boolean) =>
  new Promise<{ status: number; body: string }>((resolve, reject) => {
    const req = https.request(
      {
        host: pspHost,
        port: Number(pspPort),
        servername: 'psp',
        path,
        method: 'POST',
        ca: readFileSync(join(PIX, 'ca.pem')),
        ...(withCert ? { cert: readFileSync(join(PIX, 'cert.pem')), key: readFileSync(join(PIX, 'key.pem')) } : {}),
        headers: {
          authorization: `Basic ${Buffer.from(`${dotenv.PIX_CLIENT_ID}:${dotenv.PIX_CLIENT_SECRET}`).toString('base64')}`,
          'content-type': 'application/json',
        },
        timeout: 10000,
      },
      (res) => {
        let body = '';
        res.on('data', (c: Buffer) => (body += c.toString()));
        res.on('end', () => resolve({ status: res.statusCode ?? 0, body }));
      },
    );
    req.on('error', reject);
    req.end('{}');
  });
const noCert = await pspCall(`/sim/cob/${txid}/pagar`, false).then(
  (r) => `answered ${r.status}`,
  (e: NodeJS.ErrnoException) => `refused (${e.code ?? e.message})`,
);
expectEq('PSP mock without a client certificate', noCert.startsWith('refused'), true);
const paid = await pspCall(`/sim/cob/${txid}/pagar`, true);
const paidBody = JSON.parse(paid.body) as { delivered?: boolean; valor?: string };
expectEq('PSP mock pays the charge over mTLS, delivers the webhook', [paid.status, paidBody.valor, paidBody.delivered], [200, '50.00', true]);
const status = await until('the charge is paid', async () => {
  const s = await signupClient.get(`/topup/${txid}/status`);
  const j = JSON.parse(s.text) as { status: string; balance?: unknown };
  return j.status === 'CONCLUIDA' ? j : undefined;
});
expectEq('portal charge status', status.status, 'CONCLUIDA');
const pixTenant = await until('the Pix tenant', async () =>
  (await cli<{ tenants: TenantRow[] }>('tenant', 'list')).tenants.find((x) => x.name === 'Pix Deploy Ltda'),
);
expectEq('Pix top-up credited exactly once (micro-reais)', micros(pixTenant.balance).toString(), '50000000');
expectEq('cli ledger check', (await cli<{ ok: boolean }>('ledger', 'check')).ok, true);

// --- 4. the console: on the host's loopback only --------------------------------------------------
const consoleHealth = await fetch('http://127.0.0.1:8082/healthz');
expectEq('console on 127.0.0.1:8082', consoleHealth.status, 200);
const consoleLogin = await fetch('http://127.0.0.1:8082/login');
expectEq('console sign-in page', consoleLogin.status, 200);
expectEq('console published on loopback only', (await publishedPort('console', 8082)).trim(), '127.0.0.1:8082');
const otherAddresses = Object.values(networkInterfaces())
  .flat()
  .filter((a) => a && a.family === 'IPv4' && !a.internal)
  .map((a) => a!.address);
const tryConnect = (host: string, port: number) =>
  new Promise<string>((resolve) => {
    const s = net.connect({ host, port, timeout: 2000 });
    s.on('connect', () => (s.destroy(), resolve('connected')));
    s.on('timeout', () => (s.destroy(), resolve('timeout')));
    s.on('error', (e: NodeJS.ErrnoException) => resolve(e.code ?? 'error'));
  });
for (const addr of otherAddresses)
  for (const port of [8080, 8081, 8082]) expectEq(`nothing on ${addr}:${port} (published on loopback only)`, await tryConnect(addr, port), 'ECONNREFUSED');

// --- 5. the NATS users and database roles, from inside the compose network ------------------------
const probeEnv: Record<string, string> = { TENANT_ID: t.id, KEY_ID: key.id, TXID: txid };
for (const [k, v] of Object.entries(dotenv)) if (/^(NATS|DB)_[A-Z]+_PASSWORD$/.test(k)) probeEnv[k] = v;
const probeOut = await compose(
  [
    'run',
    '--rm',
    '-T',
    '--no-deps',
    '-v',
    `${dotenv.DEPLOY_TEST_BUNDLES}:/opt/deploy-test:ro`,
    ...Object.keys(probeEnv).flatMap((k) => ['-e', k]),
    '--entrypoint',
    'node',
    'cli',
    '/opt/deploy-test/probe.mjs',
  ],
  probeEnv,
);
const probe = JSON.parse(probeOut.trim().split('\n').pop()!) as Record<string, string>;
for (const [what, outcome] of Object.entries(probe)) {
  let want: string;
  if (/^nats (anonymous|wrong password|route user|worker with)/.test(what)) want = 'AUTHORIZATION_VIOLATION';
  else if (/^nats \w+ connects$/.test(what)) want = 'connected';
  else if (what === 'nats USAGE replicas') want = '3 configured, 3 current';
  else if (/^nats \w+ may not /.test(what)) want = 'denied';
  else if (/^nats \w+ may /.test(what)) want = 'allowed';
  else if (/^db \w+ may not /.test(what)) want = 'refused';
  else if (/^db \w+ may /.test(what)) want = 'allowed';
  else if (what === "db worker with the gateway's password") want = 'refused 28P01';
  else if (what === 'console reachable from the app network') want = outcome.startsWith('unreachable') ? outcome : 'unreachable';
  else want = '?';
  expectEq(what, outcome, want);
}

if (failures.length) {
  process.stderr.write(`\n${failures.length} check(s) failed:\n${failures.map((f) => `  - ${f}`).join('\n')}\n`);
  process.exit(1);
}
say(`all checks passed (${Object.keys(probe).length} role cases)`);
