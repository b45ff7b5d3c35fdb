import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { AckPolicy, type NatsConnection, type StreamInfo } from 'nats';
import OpenAI, { APIConnectionError, APIError } from 'openai';
import { connectBus } from '../src/bus/connect.ts';
import { ensureUsageStream, natsClusterSize } from '../src/bus/usage-stream.ts';
import { METERING_DURABLE, subjects, USAGE_STREAM } from '../src/bus/subjects.ts';
import { ensureMeteringConsumer } from '../src/metering/consumer.ts';
import { ledgerCheck } from '../src/billing/ledger-check.ts';
import { loremTokens } from '../src/providers/sim/generate.ts';
import { startNatsCluster, type NatsCluster, type NatsNode } from './helpers/nats-cluster.ts';
import { startStack, type Proc, type TestStack } from './helpers/stack.ts';

// NATS as a three-node cluster with JetStream (issue 10): the USAGE stream gets three replicas,
// and a node — the USAGE stream's leader, with app processes connected to it — is killed with
// SIGKILL in the middle of ~100 streamed requests. Every stream finishes or ends with a clean
// error, the processes reconnect to the survivors, every usage message settles exactly once and
// the ledger reconciles. The measured reconnect and settle times are printed.

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

let cluster: NatsCluster;
let nc: NatsConnection;

beforeAll(async () => {
  cluster = await startNatsCluster(3);
  nc = await connectBus(cluster.url, 'cluster-test');
}, 60000);

afterAll(async () => {
  await nc?.close().catch(() => {});
  await cluster?.stop();
});

async function streamInfo(conn: NatsConnection = nc): Promise<StreamInfo> {
  return (await conn.jetstreamManager()).streams.info(USAGE_STREAM);
}

async function waitFor<T>(what: string, fn: () => Promise<T | undefined | false>, timeoutMs = 20000): Promise<T> {
  const deadline = Date.now() + timeoutMs;
  let last: unknown;
  for (;;) {
    try {
      const v = await fn();
      if (v) return v;
    } catch (err) {
      last = err;
    }
    if (Date.now() > deadline) throw new Error(`${what}: not within ${timeoutMs} ms${last ? ` (${(last as Error).message})` : ''}`);
    await sleep(100);
  }
}

describe('USAGE stream replicas', () => {
  it('a single server: one replica', async () => {
    const single = await connectBus(process.env.NATS_URL!, 'cluster-test-single');
    try {
      expect(natsClusterSize(single)).toBe(1);
      const r = await ensureUsageStream(single);
      expect(r.replicas).toBe(1);
      expect((await streamInfo(single)).config.num_replicas).toBe(1);
    } finally {
      await single.close();
    }
  });

  it('an existing one-replica stream (and its metering consumer) is scaled to 3 replicas by auto; an explicit USAGE_REPLICAS scales it down', async () => {
    expect(natsClusterSize(nc)).toBe(3);
    const jsm = await nc.jetstreamManager();
    // the stream and the metering consumer as a single-server deployment left them (the consumer
    // created directly: ensureMeteringConsumer would first scale the stream itself)
    expect(await ensureUsageStream(nc, { replicas: 1 })).toEqual({ action: 'created', replicas: 1 });
    await jsm.consumers.add(USAGE_STREAM, { durable_name: METERING_DURABLE, ack_policy: AckPolicy.Explicit, filter_subject: subjects.usageWildcard });
    expect((await jsm.consumers.info(USAGE_STREAM, METERING_DURABLE)).cluster?.replicas ?? []).toHaveLength(0);
    const js = nc.jetstream();
    for (let i = 0; i < 10; i++) await js.publish(subjects.usage('sim'), new Uint8Array([i]), { msgID: `r1-${i}` });

    expect(await ensureUsageStream(nc)).toEqual({ action: 'updated', replicas: 3 });
    await waitFor('the stream on three nodes', async () => (await streamInfo()).cluster?.replicas?.filter((p) => p.current).length === 2);
    // the consumer follows the stream (its num_replicas is 0: inherited)
    await waitFor(
      'the metering consumer on three nodes',
      async () => (await jsm.consumers.info(USAGE_STREAM, METERING_DURABLE)).cluster?.replicas?.length === 2,
    );
    expect(await ensureUsageStream(nc)).toEqual({ action: 'unchanged', replicas: 3 });
    await ensureMeteringConsumer(nc); // what metering does at start: leaves the replicas alone
    const scaled = await streamInfo();
    expect(scaled.config.num_replicas).toBe(3);
    expect(scaled.state.messages).toBe(10);

    expect(await ensureUsageStream(nc, { replicas: 1 })).toEqual({ action: 'updated', replicas: 1 });
    await waitFor('one replica again', async () => {
      const i = await streamInfo();
      return i.config.num_replicas === 1 && i.cluster?.leader && (i.cluster.replicas ?? []).length === 0;
    });
  });

  it('a new stream on a three-node cluster gets 3 replicas', async () => {
    const jsm = await nc.jetstreamManager();
    await jsm.streams.delete(USAGE_STREAM);
    await waitFor('USAGE gone', async () =>
      streamInfo().then(
        () => false,
        (err: Error) => /not found/.test(err.message),
      ),
    );
    expect(await ensureUsageStream(nc)).toEqual({ action: 'created', replicas: 3 });
    const info = await waitFor('a leader and two current followers', async () => {
      const i = await streamInfo();
      return i.cluster?.leader && i.cluster.replicas?.filter((p) => p.current).length === 2 ? i : undefined;
    });
    expect(info.config.num_replicas).toBe(3);
    expect(await ensureUsageStream(nc)).toEqual({ action: 'unchanged', replicas: 3 });
  });
});

type Outcome =
  | { kind: 'completed'; id: string; startedAt: number }
  | { kind: 'http_error'; id: string | null; status: number; code: string; startedAt: number }
  | { kind: 'stream_error'; id: string; code: string; content: string; startedAt: number }
  | { kind: 'broken'; id: string | null; detail: string; startedAt: number };

describe('a node killed with SIGKILL mid-load', () => {
  let stack: TestStack;
  /** gw1, gw2, wk1, wk2, mt1 */
  let named: Proc[];

  beforeAll(async () => {
    // The stream exists with 3 replicas (created so by the previous test; metering adds its
    // consumer, which inherits them). Small
    // timeouts so that anything left behind surfaces within the test: idle streams fail after 3 s,
    // holds expire after 10 + 2 s and the sweeper runs every 500 ms.
    stack = await startStack({
      natsUrl: cluster.url,
      gateways: 0,
      workers: 0,
      metering: false,
      env: { STREAM_IDLE_TIMEOUT_MS: '3000', KEEPALIVE_MS: '500', REQUEST_TIMEOUT_MS: '10000', HOLD_GRACE_MS: '2000', METERING_ACK_WAIT_MS: '2000' },
    });
    named = await Promise.all([
      stack.spawnGateway({ CATRACA_INSTANCE: 'gw1' }),
      stack.spawnGateway({ CATRACA_INSTANCE: 'gw2' }),
      stack.spawnWorker({ CATRACA_INSTANCE: 'wk1', WORKER_POOLS: 'sim' }),
      stack.spawnWorker({ CATRACA_INSTANCE: 'wk2', WORKER_POOLS: 'sim' }),
      stack.spawnMetering({ CATRACA_INSTANCE: 'mt1' }),
    ]);
  }, 90000);

  afterAll(async () => {
    await stack?.stop();
  });

  it('streams finish or end with a clean error, processes reconnect, usage settles exactly once, the ledger reconciles', async () => {
    // the connection name each process gives NATS
    const conns = ['catraca-gateway gw1', 'catraca-gateway gw2', 'worker wk1 [sim]', 'worker wk2 [sim]', 'catraca-metering mt1'];
    const procs = named.map((proc, i) => ({ proc, conn: conns[i]! }));
    // Which node each process is connected to (nats.js shuffles NATS_URL).
    const where = new Map<string, NatsNode>();
    await waitFor('every process connected', async () => {
      where.clear();
      for (const node of cluster.nodes) for (const name of await cluster.connectionNames(node)) where.set(name, node);
      return procs.every((p) => where.has(p.conn));
    });
    // The victim: the node with the most processes on it, made the USAGE stream's leader.
    const load = cluster.nodes.map((n) => ({ n, count: procs.filter((p) => where.get(p.conn) === n).length }));
    load.sort((a, b) => b.count - a.count);
    const victim = load[0]!.n;
    const onVictim = procs.filter((p) => where.get(p.conn) === victim);
    expect(onVictim.length).toBeGreaterThan(0);
    for (let i = 0; i < 30 && (await streamInfo()).cluster?.leader !== victim.name; i++) {
      await nc.request(`$JS.API.STREAM.LEADER.STEPDOWN.${USAGE_STREAM}`, undefined, { timeout: 5000 }).catch(() => {});
      await waitFor('a new USAGE leader', async () => (await streamInfo()).cluster?.leader, 10000);
    }
    expect((await streamInfo()).cluster?.leader).toBe(victim.name);

    const t = await stack.tenant('10.00');
    const TOKENS = 20;
    const expected = loremTokens(TOKENS).join('');
    const clients = stack.gateways.map((g) => new OpenAI({ baseURL: stack.urlOf(g), apiKey: t.key, maxRetries: 0, timeout: 30000 }));

    const one = async (i: number): Promise<Outcome> => {
      const startedAt = Date.now();
      let id: string | null = null;
      let content = '';
      let finish: string | null = null;
      try {
        const { data: stream, response } = await clients[i % clients.length]!.chat.completions.create({
          model: 'sim/lorem',
          stream: true,
          messages: [{ role: 'user', content: `request ${i}` }],
          // ~1 s per request: 20 tokens at 20 tokens/s
          sim: { tokens_per_second: 20, output_tokens: TOKENS },
        } as OpenAI.ChatCompletionCreateParamsStreaming).withResponse();
        id = response.headers.get('x-request-id');
        for await (const chunk of stream) {
          content += chunk.choices[0]?.delta?.content ?? '';
          finish = chunk.choices[0]?.finish_reason ?? finish;
        }
        if (finish === 'stop' && content === expected) return { kind: 'completed', id: id!, startedAt };
        return { kind: 'broken', id, detail: `ended without an error event: finish_reason ${finish}, ${content.length} chars`, startedAt };
      } catch (err) {
        if (err instanceof APIConnectionError || !(err instanceof APIError)) {
          return { kind: 'broken', id, detail: `connection failed without an error event: ${(err as Error).message}`, startedAt };
        }
        const body = err.error as { code?: unknown; message?: unknown } | undefined;
        if (typeof body?.code !== 'string' || typeof body.message !== 'string') {
          return { kind: 'broken', id, detail: `error without the documented JSON shape: ${JSON.stringify(err.error)}`, startedAt };
        }
        if (err.status !== undefined)
          return { kind: 'http_error', id: err.headers?.get('x-request-id') ?? null, status: err.status, code: body.code, startedAt };
        return { kind: 'stream_error', id: id!, code: body.code, content, startedAt };
      }
    };

    const N = 100;
    const SPACING_MS = 30; // ~3 s of arrivals, ~30 streams in flight at any time
    const running: Array<Promise<Outcome>> = [];
    const t0 = Date.now();
    const killAfterMs = 1500;
    let killedAt = 0;
    // From the kill on, the tenant's debits and holds every 100 ms: when the last debit appeared.
    const ledgerSeen = { debits: 0, lastDebitAt: 0, holds: 0 };
    let watching = true;
    const watcher = (async () => {
      while (watching) {
        const { rows } = await stack.db
          .query(
            `select (select count(*)::int from ledger where tenant_id = $1 and kind = 'debit') as debits,
                  (select count(*)::int from holds where tenant_id = $1) as holds`,
            [t.tenantId],
          )
          .catch(() => ({ rows: [] as Array<{ debits: number; holds: number }> }));
        if (rows[0]) {
          if (rows[0].debits !== ledgerSeen.debits) ledgerSeen.lastDebitAt = Date.now();
          Object.assign(ledgerSeen, { debits: rows[0].debits, holds: rows[0].holds });
        }
        await sleep(100);
      }
    })();
    const killing = (async () => {
      await sleep(killAfterMs);
      killedAt = Date.now();
      await cluster.kill(victim, 'SIGKILL');
    })();
    for (let i = 0; i < N; i++) {
      running.push(one(i));
      await sleep(Math.max(0, t0 + (i + 1) * SPACING_MS - Date.now()));
    }
    await killing;
    const outcomes = await Promise.all(running);
    const loadEndedAt = Date.now();

    // 1. No hang, no silent cut: every request completed with the right content or got a clean error.
    const broken = outcomes.filter((o) => o.kind === 'broken');
    expect(broken, JSON.stringify(broken)).toEqual([]);
    const completed = outcomes.filter((o) => o.kind === 'completed');
    const failed = outcomes.filter((o) => o.kind === 'http_error' || o.kind === 'stream_error');
    // Requests that arrived well after the kill find the stack whole again.
    const late = outcomes.filter((o) => o.startedAt >= killedAt + 1000);
    expect(late.length).toBeGreaterThan(0);
    expect(
      late.filter((o) => o.kind !== 'completed'),
      JSON.stringify(late.filter((o) => o.kind !== 'completed')),
    ).toEqual([]);

    // 2. The processes that were on the victim reconnected to a survivor, and say so in their logs.
    const reconnectMs: Record<string, number> = {};
    for (const p of onVictim) {
      const line = await waitFor(`${p.conn} logs a reconnect`, async () => p.proc.lines.find((l) => l.includes('"msg":"nats reconnect"')), 15000).catch(
        (err) => {
          throw new Error(`${(err as Error).message}; its log:\n${p.proc.lines.slice(-30).join('\n')}`);
        },
      );
      reconnectMs[p.conn] = Date.parse(JSON.parse(line).t) - killedAt;
    }
    const survivors = cluster.nodes.filter((n) => n.alive);
    await waitFor(
      'every process connected to a survivor',
      async () => {
        const names = new Set<string>();
        for (const n of survivors) for (const name of await cluster.connectionNames(n)) names.add(name);
        return procs.every((p) => names.has(p.conn));
      },
      15000,
    );
    const allReconnectedMs = Date.now() - killedAt;

    // 3. Every usage message settles exactly once; no hold is left open.
    const completedIds = completed.map((o) => o.id);
    const allIds = outcomes.map((o) => o.id).filter((id): id is string => !!id);
    await stack.waitSettled(completedIds, 60000);
    await stack.waitNoHolds(t.tenantId, 30000);
    const noHoldsMs = Date.now() - killedAt;
    await sleep(300);
    watching = false;
    await watcher;
    const { rows } = await stack.db.query(
      `select request_id, count(*)::int as n, min(outcome) as outcome, min(output_tokens)::int as output_tokens
         from ledger where kind = 'debit' and request_id = any($1) group by request_id`,
      [allIds],
    );
    const byId = new Map(rows.map((r) => [r.request_id as string, r]));
    for (const r of rows) expect(r.n, r.request_id).toBe(1);
    for (const id of completedIds) expect(byId.get(id), id).toMatchObject({ n: 1, outcome: 'completed', output_tokens: TOKENS });
    const check = await ledgerCheck(stack.db);
    expect(check.mismatches).toEqual([]);
    expect(check.ok).toBe(true);

    // 4. The stream kept its three replicas under a new leader; a process that connects now sees
    //    two servers and does not scale it down.
    const info = await streamInfo();
    expect(info.cluster?.leader).toBeTruthy();
    expect(info.cluster?.leader).not.toBe(victim.name);
    expect(info.config.num_replicas).toBe(3);
    const fresh = await connectBus(survivors.map((n) => n.url).join(','), 'cluster-test-fresh');
    try {
      expect(natsClusterSize(fresh)).toBe(2);
      expect(await ensureUsageStream(fresh)).toEqual({ action: 'unchanged', replicas: 3 });
    } finally {
      await fresh.close();
    }

    // While the USAGE stream elects a new leader, the workers' usage publishes fail and are retried.
    const retries = named
      .flatMap((p) => p.lines)
      .filter((l) => l.includes('"msg":"usage publish failed; retrying"'))
      .map((l) => Date.parse(JSON.parse(l).t) - killedAt);
    // 5. The node comes back: it rejoins and catches its replica of USAGE up.
    const restartedAt = Date.now();
    await cluster.restart(victim);
    let lastCluster: unknown;
    await waitFor(
      'three current replicas of USAGE again',
      async () => {
        const i = await streamInfo();
        lastCluster = i.cluster;
        return i.cluster?.leader && i.cluster.replicas?.length === 2 && i.cluster.replicas.every((p) => p.current);
      },
      30000,
    ).catch((err) => {
      throw new Error(
        `${(err as Error).message}: ${JSON.stringify(lastCluster)}\n${victim.lines
          .filter((l) => /ERR|WRN|USAGE/.test(l))
          .slice(-20)
          .join('\n')}`,
      );
    });
    const caughtUpMs = Date.now() - restartedAt;

    const errorsByCode: Record<string, number> = {};
    for (const o of failed) {
      const key = o.kind === 'http_error' ? `http ${o.status} ${o.code}` : `stream ${o.code}`;
      errorsByCode[key] = (errorsByCode[key] ?? 0) + 1;
    }
    const report = {
      requests: N,
      completed: completed.length,
      clean_errors: failed.length,
      errors_by_code: errorsByCode,
      killed: { node: victim.name, was_usage_leader: true, processes_on_it: onVictim.map((p) => p.conn), after_ms: killedAt - t0 },
      reconnect_ms_per_process: reconnectMs,
      usage_publish_retries: retries.length,
      last_usage_publish_retry_ms_after_kill: retries.length ? Math.max(...retries) : null,
      all_processes_on_survivors_ms: allReconnectedMs,
      load_ended_ms_after_kill: loadEndedAt - killedAt,
      last_debit_ms_after_kill: ledgerSeen.lastDebitAt - killedAt,
      last_debit_ms_after_load_ended: ledgerSeen.lastDebitAt - loadEndedAt,
      debits: ledgerSeen.debits,
      no_open_holds_ms_after_kill: noHoldsMs,
      new_usage_leader: info.cluster?.leader,
      killed_node_restarted_and_current_ms: caughtUpMs,
    };
    console.log(`cluster failover: ${JSON.stringify(report, null, 2)}`);
  }, 180000);
});
