import type { NatsConnection } from 'nats';
import type { Db } from '../db/pool.ts';
import { createLogger } from '../log.ts';
import { SefinClient } from './client.ts';
import { Issuer, type IssuerOptions } from './issuer.ts';
import { loadNfseSetup, type NfseEnv, type NfseSetup } from './settings.ts';
import { type SefinSimulator, startSefinSimulator } from './simulator/server.ts';

// NFS-e issuing in a portal process: the settings (NFSE_*), the Sefin client — of Sefin Nacional
// at NFSE_URL, or of the built-in simulator started here on loopback (NFSE_PROVIDER=simulator,
// what `npm start` sets, trusting the operator's certificate for mTLS) — and the issuer.

const log = createLogger('nfse');

export interface NfseService {
  setup: NfseSetup;
  issuer: Issuer;
  client: SefinClient;
  simulator: SefinSimulator | null;
  stop(): Promise<void>;
}

export type IssuerTuning = Pick<IssuerOptions, 'retryMs' | 'relayIntervalMs' | 'sweepIntervalMs' | 'leaseMs'>;

/** Starts issuing, or returns null when NFSE_PROVIDER is off. Throws NfseConfigError on settings that cannot issue. */
export async function startNfse(o: {
  db: Db;
  nc: NatsConnection | null;
  env: NfseEnv;
  site: { url: string };
  /** settings to use instead of the environment's (tests) */
  setup?: NfseSetup | null;
  tuning?: IssuerTuning;
}): Promise<NfseService | null> {
  const setup = o.setup !== undefined ? o.setup : loadNfseSetup(o.env);
  if (!setup) return null;
  let simulator: SefinSimulator | null = null;
  let baseUrl = setup.baseUrl;
  let ca = setup.ca;
  if (setup.provider === 'simulator') {
    simulator = await startSefinSimulator({ trustedClients: [setup.cert.certPem], ambiente: setup.prestador.ambiente });
    baseUrl = simulator.url;
    ca = [...ca, simulator.caPem];
    log.info('sefin simulator running', { url: simulator.url });
  }
  const client = new SefinClient({ baseUrl: baseUrl!, cert: setup.cert, ca });
  const issuer = new Issuer({
    db: o.db,
    nc: o.nc,
    client,
    cert: setup.cert,
    prestador: setup.prestador,
    emitOn: setup.emitOn,
    cancelDays: setup.cancelDays,
    site: o.site,
    ...o.tuning,
  });
  await issuer.start();
  const service: NfseService = {
    setup: { ...setup, baseUrl, ca },
    issuer,
    client,
    simulator,
    async stop() {
      // the issuer of the moment (a test may have replaced it)
      await service.issuer.stop();
      await client.close();
      await simulator?.close();
    },
  };
  return service;
}
