import { connect, createServer, type Server, type Socket } from 'node:net';

// A TCP load balancer in front of several front doors, as an operator runs one (HAProxy's `mode
// tcp` with `option httpchk GET /healthz`; docs/operations.md, "Rolling restart"): one address,
// each client connection piped to a healthy door, round-robin. A door is healthy while its
// `/healthz` answers 200 (checked every `checkMs`); a draining door answers 503 and gets no new
// connection. A door that refuses the connection (its listen socket is closed) is skipped at once
// and the next healthy one tried: nothing was sent, so that is always safe.

export interface Balancer {
  port: number;
  url: string;
  /** Adds a backend (127.0.0.1:port); it takes connections once its /healthz has answered 200. */
  add(port: number): void;
  remove(port: number): void;
  /** Backends whose last check answered 200. */
  healthy(): number[];
  /** Client connections no backend would take (closed unanswered). */
  readonly unrouted: number;
  close(): Promise<void>;
}

interface Backend {
  port: number;
  up: boolean;
  /** health checks in a row that got no answer */
  failed: number;
}

const FALL = 3;

export async function startBalancer(ports: number[] = [], checkMs = 200): Promise<Balancer> {
  const backends: Backend[] = [];
  const clients = new Set<Socket>();
  let next = 0;
  let unrouted = 0;
  let closed = false;

  // A door that answers anything but 200 (503 while draining) is out at once; one that does not
  // answer in time is out after FALL checks in a row (HAProxy's `fall 3`): on a busy machine one
  // slow check is not a door going away. A refused connection takes it out at once (route below).
  const check = async (b: Backend) => {
    try {
      const res = await fetch(`http://127.0.0.1:${b.port}/healthz`, { signal: AbortSignal.timeout(1000), headers: { connection: 'close' } });
      await res.arrayBuffer();
      b.up = res.status === 200;
      b.failed = 0;
    } catch {
      if (++b.failed >= FALL) b.up = false;
    }
  };
  const timer = setInterval(() => {
    for (const b of backends) void check(b);
  }, checkMs);

  const route = (client: Socket, tried: Set<number>) => {
    const up = backends.filter((b) => b.up && !tried.has(b.port));
    if (up.length === 0 || closed) {
      unrouted++;
      client.destroy();
      return;
    }
    const b = up[next++ % up.length];
    tried.add(b.port);
    const upstream = connect({ host: '127.0.0.1', port: b.port });
    let connected = false;
    upstream.once('connect', () => {
      connected = true;
      upstream.setNoDelay(true);
      client.pipe(upstream);
      upstream.pipe(client);
      client.resume();
    });
    upstream.on('error', () => {
      if (!connected) {
        b.up = false; // refused: it is going away; the next check says when it is back
        route(client, tried);
      } else client.destroy();
    });
    upstream.on('close', () => {
      if (connected) client.end();
    });
    client.on('close', () => upstream.destroy());
  };

  const server: Server = createServer({ pauseOnConnect: true }, (client) => {
    clients.add(client);
    client.setNoDelay(true);
    client.on('error', () => {});
    client.on('close', () => clients.delete(client));
    route(client, new Set());
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  const port = (server.address() as { port: number }).port;

  const balancer: Balancer = {
    port,
    url: `http://127.0.0.1:${port}/v1`,
    add(p) {
      const b = { port: p, up: false, failed: 0 };
      backends.push(b);
      void check(b);
    },
    remove(p) {
      const i = backends.findIndex((b) => b.port === p);
      if (i >= 0) backends.splice(i, 1);
    },
    healthy: () => backends.filter((b) => b.up).map((b) => b.port),
    get unrouted() {
      return unrouted;
    },
    async close() {
      closed = true;
      clearInterval(timer);
      for (const c of clients) c.destroy();
      await new Promise<void>((resolve) => server.close(() => resolve()));
    },
  };
  for (const p of ports) balancer.add(p);
  return balancer;
}
