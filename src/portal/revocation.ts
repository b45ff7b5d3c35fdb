import type { NatsConnection } from 'nats';
import type pg from 'pg';
import { encode } from '../bus/messages.ts';
import { subjects } from '../bus/subjects.ts';
import type { Logger } from '../log.ts';
import { publishMade } from '../notify/bus.ts';
import type { NotifyEvent } from '../notify/events.ts';

// After a transaction that revoked keys has committed (the portal's revoke, a member's removal, a
// password reset that claims an unverified account): the front doors are told to drop the keys at
// once, and the key.revoked events made in that same transaction are published. Neither throws;
// an event not published here is published by the notifier's relay from the outbox.

export async function afterRevocation(
  d: { db: pg.Pool; nc: NatsConnection | null },
  keyIds: readonly string[],
  events: NotifyEvent[],
  log: Logger,
): Promise<void> {
  if (d.nc && keyIds.length > 0) {
    for (const keyId of keyIds) d.nc.publish(subjects.keyInvalidated, encode({ key_id: keyId }));
    await d.nc.flush().catch((err) => log.warn('nats flush after revocation failed', { err }));
  }
  await publishMade(d.db, d.nc, events, log);
}
