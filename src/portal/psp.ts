import { readFileSync } from 'node:fs';
import type pg from 'pg';
import { BcbPixAdapter } from '../pix/bcb.ts';
import { deleteSettings, getOrCreateSecret, setSetting, SETTINGS } from '../pix/settings.ts';
import { startPixSimulator, type PixSimulator } from '../pix/simulator/server.ts';
import type { PspAdapter } from '../pix/types.ts';
import { SIMULATOR_PIX_KEY, type PortalEnv, type PortalSetup } from './config.ts';

// The portal's PSP: the BCB API Pix adapter against the real PSP, or against the built-in
// simulator (development, loopback only), or one the caller gives (tests).

export async function connectPsp(
  db: pg.Pool,
  env: PortalEnv,
  setup: PortalSetup,
  options: { pixAdapter?: PspAdapter; webhookSecret?: string },
): Promise<{ psp: PspAdapter; simulator: PixSimulator | null; webhookSecret: string }> {
  const webhookSecret = options.webhookSecret ?? env.PIX_WEBHOOK_SECRET ?? (await getOrCreateSecret(db, SETTINGS.webhookSecret));

  let simulator: PixSimulator | null = null;
  let psp: PspAdapter;
  if (options.pixAdapter) psp = options.pixAdapter;
  else if (setup.provider === 'simulator') {
    const clientId = 'catraca-portal';
    await setSetting(db, SETTINGS.simulatorClientId, clientId);
    const clientSecret = await getOrCreateSecret(db, SETTINGS.simulatorClientSecret);
    simulator = await startPixSimulator({
      host: env.PIX_SIM_HOST,
      port: env.PIX_SIM_PORT,
      clientId,
      clientSecret,
      merchantName: env.PIX_MERCHANT_NAME,
      merchantCity: env.PIX_MERCHANT_CITY,
    });
    await setSetting(db, SETTINGS.simulatorUrl, simulator.url);
    psp = new BcbPixAdapter({
      name: 'simulator',
      baseUrl: simulator.url,
      clientId,
      clientSecret,
      chave: env.PIX_KEY ?? SIMULATOR_PIX_KEY,
      webhookSecret,
      merchantName: env.PIX_MERCHANT_NAME,
      merchantCity: env.PIX_MERCHANT_CITY,
    });
  } else if (setup.provider === 'bcb') {
    // A real PSP: forget any simulator an earlier development portal recorded, so that
    // `catraca pix pay` has nothing to talk to.
    await deleteSettings(db, [SETTINGS.simulatorUrl, SETTINGS.simulatorClientId, SETTINGS.simulatorClientSecret]);
    const b = setup.bcb;
    psp = new BcbPixAdapter({
      baseUrl: b.apiUrl,
      oauthUrl: b.oauthUrl,
      clientId: b.clientId,
      clientSecret: b.clientSecret,
      chave: b.chave,
      webhookSecret,
      merchantName: env.PIX_MERCHANT_NAME,
      merchantCity: env.PIX_MERCHANT_CITY,
      tls: { cert: readFileSync(b.certFile), key: readFileSync(b.keyFile), ca: b.caFile ? readFileSync(b.caFile) : undefined },
    });
  } else throw new Error('unreachable: a custom setup comes with options.pixAdapter');
  return { psp, simulator, webhookSecret };
}
