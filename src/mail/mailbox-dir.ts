import { mkdirSync, readdirSync, readFileSync, unlinkSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';

// Development only: the messages the SMTP sink received, one JSON file each in DEV_MAIL_DIR, for
// the portal's /dev/mail page (another process). The newest MAX_KEPT are kept.

export interface SinkMessage {
  id: string;
  /** ISO time received */
  date: string;
  from: string;
  /** envelope recipients, lower-cased */
  to: string[];
  subject: string;
  text: string;
  html: string | null;
  /** what came attached (inline images have a cid); the content is not kept */
  attachments?: Array<{ filename: string; contentType: string; cid: string | null; size: number; sha256: string }>;
}

export const MAX_KEPT = 200;

export function writeMessage(dir: string, m: SinkMessage): void {
  mkdirSync(dir, { recursive: true });
  writeFileSync(join(dir, `${m.id}.json`), JSON.stringify(m));
  const files = listFiles(dir);
  for (const f of files.slice(MAX_KEPT)) unlinkSync(join(dir, f));
}

/** Newest first. */
export function readMessages(dir: string, limit = 50): SinkMessage[] {
  const out: SinkMessage[] = [];
  for (const f of listFiles(dir).slice(0, limit)) {
    try {
      out.push(JSON.parse(readFileSync(join(dir, f), 'utf8')) as SinkMessage);
    } catch {
      // removed meanwhile, or half written: the next look finds it
    }
  }
  return out;
}

function listFiles(dir: string): string[] {
  try {
    return readdirSync(dir)
      .filter((f) => /^\d{13}-[a-z0-9]+\.json$/.test(f))
      .sort()
      .reverse();
  } catch {
    return [];
  }
}
