import crypto, { createHash, randomBytes } from 'node:crypto';

// Keys carry 256 random bits, so a plain SHA-256 is a safe lookup hash (no pepper needed to
// resist guessing); the plain text exists only in the response that creates it.
export const KEY_PREFIX = 'sk-cat-v1-';
const KEY_RE = /^sk-cat-v1-[0-9a-f]{64}$/;

export function generateApiKey(): string {
  return KEY_PREFIX + randomBytes(32).toString('hex');
}

// crypto.hash (Node ≥ 20.12): the one-shot digest, without a Hash object per request
const oneShot = (crypto as { hash?: (alg: string, data: string, enc: 'buffer') => Buffer }).hash;

export function hashApiKey(key: string): Buffer {
  return oneShot ? oneShot('sha256', key, 'buffer') : createHash('sha256').update(key).digest();
}

export function looksLikeApiKey(key: string): boolean {
  return KEY_RE.test(key);
}

/** What the portal and CLI may show after creation: `sk-cat-v1-3f9a…c21e`. */
export function keyHint(key: string): string {
  return `${key.slice(0, KEY_PREFIX.length + 4)}…${key.slice(-4)}`;
}
