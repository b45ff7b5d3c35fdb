import { z } from 'zod';

// Portal and Pix settings (environment). Documented in the README; defaults give the embedded
// development setup: the built-in PSP simulator, dev mode on.
const bool = (def: boolean) =>
  z.preprocess((v) => (v === undefined || v === '' ? def : ['1', 'true', 'yes', 'on'].includes(String(v).toLowerCase())), z.boolean());

export const PortalEnvSchema = z.object({
  PORTAL_PUBLIC_URL: z.string().url().optional(),
  GATEWAY_PUBLIC_URL: z.string().default('http://127.0.0.1:8080/v1'),
  /** Trust X-Forwarded-For / X-Forwarded-Proto from the reverse proxy in front of the portal. */
  PORTAL_TRUST_PROXY: bool(false),
  /** auto: Secure cookies when the request came over TLS (directly or via a trusted proxy). */
  PORTAL_SECURE_COOKIES: z.enum(['auto', 'true', 'false']).default('auto'),
  /** Dev mode shows the "pay with the simulator" button. Defaults to on with the simulator only. */
  PORTAL_DEV_MODE: z.enum(['1', '0', 'true', 'false']).optional(),
  PIX_PROVIDER: z.enum(['simulator', 'bcb']).default('simulator'),
  /** BCB API Pix of the PSP, e.g. https://api.psp.example/v2 */
  PIX_API_URL: z.string().url().optional(),
  PIX_OAUTH_URL: z.string().url().optional(),
  PIX_CLIENT_ID: z.string().optional(),
  PIX_CLIENT_SECRET: z.string().optional(),
  /** Our Pix key (chave) that receives the charges. */
  PIX_KEY: z.string().default('catraca-simulador@example.com'),
  /** mTLS with the PSP: PEM files of the certificate it issued us. */
  PIX_CERT_FILE: z.string().optional(),
  PIX_CERT_KEY_FILE: z.string().optional(),
  PIX_CA_FILE: z.string().optional(),
  PIX_MERCHANT_NAME: z.string().default('CATRACA'),
  PIX_MERCHANT_CITY: z.string().default('SAO PAULO'),
  /** Secret in the webhook URL; generated once per installation and kept in portal_settings when unset. */
  PIX_WEBHOOK_SECRET: z.string().min(16).optional(),
  /** Public base URL the PSP calls back (…/webhooks/pix/<secret>/pix); defaults to PORTAL_PUBLIC_URL or the portal's own URL. */
  PIX_WEBHOOK_BASE_URL: z.string().url().optional(),
  PIX_SIM_HOST: z.string().default('127.0.0.1'),
  PIX_SIM_PORT: z.coerce.number().int().nonnegative().default(0),
  PIX_CHARGE_EXPIRY_S: z.coerce.number().int().positive().default(3600),
  PIX_RECONCILE_INTERVAL_MS: z.coerce.number().int().nonnegative().default(30000),
});
export type PortalEnv = z.infer<typeof PortalEnvSchema>;

export function loadPortalEnv(env: Record<string, string | undefined> = process.env): PortalEnv {
  const parsed = PortalEnvSchema.safeParse(env);
  if (!parsed.success) throw new Error(`invalid portal configuration: ${parsed.error.issues.map((i) => `${i.path.join('.')}: ${i.message}`).join('; ')}`);
  return parsed.data;
}
