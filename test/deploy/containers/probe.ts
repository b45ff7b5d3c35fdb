import { connect, type NatsConnection, type NatsError, StringCodec } from 'nats';
import pg from 'pg';

// The deploy test's look at the roles from inside (bundled by scripts/deploy-test.sh, run from
// the project image on the compose network, where NATS and PostgreSQL are; neither is published):
// every NATS user and PostgreSQL role of the deployment, with the passwords of the operator's .env,
// is refused what docs/operations.md ("NATS security", "Least privilege") says it may not do and
// allowed a harmless part of what it does. Prints one JSON object: {case: outcome}; the test on
// the host compares it with what it expects. Statements run in transactions that are rolled back.
// Input (environment): the .env passwords, and TENANT_ID, KEY_ID, TXID of the test's rows.

const env = (name: string) => {
  const v = process.env[name];
  if (!v) throw new Error(`${name} is not set`);
  return v;
};
const out: Record<string, string> = {};
const sc = StringCodec();
const NATS_SERVERS = ['nats-1:4222', 'nats-2:4222', 'nats-3:4222'];

const within = <T>(p: Promise<T>, ms: number, fallback: T) => Promise.race([p, new Promise<T>((r) => setTimeout(() => r(fallback), ms))]);

async function natsAs(user?: string, pass?: string): Promise<NatsConnection | string> {
  try {
    // each role reads its replies under its own inbox prefix only (deploy/nats/auth.conf)
    return await connect({ servers: NATS_SERVERS, user, pass, reconnect: false, timeout: 5000, inboxPrefix: user ? `_INBOX.${user}` : undefined });
  } catch (err) {
    return (err as NatsError).code ?? String(err);
  }
}

/** `denied` when the server reports a permissions violation for this publish within 2 s, else `allowed`. */
async function publish(nc: NatsConnection, subject: string): Promise<string> {
  const seen = (async () => {
    for await (const s of nc.status()) {
      const ctx = (s as { permissionContext?: { operation: string; subject: string } }).permissionContext;
      if (s.type === 'error' && ctx?.operation === 'publish' && ctx.subject === subject) return 'denied';
    }
    return 'closed';
  })();
  nc.publish(subject, sc.encode('{"probe":true}'));
  await nc.flush();
  return within(seen, 2000, 'allowed');
}

/** `denied` when the subscription is closed with a permissions violation within 2 s, else `allowed`. */
async function subscribe(nc: NatsConnection, subject: string): Promise<string> {
  const denied = new Promise<string>((resolve) => nc.subscribe(subject, { callback: (err) => err && resolve('denied') }));
  await nc.flush();
  return within(denied, 2000, 'allowed');
}

async function request(nc: NatsConnection, subject: string): Promise<string> {
  try {
    const m = await nc.request(subject, sc.encode(''), { timeout: 3000 });
    return `answered ${sc.decode(m.data)}`;
  } catch (err) {
    return `failed ${(err as NatsError).code}`;
  }
}

// --- NATS -------------------------------------------------------------------------------------
const pw = (role: string) => env(`NATS_${role.toUpperCase()}_PASSWORD`);
out['nats anonymous'] = String(await natsAs());
out['nats wrong password'] = String(await natsAs('worker', 'nwrongpassword'));
out['nats route user as a client'] = String(await natsAs('route', env('NATS_ROUTE_PASSWORD')));
out["nats worker with the gateway's password"] = String(await natsAs('worker', pw('gateway')));

/** [operation, subject, allowed?]: without the third element, refused. */
type Op = ['pub' | 'sub', string, 'allowed'?];
const NATS_CASES: Record<string, Op[]> = {
  gateway: [
    ['pub', 'catraca.usage.openai'],
    ['pub', 'catraca.stream.forged.1'],
    ['sub', 'catraca.jobs.openai'],
    ['pub', 'catraca.tenants.changed'],
    ['sub', '_INBOX.worker.>'],
    ['sub', 'catraca.stream.>', 'allowed'],
  ],
  worker: [
    ['pub', 'catraca.jobs.openai'],
    ['sub', 'catraca.jobs.groq'],
    ['pub', 'catraca.usage.groq'],
    ['pub', 'catraca.capacity.groq'],
    ['pub', '$JS.API.STREAM.UPDATE.USAGE'],
    ['pub', '$JS.API.STREAM.DELETE.USAGE'],
    ['pub', '$JS.API.CONSUMER.MSG.NEXT.USAGE.metering'],
    ['sub', '_INBOX.gateway.>'],
    ['pub', 'catraca.tenants.changed'],
    ['sub', 'catraca.jobs.openai', 'allowed'],
  ],
  metering: [
    ['pub', '$JS.API.STREAM.DELETE.USAGE'],
    ['pub', '$JS.API.STREAM.PURGE.USAGE'],
    ['pub', '$JS.API.CONSUMER.DELETE.USAGE.metering'],
    ['pub', 'catraca.usage.openai'],
    ['pub', 'catraca.stream.forged.1'],
    ['sub', 'catraca.jobs.openai'],
  ],
  portal: [
    ['sub', 'catraca.jobs.openai'],
    ['sub', 'catraca.stream.>'],
    ['pub', 'catraca.tenants.changed'],
    ['pub', 'catraca.usage.openai'],
    ['pub', '$JS.API.STREAM.DELETE.NOTIFY'],
  ],
  cli: [
    ['pub', 'catraca.jobs.openai'],
    ['sub', 'catraca.stream.>'],
    ['pub', '$JS.API.STREAM.PURGE.USAGE'],
    ['pub', '$JS.API.STREAM.DELETE.USAGE_LOG'],
    ['pub', 'catraca.stream.forged.1'],
  ],
  console: [
    ['pub', 'catraca.jobs.openai'],
    ['pub', 'catraca.usage.openai'],
    ['sub', 'catraca.stream.>'],
    ['sub', '_INBOX.cli.>'],
  ],
};
for (const [role, ops] of Object.entries(NATS_CASES)) {
  const nc = await natsAs(role, pw(role));
  if (typeof nc === 'string') {
    out[`nats ${role} connects`] = nc;
    continue;
  }
  out[`nats ${role} connects`] = 'connected';
  for (const [op, subject, allowed] of ops)
    out[`nats ${role} ${allowed ? 'may' : 'may not'} ${op} ${subject}`] = op === 'pub' ? await publish(nc, subject) : await subscribe(nc, subject);
  await nc.close();
}
// what the CLI's `status` reads: the USAGE stream, with its three replicas on the three nodes
{
  const cli = (await natsAs('cli', pw('cli'))) as NatsConnection;
  const info = await request(cli, '$JS.API.STREAM.INFO.USAGE');
  const j = info.startsWith('answered ')
    ? (JSON.parse(info.slice(9)) as { config?: { num_replicas?: number }; cluster?: { replicas?: { current: boolean }[] } })
    : null;
  out['nats USAGE replicas'] = j ? `${j.config?.num_replicas} configured, ${1 + (j.cluster?.replicas?.filter((r) => r.current).length ?? 0)} current` : info;
  await cli.close();
}

// --- PostgreSQL -------------------------------------------------------------------------------
const T = env('TENANT_ID');
const K = env('KEY_ID');
const TXID = env('TXID');
type Stmt = [string, unknown[]?];
const credit: Stmt = [`select * from catraca_credit($1, 1000000, 'grant', null, null)`, [T]];
const settle: Stmt = [`select * from catraca_settle('x', $1, $2, 1, 'm', 1, 1, false, 'completed', now(), null, null)`, [T, K]];
const admit: Stmt = [`select * from catraca_admit('x', $1, $2, 1, 1, 1000)`, [T, K]];
const ledgerInsert: Stmt = [`insert into ledger (tenant_id, kind, amount_micros, balance_after_micros, source) values ($1, 'credit', 1, 1, 'grant')`, [T]];
const updateBalance: Stmt = ['update tenants set balance_micros = balance_micros + 1 where id = $1', [T]];
const program: Stmt = [`copy (select 1) to program 'id'`];
const DB_CASES: Record<string, { allowed: Record<string, Stmt>; refused: Record<string, Stmt> }> = {
  gateway: {
    allowed: { 'read the catalog': ['select count(*) from models'], 'read keys': ['select count(*) from api_keys'] },
    refused: {
      catraca_settle: settle,
      catraca_credit: credit,
      'update tenants': updateBalance,
      'insert into ledger': ledgerInsert,
      'read password hashes': ['select password_hash from portal_users'],
      'read Pix charges': ['select * from pix_charges'],
      'copy … to program': program,
    },
  },
  worker: {
    allowed: { 'read the catalog': ['select count(*) from models'] },
    refused: {
      'update tenants': updateBalance,
      'read the ledger': ['select * from ledger'],
      'read keys': ['select key_hash from api_keys'],
      catraca_credit: credit,
      catraca_admit: admit,
      'create a table': ['create table deploy_spy (id int)'],
      'become the owner': ['set role catraca_owner'],
      'copy … to program': program,
    },
  },
  metering: {
    allowed: { 'read holds': ['select count(*) from holds'] },
    refused: {
      catraca_credit: credit,
      catraca_pix_credit: [`select * from catraca_pix_credit($1, 'E1', now())`, [TXID]],
      catraca_admit: admit,
      'read users': ['select email from portal_users'],
      'update tenants': updateBalance,
      'insert into ledger': ledgerInsert,
    },
  },
  portal: {
    allowed: { 'read its charges': ['select count(*) from pix_charges'] },
    refused: {
      catraca_settle: settle,
      'catraca_credit (outside the Pix flow)': [`select * from catraca_credit($1, 1000000, 'pix', 'E-forged', null)`, [T]],
      'update tenants': updateBalance,
      'mark a charge paid by hand': [`update pix_charges set end_to_end_id = 'E-forged' where txid = $1`, [TXID]],
      'read operators': ['select email from operators'],
      'add a model': [`insert into models (id, pool, upstream_model, input_price, output_price) values ('x/y', 'sim', 'echo', 0, 0)`],
    },
  },
  admin: {
    allowed: { 'read tenants': ['select count(*) from tenants'] },
    refused: {
      catraca_settle: settle,
      catraca_pix_credit: [`select * from catraca_pix_credit($1, 'E1', now())`, [TXID]],
      'update tenants': updateBalance,
      'insert into ledger': ledgerInsert,
      'read password hashes': ['select password_hash from portal_users'],
      'read TOTP secrets': ['select totp_secret from operators'],
    },
  },
  console: {
    allowed: { 'read the audit log': ['select count(*) from console_audit'] },
    refused: {
      'rewrite the audit log': [`update console_audit set reason = 'rewritten'`],
      'update tenants': updateBalance,
      'insert into ledger': ledgerInsert,
      catraca_credit: credit,
      'read password hashes': ['select password_hash from portal_users'],
      'revoke a key without its audit row': ['update api_keys set revoked_at = now() where id = $1', [K]],
    },
  },
};
for (const [role, { allowed, refused }] of Object.entries(DB_CASES)) {
  const client = new pg.Client({
    host: 'postgres',
    port: 5432,
    database: 'catraca',
    user: `catraca_${role}`,
    password: env(`DB_${role.toUpperCase()}_PASSWORD`),
  });
  await client.connect();
  const run = async ([sql, params]: Stmt) => {
    await client.query('begin');
    try {
      await client.query(sql, params);
      return 'allowed';
    } catch (err) {
      const e = err as { code?: string; message: string };
      return e.code === '42501' ? 'refused' : `failed: ${e.code ?? ''} ${e.message}`;
    } finally {
      await client.query('rollback');
    }
  };
  for (const [what, stmt] of Object.entries(allowed)) out[`db ${role} may ${what}`] = await run(stmt);
  for (const [what, stmt] of Object.entries(refused)) out[`db ${role} may not ${what}`] = await run(stmt);
  await client.end();
}
{
  // the superuser's password is the migrate service's alone; a process role cannot log in to
  // another database than catraca's, nor with another role's password
  const wrong = new pg.Client({ host: 'postgres', database: 'catraca', user: 'catraca_worker', password: env('DB_GATEWAY_PASSWORD') });
  out["db worker with the gateway's password"] = await wrong.connect().then(
    () => (void wrong.end(), 'connected'),
    (e: { code?: string }) => `refused ${e.code}`,
  );
}

// --- the console's network --------------------------------------------------------------------
out['console reachable from the app network'] = await fetch('http://console:8082/healthz', { signal: AbortSignal.timeout(3000) }).then(
  (r) => `answered ${r.status}`,
  (e: Error & { cause?: { code?: string } }) => `unreachable ${e.cause?.code ?? e.name}`,
);

process.stdout.write(`${JSON.stringify(out)}\n`);
process.exit(0);
