import { z } from 'zod';

// Every process reads its settings from the environment through this one schema, so the
// defaults documented in the README live in exactly one place.
const int = (def: number) => z.coerce.number().int().nonnegative().default(def);

export const ConfigSchema = z.object({
  NATS_URL: z.string().default('nats://127.0.0.1:4222'),
  DATABASE_URL: z.string().default('postgres://postgres@127.0.0.1:5432/catraca'),
  GATEWAY_HOST: z.string().default('0.0.0.0'),
  GATEWAY_PORT: int(8080),
  PORTAL_HOST: z.string().default('0.0.0.0'),
  PORTAL_PORT: int(8081),
  /** Largest accepted request body; larger gets 413. */
  MAX_BODY_BYTES: int(4 * 1024 * 1024),
  /** Interval of `: processing` SSE comments (and keepalive frames) while no token has arrived. */
  KEEPALIVE_MS: int(2000),
  /** No frame from the worker for this long → the request fails with 504. Workers send a keepalive
   * frame whenever a stream is quiet for KEEPALIVE_MS, so this detects a dead worker. */
  STREAM_IDLE_TIMEOUT_MS: int(15000),
  /** Per-request SSE bytes buffered for a slow client before the request is cancelled. */
  MAX_CLIENT_BUFFER_BYTES: int(1024 * 1024),
  /** Whole-request ceiling; the hold expires after this plus HOLD_GRACE_MS. */
  REQUEST_TIMEOUT_MS: int(10 * 60 * 1000),
  HOLD_GRACE_MS: int(5 * 60 * 1000),
  HOLD_SWEEP_INTERVAL_MS: int(10000),
  /** SIGTERM: how long the front door waits for in-flight streams before exiting. */
  DRAIN_TIMEOUT_MS: int(30000),
  /** Portal address the front door names in 402 messages ("Top up at …"). */
  PORTAL_PUBLIC_URL: z.string().url().optional(),
  /** Key records cached in each front door; revocation is pushed over NATS, this bounds staleness otherwise. */
  KEY_CACHE_TTL_MS: int(30000),
  WORKER_POOLS: z.string().default('sim'),
  WORKER_CONCURRENCY: int(512),
  UPSTREAM_TIMEOUT_MS: int(120000),
  UPSTREAM_CONNECT_TIMEOUT_MS: int(10000),
  SIM_FIRST_TOKEN_MS: int(0),
  SIM_TOKENS_PER_SECOND: int(0),
  /** Usage messages settled per PostgreSQL transaction, at most (batches form under load). */
  METERING_BATCH: int(128),
  /** Unacked usage (its metering process died) is redelivered after this long. */
  METERING_ACK_WAIT_MS: int(10000),
  LOG_LEVEL: z.enum(['debug', 'info', 'warn', 'error', 'silent']).default('info'),
  CATRACA_INSTANCE: z.string().optional(),
});

export type Config = z.infer<typeof ConfigSchema>;

export function loadConfig(env: Record<string, string | undefined> = process.env): Config {
  const parsed = ConfigSchema.safeParse(env);
  if (!parsed.success) {
    const issues = parsed.error.issues.map((i) => `${i.path.join('.')}: ${i.message}`).join('; ');
    throw new Error(`invalid configuration: ${issues}`);
  }
  return parsed.data;
}
