import type { NatsConnection } from 'nats';
import { encode } from '../bus/messages.ts';
import { createLogger } from '../log.ts';

const log = createLogger('console');

/**
 * Tells every front door (and worker) what changed, as the CLI does: a suspended tenant, a revoked
 * key, a catalog entry. The database is what counts (admission re-reads it); without NATS the
 * doors learn it later (leases within ADMISSION_LEASE_MS, keys within KEY_CACHE_TTL_MS, the
 * catalog within 5 s), so a failure is a warning for the page, never an error.
 */
export async function broadcast(nc: NatsConnection | null, subject: string, body: unknown): Promise<boolean> {
  if (!nc || nc.isClosed()) return false;
  try {
    nc.publish(subject, encode(body));
    await nc.flush();
    return true;
  } catch (err) {
    log.warn('console: NATS broadcast failed', { subject, err });
    return false;
  }
}
