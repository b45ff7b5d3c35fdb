import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { execFile, spawnSync } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { hostname, tmpdir } from 'node:os';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { promisify } from 'node:util';
import { connect, Empty, type Msg, type NatsConnection, type NatsError } from 'nats';
import OpenAI from 'openai';
import { connectBus } from '../src/bus/connect.ts';
import { ensureUsageStream } from '../src/bus/usage-stream.ts';
import { createMetrics, registerMonitoring } from '../src/bus/monitoring.ts';
import { encode } from '../src/bus/messages.ts';
import { METERING_DURABLE, NOTIFY_DURABLE, NOTIFY_STREAM, subjects, USAGE_STREAM } from '../src/bus/subjects.ts';
import { ensureNotifyConsumer } from '../src/notify/bus.ts';
import { ensureMeteringConsumer } from '../src/metering/consumer.ts';
import { collectInstances } from '../src/bus/instances.ts';
import { ledgerCheck } from '../src/billing/ledger-check.ts';
import { checkNats } from '../src/stack/healthcheck.ts';
import { upsertModel } from '../src/db/models.ts';
import { LOGIN_ROLES } from '../src/db/roles.ts';
import { ensureNats, findNatsServer, type ServiceHandle } from '../src/stack/services.ts';
import { BATCH_DURABLE, BATCH_STREAM, ensureBatchQueue } from '../src/batch/runner.ts';
import { startStack, type TestStack } from './helpers/stack.ts';
import { DOCKER_COMPOSE, describeWith, pathOf } from './helpers/tools.ts';

// NATS authentication and per-subject permissions per role (deploy/nats/auth.conf): a nats-server
// runs that file with random passwords in its environment; each role connects with its own
// credentials, can do what its process does and nothing of a set of forbidden operations — a
// worker only its own pools' jobs, usage and capacity (the file's `worker` serves openai and
// anthropic; `groq` stands for any other pool); then a stack whose gateway, worker and metering
// processes each use their role serves a streamed request (and the CLI revokes a key and lists
// the instances) without a single permission violation; and a front door serving pools in its own
// process (GATEWAY_LOCAL_POOLS) does once its gateway user's `#local ` lines are uncommented.

const ROOT = join(dirname(fileURLToPath(import.meta.url)), '..');
const AUTH_CONF = join(ROOT, 'deploy', 'nats', 'auth.conf');
const ROLES = ['gateway', 'worker', 'metering', 'portal', 'cli', 'console'] as const;
type Role = (typeof ROLES)[number];
// letters and digits, starting with a letter (auth.conf says why)
const PASSWORDS = Object.fromEntries(ROLES.map((r) => [r, `n${randomBytes(16).toString('hex')}`])) as Record<Role, string>;
const SERVER_ENV = Object.fromEntries(ROLES.map((r) => [`NATS_${r.toUpperCase()}_PASSWORD`, PASSWORDS[r]]));
const run = promisify(execFile);

let server: ServiceHandle;
let dataDir: string;
const serverLog: string[] = [];
let base: URL;
const urlOf = (role: Role, password = PASSWORDS[role]) => `nats://${role}:${password}@${base.host}`;
const conns: NatsConnection[] = [];
const as = async (role: Role) => {
  const nc = await connectBus(urlOf(role), `auth-test ${role}`);
  conns.push(nc);
  return nc;
};

beforeAll(async () => {
  dataDir = mkdtempSync(join(tmpdir(), 'catraca-nats-auth-'));
  server = await ensureNats({
    dataDir,
    args: ['-c', AUTH_CONF],
    env: SERVER_ENV,
    probeCredentials: `metering:${PASSWORDS.metering}`,
    onLog: (l) => serverLog.push(l),
  });
  base = new URL(server.url);
}, 30000);

afterAll(async () => {
  await Promise.all(conns.map((c) => c.close().catch(() => {})));
  await server?.stop();
  rmSync(dataDir, { recursive: true, force: true });
});

const violations = (from = 0) => serverLog.slice(from).filter((l) => /violation/i.test(l));
const within = <T>(p: Promise<T>, ms: number, what: string) =>
  Promise.race([p, new Promise<never>((_, rej) => setTimeout(() => rej(new Error(`${what}: nothing within ${ms} ms`)), ms))]);

/** The next message on `subject` (subscribed before `trigger` runs). */
async function nextOn(nc: NatsConnection, subject: string, trigger: () => unknown, opts: { queue?: string } = {}): Promise<Msg> {
  const sub = nc.subscribe(subject, { max: 1, queue: opts.queue });
  await nc.flush();
  await trigger();
  for await (const m of sub) return m;
  throw new Error(`subscription to ${subject} ended`);
}

/** Resolves with the permissions violation the server reports for a publish to `subject`. */
async function publishDenied(nc: NatsConnection, subject: string): Promise<NatsError> {
  const seen = (async () => {
    for await (const s of nc.status()) {
      const ctx = (s as { permissionContext?: { operation: string; subject: string } }).permissionContext;
      if (s.type === 'error' && ctx?.operation === 'publish' && ctx.subject === subject) return { code: String(s.data) } as NatsError;
    }
    throw new Error('connection closed');
  })();
  nc.publish(subject, encode({ forged: true }));
  await nc.flush();
  return within(seen, 3000, `publish violation for ${subject}`);
}

/** Resolves with the error the subscription to `subject` is closed with. */
function subscribeDenied(nc: NatsConnection, subject: string, queue?: string): Promise<NatsError> {
  return within(
    new Promise<NatsError>((resolve) => nc.subscribe(subject, { queue, callback: (err) => err && resolve(err) })),
    3000,
    `subscription violation for ${subject}`,
  );
}

/** A model of the pool `openai` (the file's `worker` serves it) that the simulator answers. */
const ECHO_OPENAI_POOL = {
  id: 'acme/echo',
  pool: 'openai',
  protocol: 'sim',
  upstream_model: 'echo',
  input_price: 1_000_000n,
  output_price: 2_000_000n,
} as const;

async function streamedText(stream: AsyncIterable<OpenAI.Chat.Completions.ChatCompletionChunk>): Promise<{ text: string; finish: string | null }> {
  let text = '';
  let finish: string | null = null;
  for await (const chunk of stream) {
    text += chunk.choices[0]?.delta?.content ?? '';
    finish = chunk.choices[0]?.finish_reason ?? finish;
  }
  return { text, finish };
}

const requestDenied = (nc: NatsConnection, subject: string) =>
  nc.request(subject, Empty, { timeout: 3000 }).then(
    () => ({ code: 'ANSWERED' }),
    (err: NatsError) => ({ code: err.code }),
  );

describe('the server of deploy/nats/auth.conf', () => {
  it('does not start while a password variable is missing', () => {
    const env: Record<string, string> = { PATH: process.env.PATH!, ...SERVER_ENV };
    delete env.NATS_CLI_PASSWORD;
    const r = spawnSync(findNatsServer(), ['-c', AUTH_CONF, '-a', '127.0.0.1', '-p', '-1'], { env, timeout: 10000, encoding: 'utf8' });
    expect(r.status).not.toBe(0);
    expect(r.stderr + r.stdout).toContain('NATS_CLI_PASSWORD');
  });

  it("refuses anonymous connections, wrong passwords and another role's password", async () => {
    const refused = (opts: Parameters<typeof connect>[0]) =>
      connect({ ...opts, reconnect: false, timeout: 3000 }).then(
        async (nc) => (await nc.close(), 'CONNECTED'),
        (err: NatsError) => err.code,
      );
    expect(await refused({ servers: base.host })).toBe('AUTHORIZATION_VIOLATION');
    expect(await refused({ servers: base.host, user: 'worker', pass: 'nwrongpassword' })).toBe('AUTHORIZATION_VIOLATION');
    expect(await refused({ servers: base.host, user: 'worker', pass: PASSWORDS.gateway })).toBe('AUTHORIZATION_VIOLATION');
    expect(await refused({ servers: base.host, user: 'admin', pass: PASSWORDS.cli })).toBe('AUTHORIZATION_VIOLATION');
    // credentials in NATS_URL are what connectBus passes on (nats.js would drop them)
    await expect(connectBus(`nats://worker:nwrongpassword@${base.host}`, 'auth-test wrong')).rejects.toMatchObject({ code: 'AUTHORIZATION_VIOLATION' });
  });

  it('a worker that starts before metering leaves the USAGE stream to metering (its usage waits)', async () => {
    const worker = await as('worker');
    expect(await ensureUsageStream(worker)).toEqual({ action: 'not_permitted', replicas: 0 });
    // no stream yet: JetStream does not answer, and the worker retries its usage publish until it does
    await expect(worker.jetstream().publish(subjects.usage('openai'), encode({}), { msgID: 'early', timeout: 2000 })).rejects.toMatchObject({
      code: '503',
    });
  });

  it('lets every role do what its process does, without a single violation', async () => {
    const from = serverLog.length;
    const metering = await as('metering');
    const worker = await as('worker');
    const gateway = await as('gateway');
    const portal = await as('portal');
    const cli = await as('cli');
    const consoleNc = await as('console');

    // metering owns the USAGE stream and its consumer; the worker may only look at it
    expect((await ensureUsageStream(metering)).replicas).toBe(1);
    await ensureMeteringConsumer(metering, 2000);

    // the front doors own BATCH (batches' lines, queue mode) and take the lines back through their shared consumer
    await ensureBatchQueue(gateway, 2000);
    await gateway.jetstream().publish(subjects.batchLines, encode({ batch_id: 'b_auth', line: 0 }), { msgID: 'b_auth.0', timeout: 3000 });
    const line = await (await gateway.jetstream().consumers.get(BATCH_STREAM, BATCH_DURABLE)).next({ expires: 3000 });
    expect(line?.subject).toBe(subjects.batchLines);
    line?.ack();
    expect(await ensureUsageStream(worker)).toEqual({ action: 'unchanged', replicas: 1 });

    // every long-running role is a micro service the CLI can list
    const monitors = await Promise.all(
      (['gateway', 'worker', 'metering', 'portal'] as const).map((r, i) =>
        registerMonitoring([gateway, worker, metering, portal][i]!, {
          name: `catraca-${r}`,
          version: '0.0.0',
          instanceId: `auth_${r}`,
          metrics: createMetrics(),
        }),
      ),
    );
    await Promise.all([gateway, worker, metering, portal].map((c) => c.flush())); // their subscriptions are in place
    const rows = await collectInstances(cli, { waitMs: 1000 });
    expect(rows.map((r) => r.service).sort()).toEqual(['catraca-gateway', 'catraca-metering', 'catraca-portal', 'catraca-worker']);
    // the containers' health checks of the worker and metering ask $SRV.INFO as the container's own user
    for (const role of ['worker', 'metering'] as const) {
      const check = await checkNats(`nats://${role}:${PASSWORDS[role]}@${base.host}`, `catraca-${role}`);
      expect(check).toEqual({ ok: true, detail: `catraca-${role} on ${hostname()} answers (auth_${role})` });
    }

    // job: gateway → worker (queue group), ack back to the gateway's inbox, frames to the door, cancel
    const jobs = worker.subscribe(subjects.job('openai'), {
      queue: subjects.queueGroup('openai'),
      callback: (_e, m) => {
        m.respond(encode({ ok: true, worker: 'wk_auth' }));
        worker.publish(subjects.stream('door_auth', 'req1'), encode({ t: 'delta', seq: 0, content: 'oi' }));
      },
    });
    await worker.flush(); // its queue subscription is in place
    const frame = nextOn(gateway, subjects.streamWildcard('door_auth'), () => {});
    frame.catch(() => {}); // awaited below
    const ack = await gateway.request(subjects.job('openai'), encode({ request_id: 'req1' }), { timeout: 3000 });
    expect(ack.subject.startsWith('_INBOX.gateway.')).toBe(true);
    expect(JSON.parse(new TextDecoder().decode(ack.data))).toEqual({ ok: true, worker: 'wk_auth' });
    expect((await within(frame, 3000, 'frame')).subject).toBe('catraca.stream.door_auth.req1');
    const cancel = await nextOn(worker, subjects.cancelWildcard('wk_auth'), () => gateway.publish(subjects.cancel('wk_auth', 'req1')));
    expect(cancel.subject).toBe('catraca.cancel.wk_auth.req1');
    jobs.unsubscribe();
    // a busy worker announces free slots; the front door sends a waiting job to that worker alone
    const freed = await nextOn(gateway, subjects.capacityWildcard, () => worker.publish(subjects.capacity('openai'), encode({ worker: 'wk_auth', free: 1 })));
    expect(freed.subject).toBe('catraca.capacity.openai');
    const direct = worker.subscribe(subjects.jobDirect('openai', 'wk_auth'), { callback: (_e, m) => m.respond(encode({ ok: true, worker: 'wk_auth' })) });
    await worker.flush();
    expect(JSON.parse(new TextDecoder().decode((await gateway.request(subjects.jobDirect('openai', 'wk_auth'), encode({}), { timeout: 3000 })).data))).toEqual({
      ok: true,
      worker: 'wk_auth',
    });
    direct.unsubscribe();
    // vendor batch mode: a front door asks a worker of the pool (queue group) to submit, poll or cancel a vendor's batch
    const vbatch = worker.subscribe(subjects.vendorBatch('openai'), {
      queue: subjects.vendorBatchGroup('openai'),
      callback: (_e, m) => m.respond(encode({ ok: true, vendor_batch_id: 'batch_v', status: 'in_progress', ended: false })),
    });
    await worker.flush();
    const vreply = await gateway.request(subjects.vendorBatch('openai'), encode({ op: 'poll' }), { timeout: 3000 });
    expect(vreply.subject.startsWith('_INBOX.gateway.')).toBe(true);
    expect(JSON.parse(new TextDecoder().decode(vreply.data))).toEqual({ ok: true, vendor_batch_id: 'batch_v', status: 'in_progress', ended: false });
    vbatch.unsubscribe();

    // usage: worker → JetStream (acked, deduplicated by msgID) → metering pulls and acks
    const js = worker.jetstream();
    const pa = await js.publish(subjects.usage('openai'), encode({ request_id: 'req1' }), { msgID: 'req1' });
    expect(pa.stream).toBe(USAGE_STREAM);
    expect((await js.publish(subjects.usage('openai'), encode({ request_id: 'req1' }), { msgID: 'req1' })).duplicate).toBe(true);
    const consumer = await metering.jetstream().consumers.get(USAGE_STREAM, METERING_DURABLE);
    const m = await consumer.next({ expires: 3000 });
    expect(m?.seq).toBe(pa.seq);
    expect(await m!.ackAck()).toBe(true);

    // broadcasts: key invalidations from the portal and the CLI reach the front doors; catalog
    // changes from the CLI reach front doors and workers
    expect((await nextOn(gateway, subjects.keyInvalidated, () => portal.publish(subjects.keyInvalidated, encode({ key_id: 'k1' })))).subject).toBe(
      subjects.keyInvalidated,
    );
    expect((await nextOn(gateway, subjects.keyInvalidated, () => cli.publish(subjects.keyInvalidated, encode({ key_id: 'k2' })))).subject).toBe(
      subjects.keyInvalidated,
    );
    for (const receiver of [gateway, worker]) {
      expect((await nextOn(receiver, subjects.catalogChanged, () => cli.publish(subjects.catalogChanged, encode({ model: 'm' })))).subject).toBe(
        subjects.catalogChanged,
      );
    }
    // a suspended or reactivated tenant: from the CLI, the console and metering (after a shortfall) to the front doors
    for (const sender of [cli, consoleNc, metering]) {
      expect((await nextOn(gateway, subjects.tenantChanged, () => sender.publish(subjects.tenantChanged, encode({ tenant_id: 't1' })))).subject).toBe(
        subjects.tenantChanged,
      );
    }
    // the console: key revocations and catalog changes to the doors and workers, the workers' $SRV.STATS
    expect((await nextOn(gateway, subjects.keyInvalidated, () => consoleNc.publish(subjects.keyInvalidated, encode({ key_id: 'k3' })))).subject).toBe(
      subjects.keyInvalidated,
    );
    expect((await nextOn(worker, subjects.catalogChanged, () => consoleNc.publish(subjects.catalogChanged, encode({ model: 'm' })))).subject).toBe(
      subjects.catalogChanged,
    );
    expect((await collectInstances(consoleNc, { service: 'catraca-worker', waitMs: 1000 })).map((r) => r.service)).toEqual(['catraca-worker']);

    // notifications: metering and the portal publish events into NOTIFY, which the portal's notifier creates and consumes
    await ensureNotifyConsumer(portal);
    const notified = await metering.jetstream().publish(subjects.notify('balance.low'), encode({ id: 'msg_auth1' }), { msgID: 'msg_auth1' });
    expect(notified.stream).toBe(NOTIFY_STREAM);
    expect((await portal.jetstream().publish(subjects.notify('key.revoked'), encode({ id: 'msg_auth2' }), { msgID: 'msg_auth2' })).seq).toBe(notified.seq + 1);
    const notifier = await portal.jetstream().consumers.get(NOTIFY_STREAM, NOTIFY_DURABLE);
    const n = await notifier.next({ expires: 3000 });
    expect(n?.subject).toBe('catraca.notify.balance.low');
    expect(await n!.ackAck()).toBe(true);

    await Promise.all(monitors.map((mon) => mon.stop()));
    expect(violations(from)).toEqual([]);
  });

  it('refuses what a role must not do, with a permissions violation', async () => {
    const nc = {
      gateway: await as('gateway'),
      worker: await as('worker'),
      metering: await as('metering'),
      portal: await as('portal'),
      cli: await as('cli'),
      console: await as('console'),
    };
    const jsm = await nc.metering.jetstreamManager();
    const before = (await jsm.streams.info(USAGE_STREAM)).state.messages;
    // a worker whose settings differ from the stream's leaves it alone instead of failing to start
    expect(await ensureUsageStream(nc.worker, { replicas: 2 })).toEqual({ action: 'not_permitted', replicas: 1 });
    const PV = 'PERMISSIONS_VIOLATION';
    const cases: Array<[string, Promise<{ code?: string }>]> = [
      // a worker takes its pools' jobs only, and bills and announces capacity for them only
      ['worker takes the jobs of a pool not its own', subscribeDenied(nc.worker, subjects.job('groq'), subjects.queueGroup('groq'))],
      ['worker takes a job sent to one worker of a pool not its own', subscribeDenied(nc.worker, subjects.jobDirect('groq', 'wk_x'))],
      ["worker takes every pool's jobs", subscribeDenied(nc.worker, 'catraca.jobs.>')],
      ['worker takes the vendor batches of a pool not its own', subscribeDenied(nc.worker, subjects.vendorBatch('groq'), subjects.vendorBatchGroup('groq'))],
      ['worker asks another worker about a vendor batch', publishDenied(nc.worker, subjects.vendorBatch('openai'))],
      ['worker publishes usage for a pool not its own', publishDenied(nc.worker, subjects.usage('groq'))],
      [
        'worker publishes usage for a pool not its own to JetStream',
        nc.worker
          .jetstream()
          .publish(subjects.usage('groq'), encode({}), { timeout: 3000 })
          .then(
            () => ({ code: 'ANSWERED' }),
            (e: NatsError) => ({ code: e.code }),
          ),
      ],
      ['worker announces capacity for a pool not its own', publishDenied(nc.worker, subjects.capacity('groq'))],
      // a worker takes jobs but cannot send them, nor touch USAGE beyond publishing, nor read other roles' replies
      ['worker publishes a job', requestDenied(nc.worker, subjects.job('openai'))],
      ['worker publishes a key invalidation', publishDenied(nc.worker, subjects.keyInvalidated)],
      ['worker updates the USAGE stream', requestDenied(nc.worker, `$JS.API.STREAM.UPDATE.${USAGE_STREAM}`)],
      ['worker deletes the USAGE stream', requestDenied(nc.worker, `$JS.API.STREAM.DELETE.${USAGE_STREAM}`)],
      ['worker pulls usage', requestDenied(nc.worker, `$JS.API.CONSUMER.MSG.NEXT.${USAGE_STREAM}.${METERING_DURABLE}`)],
      ['worker creates a consumer on USAGE', requestDenied(nc.worker, `$JS.API.CONSUMER.CREATE.${USAGE_STREAM}.spy`)],
      ["worker reads the gateway's replies", subscribeDenied(nc.worker, '_INBOX.gateway.>')],
      ['worker reads every reply', subscribeDenied(nc.worker, '_INBOX.>')],
      // its health check asks its own service's $SRV.INFO, nothing more of $SRV
      ['worker asks the stats of every service', requestDenied(nc.worker, '$SRV.STATS')],
      ["worker asks the front doors' info", requestDenied(nc.worker, '$SRV.INFO.catraca-gateway')],
      ["metering asks the workers' info", requestDenied(nc.metering, '$SRV.INFO.catraca-worker')],
      // a gateway sends jobs and cancels, but cannot bill, forge frames, take jobs or consume usage
      ['gateway publishes usage', publishDenied(nc.gateway, subjects.usage('openai'))],
      [
        'gateway publishes usage to JetStream',
        nc.gateway
          .jetstream()
          .publish(subjects.usage('openai'), encode({}), { timeout: 3000 })
          .then(
            () => ({ code: 'ANSWERED' }),
            (e: NatsError) => ({ code: e.code }),
          ),
      ],
      ['gateway publishes a frame', publishDenied(nc.gateway, subjects.stream('door_x', 'req_x'))],
      ['gateway announces worker capacity', publishDenied(nc.gateway, subjects.capacity('openai'))],
      ['portal announces worker capacity', publishDenied(nc.portal, subjects.capacity('openai'))],
      ['gateway takes jobs', subscribeDenied(nc.gateway, subjects.job('openai'), subjects.queueGroup('openai'))],
      ['gateway pulls usage', requestDenied(nc.gateway, `$JS.API.CONSUMER.MSG.NEXT.${USAGE_STREAM}.${METERING_DURABLE}`)],
      ['gateway reads the USAGE stream', requestDenied(nc.gateway, `$JS.API.STREAM.MSG.GET.${USAGE_STREAM}`)],
      // the portal only invalidates keys
      ['portal takes jobs', subscribeDenied(nc.portal, 'catraca.jobs.>')],
      ['portal asks a worker about a vendor batch', publishDenied(nc.portal, subjects.vendorBatch('openai'))],
      ['portal reads frames', subscribeDenied(nc.portal, 'catraca.stream.>')],
      ['portal publishes a catalog change', publishDenied(nc.portal, subjects.catalogChanged)],
      ['portal publishes a job', requestDenied(nc.portal, subjects.job('openai'))],
      ['portal publishes usage', publishDenied(nc.portal, subjects.usage('openai'))],
      ['portal reads the USAGE stream', requestDenied(nc.portal, `$JS.API.STREAM.INFO.${USAGE_STREAM}`)],
      ['portal deletes the NOTIFY stream', requestDenied(nc.portal, `$JS.API.STREAM.DELETE.${NOTIFY_STREAM}`)],
      ['portal pulls usage', requestDenied(nc.portal, `$JS.API.CONSUMER.MSG.NEXT.${USAGE_STREAM}.${METERING_DURABLE}`)],
      ['metering consumes notifications', requestDenied(nc.metering, `$JS.API.CONSUMER.MSG.NEXT.${NOTIFY_STREAM}.${NOTIFY_DURABLE}`)],
      ['worker publishes a notification', publishDenied(nc.worker, subjects.notify('balance.low'))],
      ['gateway publishes a notification', publishDenied(nc.gateway, subjects.notify('topup.credited'))],
      // metering consumes usage, but cannot delete or purge it, produce it, or speak to clients
      ['metering deletes the USAGE stream', requestDenied(nc.metering, `$JS.API.STREAM.DELETE.${USAGE_STREAM}`)],
      ['metering purges the USAGE stream', requestDenied(nc.metering, `$JS.API.STREAM.PURGE.${USAGE_STREAM}`)],
      ['metering deletes its consumer', requestDenied(nc.metering, `$JS.API.CONSUMER.DELETE.${USAGE_STREAM}.${METERING_DURABLE}`)],
      ['metering publishes usage', publishDenied(nc.metering, subjects.usage('openai'))],
      ['metering publishes a frame', publishDenied(nc.metering, subjects.stream('door_x', 'req_x'))],
      // the CLI broadcasts and asks $SRV, nothing else
      ['cli publishes a job', requestDenied(nc.cli, subjects.job('openai'))],
      ['cli reads frames', subscribeDenied(nc.cli, 'catraca.stream.>')],
      ['cli purges the USAGE stream', requestDenied(nc.cli, `$JS.API.STREAM.PURGE.${USAGE_STREAM}`)],
      ['cli answers $SRV pings', subscribeDenied(nc.cli, '$SRV.PING')],
      ['cli asks an instance directly (only through $SRV)', requestDenied(nc.cli, 'catraca.monitor.some_instance')],
      ['gateway asks an instance directly', requestDenied(nc.gateway, 'catraca.monitor.some_instance')],
      // the console broadcasts changes and asks $SRV, nothing else
      ['console publishes a job', requestDenied(nc.console, subjects.job('openai'))],
      ['console reads frames', subscribeDenied(nc.console, 'catraca.stream.>')],
      ['console publishes usage', publishDenied(nc.console, subjects.usage('openai'))],
      ["console reads the CLI's replies", subscribeDenied(nc.console, '_INBOX.cli.>')],
      ['portal suspends a tenant', publishDenied(nc.portal, subjects.tenantChanged)],
      ['worker suspends a tenant', publishDenied(nc.worker, subjects.tenantChanged)],
    ];
    const results = await Promise.all(cases.map(async ([what, p]) => [what, (await p.catch((e: Error) => ({ code: e.message }))).code] as const));
    expect(Object.fromEntries(results)).toEqual(Object.fromEntries(cases.map(([what]) => [what, PV])));
    // nothing forged reached the USAGE stream
    expect((await jsm.streams.info(USAGE_STREAM)).state.messages).toBe(before);
  });
});

describe('a stack whose processes each use their role', () => {
  let stack: TestStack;

  beforeAll(async () => {
    // the harness connects as the CLI; each process gets its role's NATS_URL
    stack = await startStack({ natsUrl: urlOf('cli'), gateways: 0, workers: 0, metering: false });
    // a model of a pool the worker user serves, answered by the simulator
    await upsertModel(stack.db, ECHO_OPENAI_POOL);
    await Promise.all([
      stack.spawnMetering({ NATS_URL: urlOf('metering'), CATRACA_INSTANCE: 'mt_auth' }),
      stack.spawnWorker({ NATS_URL: urlOf('worker'), CATRACA_INSTANCE: 'wk_auth_e2e', WORKER_POOLS: 'openai' }),
      stack.spawnGateway({ NATS_URL: urlOf('gateway'), CATRACA_INSTANCE: 'gw_auth' }),
    ]);
  }, 90000);

  afterAll(async () => {
    await stack?.stop();
  });

  it('serves a streamed request and settles it; the CLI revokes a key and lists the instances; no violation, no password in any log', async () => {
    const from = serverLog.length;
    const t = await stack.tenant('1.00');
    const client = new OpenAI({ baseURL: stack.baseUrl, apiKey: t.key, maxRetries: 0 });
    const { data: stream, response } = await client.chat.completions
      .create({ model: ECHO_OPENAI_POOL.id, stream: true, messages: [{ role: 'user', content: 'um dois três' }] })
      .withResponse();
    expect(await streamedText(stream)).toEqual({ text: 'um dois três', finish: 'stop' });
    const requestId = response.headers.get('x-request-id')!;
    await stack.waitSettled([requestId]);
    await stack.waitNoHolds(t.tenantId);
    expect((await ledgerCheck(stack.db)).ok).toBe(true);

    // the CLI with its role: the revocation broadcast reaches the front door (401 at once, not
    // after the key cache's TTL), and `status` sees every instance
    const cli = (args: string[]) =>
      run(process.execPath, [join(ROOT, 'bin', 'catraca.js'), ...args], {
        cwd: ROOT,
        env: { ...process.env, DATABASE_URL: stack.roleUrl('admin'), NATS_URL: urlOf('cli') },
      });
    const revoked = await cli(['key', 'revoke', '--id', t.keyId, '--json']);
    expect(revoked.stderr).toBe('');
    const deadline = Date.now() + 2000;
    let status = 0;
    while (Date.now() < deadline && status !== 401) {
      status = (await fetch(`${stack.baseUrl}/credits`, { headers: { authorization: `Bearer ${t.key}` } })).status;
      if (status !== 401) await new Promise((r) => setTimeout(r, 50));
    }
    expect(status).toBe(401);
    const st = JSON.parse((await cli(['status', '--json'])).stdout) as { instances: Array<{ instance: string }>; usage: Record<string, unknown> };
    const instances = st.instances.map((i) => i.instance);
    expect(instances).toEqual(expect.arrayContaining(['gw_auth', 'wk_auth_e2e', 'mt_auth']));
    // the cli role reads the usage backlog (stream and consumer info, nothing more)
    expect(st.usage).toMatchObject({ messages: 0, pending: 0, ack_pending: 0, retention: 'workqueue' });

    expect(violations(from)).toEqual([]);
    const lines = [...stack.allLogLines(), revoked.stdout, revoked.stderr];
    for (const pw of Object.values(PASSWORDS)) expect(lines.filter((l) => l.includes(pw))).toEqual([]);
    expect(stack.allLogLines().find((l) => l.includes('"msg":"worker ready"'))).toContain(`nats://worker:***@${base.host}`);
  });
});

describe("a front door serving pools in its own process (GATEWAY_LOCAL_POOLS), its user's `#local ` lines uncommented", () => {
  // the same file, with the change its POOLS section tells an operator to make
  let local: ServiceHandle;
  let localDir: string;
  let stack: TestStack;
  const localLog: string[] = [];
  const localUrl = (role: Role) => `nats://${role}:${PASSWORDS[role]}@${new URL(local.url).host}`;

  beforeAll(async () => {
    localDir = mkdtempSync(join(tmpdir(), 'catraca-nats-local-'));
    const conf = join(localDir, 'auth.conf');
    const text = readFileSync(AUTH_CONF, 'utf8');
    expect(text.match(/^\s*#local /gm)).toHaveLength(2);
    writeFileSync(conf, text.replace(/^(\s*)#local /gm, '$1'));
    local = await ensureNats({
      dataDir: join(localDir, 'data'),
      args: ['-c', conf],
      env: SERVER_ENV,
      probeCredentials: `metering:${PASSWORDS.metering}`,
      onLog: (l) => localLog.push(l),
    });
    stack = await startStack({ natsUrl: localUrl('cli'), gateways: 0, workers: 0, metering: false });
    await upsertModel(stack.db, ECHO_OPENAI_POOL);
    await stack.spawnMetering({ NATS_URL: localUrl('metering'), CATRACA_INSTANCE: 'mt_local' });
    await stack.spawnGateway({ NATS_URL: localUrl('gateway'), CATRACA_INSTANCE: 'gw_local', GATEWAY_LOCAL_POOLS: 'openai' });
  }, 90000);

  afterAll(async () => {
    await stack?.stop();
    await local?.stop();
    if (localDir) rmSync(localDir, { recursive: true, force: true });
  });

  it('serves and bills its pool with no worker process and no violation; usage for another pool is still refused', async () => {
    const t = await stack.tenant('1.00');
    const client = new OpenAI({ baseURL: stack.baseUrl, apiKey: t.key, maxRetries: 0 });
    const { data: stream, response } = await client.chat.completions
      .create({ model: ECHO_OPENAI_POOL.id, stream: true, messages: [{ role: 'user', content: 'no próprio processo' }] })
      .withResponse();
    expect(await streamedText(stream)).toEqual({ text: 'no próprio processo', finish: 'stop' });
    await stack.waitSettled([response.headers.get('x-request-id')!]);
    await stack.waitNoHolds(t.tenantId);
    expect(localLog.filter((l) => /violation/i.test(l))).toEqual([]);
    const gateway = await connectBus(localUrl('gateway'), 'auth-test gateway local');
    try {
      expect(await publishDenied(gateway, subjects.usage('groq'))).toMatchObject({ code: 'PERMISSIONS_VIOLATION' });
      expect(await subscribeDenied(gateway, subjects.job('openai'), subjects.queueGroup('openai'))).toMatchObject({ code: 'PERMISSIONS_VIOLATION' });
    } finally {
      await gateway.close();
    }
  });
});

// docker-compose.yml (Debian's docker-compose 1.29): the three-node cluster with this file's users.
// That it is refused without any one NATS password is checked with the other required variables
// in test/portal/config.test.ts.
describeWith(DOCKER_COMPOSE, 'docker-compose.yml: a three-node NATS cluster, one NATS user and one database role per service', () => {
  it('gives every node its name, volume, routes and config, and every app service its roles and the three nodes', async () => {
    const cwd = mkdtempSync(join(tmpdir(), 'catraca-compose-'));
    const env: Record<string, string> = {
      PATH: process.env.PATH!,
      POSTGRES_PASSWORD: '0123456789abcdef',
      PORTAL_PUBLIC_URL: 'https://portal.example.com.br',
      GATEWAY_PUBLIC_URL: 'https://api.example.com.br/v1',
      PIX_API_URL: 'https://pix.psp.example/v2',
      PIX_OAUTH_URL: 'https://pix.psp.example/oauth/token',
      PIX_CLIENT_ID: 'id',
      PIX_CLIENT_SECRET: 'secret',
      PIX_KEY: 'pix@example.com.br',
      PIX_CERT_DIR: cwd,
      NATS_ROUTE_PASSWORD: 'nroute0',
      ...Object.fromEntries(ROLES.map((r) => [`NATS_${r.toUpperCase()}_PASSWORD`, `n${r}0`])),
      ...Object.fromEntries(LOGIN_ROLES.map((r) => [`DB_${r.toUpperCase()}_PASSWORD`, `db${r}0`])),
    };
    const out = await run(pathOf(DOCKER_COMPOSE), ['-f', join(ROOT, 'docker-compose.yml'), '--project-directory', cwd, 'config'], { cwd, env }).finally(() =>
      rmSync(cwd, { recursive: true, force: true }),
    );
    expect(out.stderr).toBe('');
    // one block per service (`  name:` under `services:`)
    const services = new Map<string, string>();
    const body = out.stdout.split(/^(?=\S)/m).find((section) => section.startsWith('services:'))!;
    for (const block of body.split(/\n(?= {2}[a-z0-9-]+:\n)/)) {
      const m = /^ {2}([a-z0-9-]+):\n/.exec(block);
      if (m) services.set(m[1]!, block);
    }
    expect([...services.keys()]).not.toContain('nats');
    for (const n of [1, 2, 3]) {
      const b = services.get(`nats-${n}`)!;
      expect(b).toContain(`NATS_SERVER_NAME: nats-${n}`);
      expect(b).toContain(`nats-${n}-data:/data`);
      expect(b).toContain('/etc/catraca/nats/nats.conf');
      expect(b.replace(/\s+/g, ' ')).toContain('[nats://route:nroute0@nats-1:6222, nats://route:nroute0@nats-2:6222, nats://route:nroute0@nats-3:6222]');
      for (const r of ROLES) expect(b).toContain(`NATS_${r.toUpperCase()}_PASSWORD: n${r}0`);
      expect(b).not.toMatch(/ports:/);
    }
    for (const [service, role] of [
      ['gateway', 'gateway'],
      ['worker', 'worker'],
      ['metering', 'metering'],
      ['portal', 'portal'],
      ['cli', 'cli'],
      ['console', 'console'],
    ] as const) {
      expect(services.get(service), service).toContain(`NATS_URL: nats://${role}:n${role}0@nats-1:4222,nats://nats-2:4222,nats://nats-3:4222`);
    }
    expect(services.get('migrate')).not.toContain('NATS_URL');
    // PostgreSQL: each service its own role; only migrate connects as the superuser, and sets the roles' passwords
    for (const [service, role] of [
      ['gateway', 'gateway'],
      ['worker', 'worker'],
      ['metering', 'metering'],
      ['portal', 'portal'],
      ['cli', 'admin'],
      ['console', 'console'],
    ] as const) {
      expect(services.get(service), service).toContain(`DATABASE_URL: postgres://catraca_${role}:db${role}0@postgres:5432/catraca\n`);
    }
    expect(services.get('migrate')).toContain('DATABASE_URL: postgres://catraca:0123456789abcdef@postgres:5432/catraca\n');
    for (const r of LOGIN_ROLES) expect(services.get('migrate')).toContain(`DB_${r.toUpperCase()}_PASSWORD: db${r}0`);
    for (const [service, block] of services) {
      if (service !== 'migrate' && service !== 'postgres') expect(block, service).not.toMatch(/postgres:\/\/catraca:|DB_\w+_PASSWORD/);
    }
    // no password in the files themselves: every one comes from the environment
    const files = ['docker-compose.yml', 'deploy/nats/nats.conf', 'deploy/nats/auth.conf'].map((f) =>
      readFileSync(join(ROOT, f), 'utf8')
        .split('\n')
        .filter((l) => !/^\s*#/.test(l))
        .join('\n'),
    );
    for (const f of files) {
      expect(f).not.toMatch(/(nats|postgres):\/\/\w+:(?!\$\{)[^@\s]+@/);
      expect(f).not.toMatch(/password:\s*(?!\$)[^\s,}]+/);
    }
  });
});
