import { createHash, randomBytes } from 'node:crypto';
import type { AddressInfo } from 'node:net';
import { simpleParser } from 'mailparser';
import { SMTPServer } from 'smtp-server';
import { type SinkMessage, writeMessage } from './mailbox-dir.ts';

// Development and tests: an SMTP server (smtp-server) on a loopback port that accepts every
// message and keeps it — in memory (the last MAX_IN_MEMORY, for tests: messages(), waitFor()) and,
// given a directory, as files the portal shows at /dev/mail (CATRACA_DEV=1). No TLS, no AUTH: it
// listens on loopback only and delivers nothing anywhere.

export type { SinkMessage } from './mailbox-dir.ts';
const MAX_IN_MEMORY = 500;

export interface MailSink {
  /** smtp://127.0.0.1:PORT, for SMTP_URL */
  url: string;
  messages(): SinkMessage[];
  /** The newest message matching, or the first to arrive, within timeoutMs (default 10 s). */
  waitFor(match: (m: SinkMessage) => boolean, timeoutMs?: number): Promise<SinkMessage>;
  close(): Promise<void>;
}

export async function startMailSink(o: { host?: string; port?: number; dir?: string } = {}): Promise<MailSink> {
  const host = o.host ?? '127.0.0.1';
  const received: SinkMessage[] = [];
  const waiters = new Set<() => void>();
  const server = new SMTPServer({
    authOptional: true,
    disabledCommands: ['AUTH', 'STARTTLS'],
    size: 1024 * 1024,
    logger: false,
    onData(stream, session, callback) {
      simpleParser(stream)
        .then((parsed) => {
          const m: SinkMessage = {
            id: `${Date.now()}-${randomBytes(4).toString('hex')}`,
            date: new Date().toISOString(),
            from: session.envelope.mailFrom ? session.envelope.mailFrom.address : '',
            to: session.envelope.rcptTo.map((r) => r.address.toLowerCase()),
            subject: parsed.subject ?? '',
            text: parsed.text ?? '',
            html: typeof parsed.html === 'string' ? parsed.html : null,
            attachments: parsed.attachments.map((a) => ({
              filename: a.filename ?? '',
              contentType: a.contentType,
              cid: a.cid ?? null,
              size: a.size,
              sha256: createHash('sha256').update(a.content).digest('hex'),
            })),
          };
          received.push(m);
          if (received.length > MAX_IN_MEMORY) received.shift();
          if (o.dir) writeMessage(o.dir, m);
          for (const w of waiters) w();
          callback();
        })
        .catch((err: Error) => callback(err));
    },
  });
  await new Promise<void>((resolve, reject) => {
    server.once('error', reject);
    server.listen(o.port ?? 0, host, () => resolve());
  });
  server.on('error', () => {});
  const port = (server.server.address() as AddressInfo).port;
  const newest = (match: (m: SinkMessage) => boolean) => [...received].reverse().find(match);
  return {
    url: `smtp://${host}:${port}`,
    messages: () => [...received],
    waitFor: (match, timeoutMs = 10_000) =>
      new Promise((resolve, reject) => {
        const found = newest(match);
        if (found) return resolve(found);
        const check = () => {
          const m = newest(match);
          if (!m) return;
          waiters.delete(check);
          clearTimeout(timer);
          resolve(m);
        };
        const timer = setTimeout(() => {
          waiters.delete(check);
          reject(new Error('no such e-mail arrived at the sink'));
        }, timeoutMs);
        waiters.add(check);
      }),
    close: () => new Promise<void>((resolve) => server.close(() => resolve())),
  };
}
