import { createLogger } from '../log.ts';
import { Door, type DoorOptions } from './door.ts';
import { registerRoutes } from './routes.ts';
import { App, closeListenSocket, localPort, type us_listen_socket } from './uws.ts';

const log = createLogger('gateway');

export interface GatewayOptions extends DoorOptions {
  host?: string;
  port?: number;
}

export interface Gateway {
  port: number;
  doorId: string;
  /** Stops accepting, waits for in-flight requests up to `graceMs`, then closes. */
  close(graceMs?: number): Promise<void>;
  stats(): { inFlight: number; requests: number; byStatus: Record<number, number> };
}

/** A front door: its parts (door.ts) behind its routes (routes.ts), listening. */
export async function startGateway(opts: GatewayOptions): Promise<Gateway> {
  const door = await Door.open(opts);
  const app = App();
  registerRoutes(app, door);
  const host = opts.host ?? opts.config.GATEWAY_HOST;
  const wantedPort = opts.port ?? opts.config.GATEWAY_PORT;
  const listenSocket = await new Promise<us_listen_socket>((resolve, reject) => {
    app.listen(host, wantedPort, (token) => (token ? resolve(token) : reject(new Error(`cannot listen on ${host}:${wantedPort}`))));
  });
  const port = localPort(listenSocket);
  log.info('front door listening', { door: door.id, host, port, metrics_port: door.metricsPort });
  return {
    port,
    doorId: door.id,
    stats: () => door.stats(),
    async close(graceMs = 30000) {
      door.draining = true;
      closeListenSocket(listenSocket);
      await door.close(graceMs);
    },
  };
}
