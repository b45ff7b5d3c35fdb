import { createHash } from 'node:crypto';

// Anthropic refuses tool ids outside ^[a-zA-Z0-9_-]+$; other vendors' ids may hold `.`, `:` or
// anything else (a history that went through an OpenAI-compatible model). An invalid id becomes
// its valid characters plus a hash of the whole id, so two different ids never meet, and a valid
// id stays as it is: applied to a tool_use and to its tool_result alike, they still match.

const VALID = /^[a-zA-Z0-9_-]{1,128}$/;

export function validToolId(id: string): string {
  if (VALID.test(id)) return id;
  const hash = createHash('sha256').update(id).digest('base64url').slice(0, 16);
  const kept = id.replace(/[^a-zA-Z0-9_-]/g, '_').slice(0, 96);
  return `${kept}_${hash}`;
}
