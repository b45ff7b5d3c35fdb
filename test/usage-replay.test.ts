import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { AckPolicy, connect, type NatsConnection } from 'nats';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { USAGE_LOG_STREAM, USAGE_STREAM, subjects } from '../src/bus/subjects.ts';
import { ensureUsageLog, journalUsage } from '../src/bus/usage-log.ts';
import { ensureUsageStream } from '../src/bus/usage-stream.ts';
import { ensureNats, type ServiceHandle } from '../src/stack/services.ts';
import { cli } from './helpers/cli.ts';

// `catraca usage replay --since TIME` (src/bus/usage-log.ts): what it puts back on USAGE, what it
// says when USAGE_LOG does not reach back far enough, and what it refuses. The drill that uses it
// after a real restore is test/backup-restore.test.ts.

let dir: string;
let nats: ServiceHandle;
let nc: NatsConnection;
/** between the first copy and the next two (test 2) */
let since: Date;

beforeAll(async () => {
  dir = mkdtempSync(join(tmpdir(), 'catraca-replay-'));
  nats = await ensureNats({ dataDir: dir });
  nc = await connect({ servers: nats.url });
  await ensureUsageStream(nc, { replicas: 1, maxBytes: 64 * 1024 * 1024 });
  await ensureUsageLog(nc, { replicas: 1, retentionDays: 8, maxBytes: 64 * 1024 * 1024 });
}, 30_000);

afterAll(async () => {
  await nc?.close();
  await nats?.stop();
  rmSync(dir, { recursive: true, force: true });
});

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

describe('catraca usage replay', () => {
  it('refuses a missing or zone-less --since with exit 2, before touching NATS', async () => {
    const none = await cli(['usage', 'replay'], { NATS_URL: nats.url });
    expect(none.code).toBe(2);
    expect(none.stderr).toContain('--since is required');
    const local = await cli(['usage', 'replay', '--since', '2026-11-27T21:00:00'], { NATS_URL: nats.url });
    expect(local.code).toBe(2);
    expect(local.stderr).toContain('is not an ISO date-time with its zone');
  }, 60_000);

  it('puts the copies settled since TIME back on USAGE, with their pools and bytes; earlier ones stay out', async () => {
    const js = nc.jetstream();
    const jsm = await nc.jetstreamManager();
    // metering's journal: a settled message from USAGE, copied with its own msgID
    await js.publish(subjects.usage('sim'), new TextEncoder().encode('{"old":1}'), { msgID: 'req-old' });
    const consumer = await jsm.consumers.add(USAGE_STREAM, { name: 'test', ack_policy: AckPolicy.Explicit, filter_subject: subjects.usageWildcard });
    const c = await js.consumers.get(USAGE_STREAM, consumer.name);
    const settled = await c.next({ expires: 2000 });
    await journalUsage(nc, [settled!]);
    settled!.ack();
    await sleep(1100);
    since = new Date();
    await sleep(50);
    await js.publish(subjects.usageLog('openai'), new TextEncoder().encode('{"new":1}'), { msgID: 'req-new-1' });
    await js.publish(subjects.usageLog('sim'), new TextEncoder().encode('{"new":2}'), { msgID: 'req-new-2' });
    expect((await jsm.streams.info(USAGE_LOG_STREAM)).state.messages).toBe(3);
    await jsm.consumers.delete(USAGE_STREAM, consumer.name);
    await sleep(200);
    expect((await jsm.streams.info(USAGE_STREAM)).state.messages).toBe(0); // work queue: the ack removed it

    const r = await cli(['usage', 'replay', '--since', since.toISOString(), '--json'], { NATS_URL: nats.url });
    expect(r.code).toBe(0);
    expect(r.json).toMatchObject({ replayed: 2, first_seq: 2, last_seq: 3, covered: true });
    const back = await jsm.streams.info(USAGE_STREAM);
    expect(back.state.messages).toBe(2);
    const first = await jsm.streams.getMessage(USAGE_STREAM, { seq: back.state.first_seq });
    const second = await jsm.streams.getMessage(USAGE_STREAM, { seq: back.state.last_seq });
    expect([first.subject, new TextDecoder().decode(first.data), first.header.get('Nats-Msg-Id')]).toEqual(['catraca.usage.openai', '{"new":1}', 'replay-2']);
    expect([second.subject, new TextDecoder().decode(second.data)]).toEqual(['catraca.usage.sim', '{"new":2}']);
    // the same replay again inside USAGE's duplicate window adds nothing
    const again = await cli(['usage', 'replay', '--since', since.toISOString(), '--json'], { NATS_URL: nats.url });
    expect(again.json).toMatchObject({ replayed: 2 });
    expect((await jsm.streams.info(USAGE_STREAM)).state.messages).toBe(2);
    await jsm.streams.purge(USAGE_STREAM);
  }, 90_000);

  it('exit 1, covered: false, when USAGE_LOG has dropped copies and its oldest left is younger than TIME', async () => {
    const jsm = await nc.jetstreamManager();
    // as when retention or bytes drop the oldest: what went may have been settled after TIME
    await jsm.streams.deleteMessage(USAGE_LOG_STREAM, 1);
    const r = await cli(['usage', 'replay', '--since', since.toISOString(), '--json'], { NATS_URL: nats.url });
    expect(r.code).toBe(1);
    expect(r.json).toMatchObject({ covered: false, replayed: 2 });
    await jsm.streams.purge(USAGE_STREAM);
  }, 60_000);
});
