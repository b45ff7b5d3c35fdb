import { connect, createServer, type Socket } from 'node:net';
import type { Msg, NatsConnection } from 'nats';
import { afterEach, describe, expect, it } from 'vitest';
import { RequestMux, TIMEOUT } from './requests.ts';

// A connection whose replies come through a real socket (so they wait for the event loop's poll
// phase, as NATS replies do): the responder answers at once, the reply sits in the socket.
async function socketBus(): Promise<{ nc: NatsConnection; close(): void }> {
  const server = createServer();
  await new Promise<void>((r) => server.listen(0, '127.0.0.1', r));
  const port = (server.address() as { port: number }).port;
  const accepted = new Promise<Socket>((r) => server.once('connection', r));
  const reader = connect(port, '127.0.0.1');
  await new Promise((r) => reader.once('connect', r));
  const writer = await accepted;
  let callback: ((err: null, m: Msg) => void) | undefined;
  reader.on('data', (buf) => {
    for (const subject of buf.toString().split('\n').filter(Boolean)) callback?.(null, { subject, data: new TextEncoder().encode('ack') } as Msg);
  });
  const nc = {
    subscribe: (_s: string, o: { callback: (err: null, m: Msg) => void }) => {
      callback = o.callback;
      return { unsubscribe() {} };
    },
    publish: (_s: string, _d: Uint8Array, o: { reply: string }) => writer.write(`${o.reply}\n`),
  } as unknown as NatsConnection;
  return {
    nc,
    close: () => {
      reader.destroy();
      writer.destroy();
      server.close();
    },
  };
}

const closers: Array<() => void> = [];
afterEach(() => {
  for (const c of closers.splice(0)) c();
});

describe('RequestMux under a lagging event loop', () => {
  it('a reply already in the socket when the loop wakes past the deadline is the answer, not a timeout', async () => {
    const bus = await socketBus();
    closers.push(bus.close);
    const mux = new RequestMux(bus.nc, 20);
    closers.push(() => mux.close());
    const reply = mux.request('job', new Uint8Array(), 100);
    // blocked past the deadline while the reply arrives
    const until = Date.now() + 300;
    while (Date.now() < until) {
      /* an overloaded door */
    }
    expect(new TextDecoder().decode((await reply).data)).toBe('ack');
  });

  it('a reply that never comes is still a timeout', async () => {
    const bus = await socketBus();
    closers.push(bus.close);
    const mux = new RequestMux({ ...bus.nc, publish: () => {} } as unknown as NatsConnection, 20);
    closers.push(() => mux.close());
    await expect(mux.request('job', new Uint8Array(), 50)).rejects.toBe(TIMEOUT);
  });
});
