import { randomBytes } from 'node:crypto';
import type { DbClient } from '../db/pool.ts';

// Per-installation settings and secrets kept in portal_settings. Values are secrets: never log them.
export const SETTINGS = {
  webhookSecret: 'pix.webhook_secret',
  simulatorUrl: 'pix.simulator.url',
  simulatorClientId: 'pix.simulator.client_id',
  simulatorClientSecret: 'pix.simulator.client_secret',
} as const;

export async function getSetting(db: DbClient, name: string): Promise<string | null> {
  const { rows } = await db.query('select value from portal_settings where name = $1', [name]);
  return rows[0]?.value ?? null;
}

export async function setSetting(db: DbClient, name: string, value: string): Promise<void> {
  await db.query(
    `insert into portal_settings (name, value) values ($1, $2)
     on conflict (name) do update set value = excluded.value, updated_at = now()`,
    [name, value],
  );
}

export async function deleteSettings(db: DbClient, names: string[]): Promise<void> {
  await db.query('delete from portal_settings where name = any($1)', [names]);
}

/** Returns the stored value, creating a random one (256 bits, hex) on first use; race-safe. */
export async function getOrCreateSecret(db: DbClient, name: string): Promise<string> {
  await db.query('insert into portal_settings (name, value) values ($1, $2) on conflict (name) do nothing', [name, randomBytes(32).toString('hex')]);
  return (await getSetting(db, name))!;
}
