import { connect, type NatsConnection } from 'nats';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { ensureUsageStream } from '../../src/bus/usage-stream.ts';
import { NO_RESPONDERS, publishToStream, RequestMux, TIMEOUT } from '../../src/bus/requests.ts';

const url = () => process.env.NATS_URL ?? 'nats://127.0.0.1:4222';
let nc: NatsConnection;
beforeAll(async () => {
  nc = await connect({ servers: url() });
});
afterAll(async () => {
  await nc?.drain();
});

const enc = new TextEncoder();
const dec = new TextDecoder();

describe('RequestMux', () => {
  it('routes each reply to its caller, reports no responders and timeouts with shared errors', async () => {
    const mux = new RequestMux(nc, 20);
    const subject = `test.mux.${Date.now()}`;
    nc.subscribe(subject, { callback: (_e, m) => (m.data[0] === 0x73 ? undefined : m.respond(enc.encode(`re:${dec.decode(m.data)}`))) });
    await nc.flush();
    const replies = await Promise.all(Array.from({ length: 50 }, (_, i) => mux.request(subject, enc.encode(String(i)), 2000)));
    expect(replies.map((r) => dec.decode(r.data))).toEqual(Array.from({ length: 50 }, (_, i) => `re:${i}`));
    await expect(mux.request(`${subject}.nobody`, enc.encode('x'), 2000)).rejects.toBe(NO_RESPONDERS);
    const t0 = Date.now();
    await expect(mux.request(subject, enc.encode('silent'), 100)).rejects.toBe(TIMEOUT);
    expect(Date.now() - t0).toBeLessThan(1000);
    expect(mux.waiting).toBe(0);
    mux.close();
  });

  it('after a timeout, hands the late reply to onLate; a request never answered gets null when the mux closes', async () => {
    const mux = new RequestMux(nc, 20);
    const subject = `test.mux.late.${Date.now()}`;
    const held: Array<{ respond(d: Uint8Array): boolean }> = [];
    nc.subscribe(subject, { callback: (_e, m) => held.push(m) });
    await nc.flush();
    const late: Array<string | null> = [];
    const onLate = (m: { data: Uint8Array } | null) => late.push(m ? dec.decode(m.data) : null);
    const answered = mux.request(subject, enc.encode('a'), 100, undefined, onLate);
    const silent = mux.request(subject, enc.encode('b'), 100, undefined, onLate);
    await expect(answered).rejects.toBe(TIMEOUT);
    await expect(silent).rejects.toBe(TIMEOUT);
    held[0].respond(enc.encode('late ack'));
    await nc.flush();
    await new Promise((r) => setTimeout(r, 50));
    expect(late).toEqual(['late ack']);
    mux.close();
    expect(late).toEqual(['late ack', null]);
  });

  it('publishes to a JetStream stream once per message id (the duplicate window)', async () => {
    await ensureUsageStream(nc);
    const mux = new RequestMux(nc);
    const id = `req-mux-${Date.now()}`;
    const first = await publishToStream(mux, 'catraca.usage.muxtest', enc.encode('{}'), id, 5000);
    const again = await publishToStream(mux, 'catraca.usage.muxtest', enc.encode('{}'), id, 5000);
    expect(first.duplicate).toBe(false);
    expect(again).toEqual({ seq: first.seq, duplicate: true });
    mux.close();
  });
});
