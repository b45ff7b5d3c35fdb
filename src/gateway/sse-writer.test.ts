import { afterAll, describe, expect, it } from 'vitest';
import net from 'node:net';
import { App, closeListenSocket, localPort, type us_listen_socket } from './uws.ts';
import { SseWriter } from './sse-writer.ts';

// A real uWS server and a real client socket that stops reading: the writer must stop handing
// data to uWS, queue at most its limit, and then give up on the client (onOverflow).
const LIMIT = 64 * 1024;
const CHUNK = `data: ${'x'.repeat(1018)}\n\n`; // 1 KiB
let listen: us_listen_socket | undefined;

afterAll(() => {
  if (listen) closeListenSocket(listen);
});

function serve(onDone: (r: { written: number; queuedAtOverflow: number; overflowed: boolean }) => void): Promise<number> {
  const app = App().get('/sse', (res) => {
    let aborted = false;
    let written = 0;
    let overflowed = false;
    res.onAborted(() => (aborted = true));
    res.writeStatus('200 OK').writeHeader('content-type', 'text/event-stream');
    const writer = new SseWriter(res, LIMIT, () => {
      overflowed = true;
      onDone({ written, queuedAtOverflow: writer.queued, overflowed });
      res.close();
    });
    const pump = () => {
      // up to 200 MiB, far more than any socket buffer, unless the writer gives up first
      for (let i = 0; i < 64 && !overflowed && !aborted && written < 200 * 1024 * 1024; i++) {
        writer.write(CHUNK);
        written += CHUNK.length;
      }
      if (!overflowed && !aborted && written < 200 * 1024 * 1024) setImmediate(pump);
      else if (!overflowed) onDone({ written, queuedAtOverflow: -1, overflowed });
    };
    pump();
  });
  return new Promise((resolve) =>
    app.listen('127.0.0.1', 0, (token) => {
      listen = token;
      resolve(localPort(token));
    }),
  );
}

describe('SseWriter backpressure', () => {
  it('a client that stops reading is cut off after the limit; memory stays bounded', async () => {
    let done!: (r: { written: number; queuedAtOverflow: number; overflowed: boolean }) => void;
    const result = new Promise<{ written: number; queuedAtOverflow: number; overflowed: boolean }>((r) => (done = r));
    const port = await serve((r) => done(r));
    const rssBefore = process.memoryUsage().rss;
    const client = net.connect(port, '127.0.0.1', () => {
      client.write('GET /sse HTTP/1.1\r\nHost: x\r\n\r\n');
      client.pause(); // never read
    });
    const r = await result;
    client.destroy();
    expect(r.overflowed).toBe(true);
    // only the limit (plus the chunk that crossed it) was ever queued in JS
    expect(r.queuedAtOverflow).toBeLessThanOrEqual(LIMIT + CHUNK.length);
    // kernel socket buffers absorb a few MiB at most; nothing near the 200 MiB offered
    expect(r.written).toBeLessThan(32 * 1024 * 1024);
    expect(process.memoryUsage().rss - rssBefore).toBeLessThan(64 * 1024 * 1024);
  });
});

describe('SseWriter first write', () => {
  it('sends the status, the headers and the first chunk in one write', async () => {
    let second!: () => void;
    const app = App().get('/first', (res) => {
      let aborted = false;
      res.onAborted(() => (aborted = true));
      const writer = new SseWriter(res, LIMIT, () => {});
      writer.write('data: first\n\n', () => {
        res.writeStatus('200 OK');
        res.writeHeader('content-type', 'text/event-stream');
        res.writeHeader('x-first', 'yes');
      });
      second = () => {
        if (!aborted) writer.end('data: last\n\n');
      };
    });
    let token!: us_listen_socket;
    const port = await new Promise<number>((resolve) =>
      app.listen('127.0.0.1', 0, (t) => {
        token = t;
        resolve(localPort(t));
      }),
    );
    const reads: string[] = [];
    const client = net.connect(port, '127.0.0.1', () => client.write('GET /first HTTP/1.1\r\nHost: x\r\n\r\n'));
    client.on('data', (d) => reads.push(d.toString('latin1')));
    await new Promise((r) => setTimeout(r, 100));
    // one send: the first read holds the status line, the headers and the first chunk
    expect(reads.length).toBe(1);
    expect(reads[0]).toMatch(/^HTTP\/1\.1 200 OK\r\n/);
    expect(reads[0]).toContain('x-first: yes\r\n');
    expect(reads[0]).toContain('content-type: text/event-stream\r\n');
    expect(reads[0]!.endsWith('data: first\n\n')).toBe(true);
    second();
    await new Promise((r) => setTimeout(r, 100));
    client.destroy();
    closeListenSocket(token);
    expect(reads.join('')).toContain('data: last\n\n');
  });
});
