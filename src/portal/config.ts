import { accessSync, constants } from 'node:fs';
import { loadConfig, type PortalEnvSchema } from '../config.ts';
import type { z } from 'zod';
import { isLoopbackHost } from '../web/proxy.ts';

// Portal and Pix settings (environment). Documented in docs/operations.md (configuration) and .env.example.
// Nothing defaults to the simulator: PIX_PROVIDER must be given (bcb with a complete
// configuration), unless CATRACA_DEV=1 (what `npm start` sets) asks for the development setup —
// the built-in PSP simulator and its "pay" button, on a loopback address only.
export type PortalEnv = z.infer<typeof PortalEnvSchema>;

/** The portal's settings out of an environment (the same schema as every process's, src/config.ts). */
export function loadPortalEnv(env: Record<string, string | undefined> = process.env): PortalEnv {
  return loadConfig(env);
}

export const SIMULATOR_PIX_KEY = 'catraca-simulador@example.com';
/** The simulator's receiver account for Pix Automático charges (PIX_ACCOUNT_* override it). */
export const SIMULATOR_ACCOUNT = { agencia: '0001', conta: '1234567', tipoConta: 'CORRENTE' } as const;

/**
 * The account recurring charges pay into: PIX_ACCOUNT_AGENCY, _NUMBER and _TYPE, all three or
 * none; none with the simulator is its own account, none with a real PSP turns recurring top-ups off.
 */
export function receiverAccount(
  env: Pick<PortalEnv, 'PIX_ACCOUNT_AGENCY' | 'PIX_ACCOUNT_NUMBER' | 'PIX_ACCOUNT_TYPE'>,
  provider: 'simulator' | 'bcb' | 'custom',
): { agencia: string; conta: string; tipoConta: 'CORRENTE' | 'POUPANCA' | 'PAGAMENTO' } | null {
  const given = [env.PIX_ACCOUNT_AGENCY, env.PIX_ACCOUNT_NUMBER, env.PIX_ACCOUNT_TYPE].filter((v) => v !== undefined).length;
  if (given === 3) return { agencia: env.PIX_ACCOUNT_AGENCY!, conta: env.PIX_ACCOUNT_NUMBER!, tipoConta: env.PIX_ACCOUNT_TYPE! };
  if (given > 0)
    throw new PortalConfigError('PIX_ACCOUNT_AGENCY, PIX_ACCOUNT_NUMBER and PIX_ACCOUNT_TYPE go together (the account Pix Automático charges pay into)');
  return provider === 'bcb' ? null : { ...SIMULATOR_ACCOUNT };
}

/** A startup refusal: the message says what to set. */
export class PortalConfigError extends Error {
  constructor(message: string) {
    super(message);
    this.name = 'PortalConfigError';
  }
}

/** Where the portal listens when PORTAL_HOST is not set: loopback in development, all interfaces otherwise. */
export function defaultPortalHost(env: Pick<PortalEnv, 'CATRACA_DEV' | 'PIX_PROVIDER'>): string {
  return env.CATRACA_DEV || env.PIX_PROVIDER === 'simulator' ? '127.0.0.1' : '0.0.0.0';
}

export interface BcbSettings {
  apiUrl: string;
  oauthUrl: string;
  clientId: string;
  clientSecret: string;
  chave: string;
  certFile: string;
  keyFile: string;
  caFile?: string;
}

export type PortalSetup =
  | { provider: 'simulator'; devMode: boolean }
  | { provider: 'bcb'; devMode: false; bcb: BcbSettings }
  | { provider: 'custom'; devMode: boolean };

const fileProblem = (name: string, path: string | undefined): string | null => {
  if (!path) return `${name} is not set`;
  try {
    accessSync(path, constants.R_OK);
    return null;
  } catch {
    return `${name}=${path} cannot be read`;
  }
};
const httpsProblem = (name: string, url: string | undefined): string | null => {
  if (!url) return `${name} is not set`;
  try {
    return new URL(url).protocol === 'https:' ? null : `${name} must be an https:// URL (the BCB API Pix runs over TLS)`;
  } catch {
    return `${name} is not a URL`;
  }
};

/**
 * Decides the PSP and dev mode, or refuses to start (PortalConfigError) with a message naming
 * what to set: no PIX_PROVIDER without CATRACA_DEV=1; bcb only with a complete configuration;
 * the simulator and dev mode (a button that credits up to R$ 5.000,00 for free) only when the
 * portal and the simulator listen on a loopback address.
 */
export function resolvePortalSetup(env: PortalEnv, o: { host: string; adapterGiven?: boolean; devMode?: boolean }): PortalSetup {
  const devEnv = env.PORTAL_DEV_MODE === undefined ? undefined : ['1', 'true'].includes(env.PORTAL_DEV_MODE);
  let setup: PortalSetup;
  if (o.adapterGiven) {
    setup = { provider: 'custom', devMode: o.devMode ?? devEnv ?? false };
  } else {
    const provider = env.PIX_PROVIDER ?? (env.CATRACA_DEV ? 'simulator' : undefined);
    if (!provider) {
      throw new PortalConfigError(
        'PIX_PROVIDER is not set. In production set PIX_PROVIDER=bcb with PIX_API_URL, PIX_OAUTH_URL, PIX_CLIENT_ID, ' +
          'PIX_CLIENT_SECRET, PIX_KEY, PIX_CERT_FILE and PIX_CERT_KEY_FILE (see .env.example). For local development run ' +
          '`npm start`, or set CATRACA_DEV=1 (the built-in Pix simulator, on 127.0.0.1 only).',
      );
    }
    if (provider === 'bcb') {
      const problems = [
        httpsProblem('PIX_API_URL', env.PIX_API_URL),
        httpsProblem('PIX_OAUTH_URL', env.PIX_OAUTH_URL),
        env.PIX_CLIENT_ID ? null : 'PIX_CLIENT_ID is not set',
        env.PIX_CLIENT_SECRET ? null : 'PIX_CLIENT_SECRET is not set',
        env.PIX_KEY ? null : 'PIX_KEY (our Pix key, the chave that receives the charges) is not set',
        fileProblem('PIX_CERT_FILE', env.PIX_CERT_FILE),
        fileProblem('PIX_CERT_KEY_FILE', env.PIX_CERT_KEY_FILE),
        env.PIX_CA_FILE ? fileProblem('PIX_CA_FILE', env.PIX_CA_FILE) : null,
      ].filter((x): x is string => x !== null);
      if (problems.length)
        throw new PortalConfigError(`PIX_PROVIDER=bcb needs a complete BCB API Pix configuration: ${problems.join('; ')} (see .env.example)`);
      if (o.devMode || devEnv)
        throw new PortalConfigError('PORTAL_DEV_MODE=1 needs PIX_PROVIDER=simulator: the pay button pays at the built-in simulator only');
      setup = {
        provider: 'bcb',
        devMode: false,
        bcb: {
          apiUrl: env.PIX_API_URL!.replace(/\/+$/, ''),
          oauthUrl: env.PIX_OAUTH_URL!,
          clientId: env.PIX_CLIENT_ID!,
          clientSecret: env.PIX_CLIENT_SECRET!,
          chave: env.PIX_KEY!,
          certFile: env.PIX_CERT_FILE!,
          keyFile: env.PIX_CERT_KEY_FILE!,
          caFile: env.PIX_CA_FILE,
        },
      };
    } else {
      setup = { provider: 'simulator', devMode: o.devMode ?? devEnv ?? true };
      if (!isLoopbackHost(env.PIX_SIM_HOST)) {
        throw new PortalConfigError(`PIX_SIM_HOST=${env.PIX_SIM_HOST}: the Pix simulator listens on a loopback address only (127.0.0.1, ::1, localhost)`);
      }
    }
  }
  if ((setup.provider === 'simulator' || setup.devMode) && !isLoopbackHost(o.host)) {
    throw new PortalConfigError(
      `the portal would listen on ${o.host} with ${setup.provider === 'simulator' ? 'the Pix simulator' : 'dev mode'}: anyone who can reach it could ` +
        'credit themselves up to R$ 5.000,00 per click, spent on the real vendor keys. The simulator and dev mode run on a loopback ' +
        'address only: set PORTAL_HOST=127.0.0.1, or PIX_PROVIDER=bcb (with its configuration) in production.',
    );
  }
  return setup;
}
