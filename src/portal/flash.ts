// One-time, server-side messages of a session (Post/Redirect/Get). A flash is written by a POST,
// named in the redirect (`?created=<id>`), and deleted by the GET that shows it: a refresh or a
// second GET finds nothing. The payload is encrypted with AES-256-GCM under a key derived from
// the session's cookie token (only its SHA-256 is stored), so the table alone reveals nothing.
import { createCipheriv, createDecipheriv, createHmac, randomBytes } from 'node:crypto';
import type { DbClient } from '../db/pool.ts';

export const FLASH_TTL_S = 600;

const keyOf = (sessionToken: string) => createHmac('sha256', sessionToken).update('catraca-portal-flash-v1').digest();

export async function putFlash(db: DbClient, a: { sessionToken: string; sessionId: Buffer; value: unknown }): Promise<string> {
  const id = randomBytes(16).toString('base64url');
  const iv = randomBytes(12);
  const cipher = createCipheriv('aes-256-gcm', keyOf(a.sessionToken), iv);
  cipher.setAAD(Buffer.from(id));
  const body = Buffer.concat([cipher.update(JSON.stringify(a.value), 'utf8'), cipher.final()]);
  await db.query('insert into portal_flash (id, session_id, payload) values ($1, $2, $3)', [id, a.sessionId, Buffer.concat([iv, cipher.getAuthTag(), body])]);
  return id;
}

/** Returns the flash and deletes it (atomically: two concurrent GETs cannot both get it). */
export async function takeFlash<T>(db: DbClient, a: { sessionToken: string; sessionId: Buffer; id: string }): Promise<T | null> {
  if (!/^[A-Za-z0-9_-]{22}$/.test(a.id)) return null;
  const { rows } = await db.query(
    `delete from portal_flash where id = $1 and session_id = $2 and created_at > now() - make_interval(secs => $3) returning payload`,
    [a.id, a.sessionId, FLASH_TTL_S],
  );
  if (!rows[0]) return null;
  const p = rows[0].payload as Buffer;
  try {
    const decipher = createDecipheriv('aes-256-gcm', keyOf(a.sessionToken), p.subarray(0, 12));
    decipher.setAAD(Buffer.from(a.id));
    decipher.setAuthTag(p.subarray(12, 28));
    return JSON.parse(Buffer.concat([decipher.update(p.subarray(28)), decipher.final()]).toString('utf8')) as T;
  } catch {
    return null;
  }
}
