import { randomBytes } from 'node:crypto';
import ipaddr from 'ipaddr.js';
import { Webhook } from 'standardwebhooks';
import { Agent, request } from 'undici';
import { guardedLookup, hostOf, refusedRange, type UrlPolicy } from './ssrf.ts';

// One webhook attempt, per Standard Webhooks (https://www.standardwebhooks.com): a POST of the
// event's body with `webhook-id` (the event id, the same at every attempt), `webhook-timestamp`
// (this attempt's, unix seconds) and `webhook-signature` (`v1,` + base64 HMAC-SHA256 of
// `id.timestamp.body` under each secret, space separated: after a rotation the previous secret
// signs too). Signed by the standardwebhooks package (the reference implementation).
// A 2xx is delivered; anything else, a timeout or a refused address is a failure. Redirects are
// not followed (a 3xx is a failure), the response is read up to a bound and dropped, and the
// socket connects only to an address the SSRF policy approved (src/notify/ssrf.ts).

export const SECRET_PREFIX = 'whsec_';

/** A new signing secret: whsec_ + base64 of 32 random bytes (the spec asks for 24 to 64). */
export const newSecret = (): string => `${SECRET_PREFIX}${randomBytes(32).toString('base64')}`;

/** The `webhook-signature` header: one `v1,…` per secret. */
export function signatures(secrets: string[], msgId: string, at: Date, body: string): string {
  return secrets.map((s) => new Webhook(s).sign(msgId, at, body)).join(' ');
}

export interface AttemptResult {
  /** the HTTP status, null when no response came */
  status: number | null;
  durationMs: number;
  /** null when delivered */
  error: string | null;
  /** the receiver's Retry-After, ms */
  retryAfterMs: number | null;
}

export interface SenderOptions {
  policy: UrlPolicy;
  /** the whole attempt: connection, response headers and the part of the body read */
  timeoutMs: number;
  /** response bytes read at most (the rest is dropped with the connection) */
  maxResponseBytes: number;
}

export const delivered = (status: number | null): boolean => status !== null && status >= 200 && status < 300;

/** Retry-After as seconds or an HTTP date, in ms (null when absent or unreadable). */
export function retryAfterMs(value: string | string[] | undefined, now = Date.now()): number | null {
  const v = Array.isArray(value) ? value[0] : value;
  if (!v) return null;
  if (/^\d{1,9}$/.test(v.trim())) return Number(v.trim()) * 1000;
  const at = Date.parse(v);
  return Number.isNaN(at) ? null : Math.max(0, at - now);
}

function describe(err: unknown): string {
  let e = err as (Error & { code?: string; cause?: unknown }) | undefined;
  // undici wraps the socket's error; the innermost says what happened
  while (e?.cause instanceof Error) e = e.cause as Error & { code?: string; cause?: unknown };
  if (e?.name === 'TimeoutError' || e?.name === 'AbortError') return 'timeout';
  const text = `${e?.code ? `${e.code}: ` : ''}${e?.message ?? String(err)}`;
  return text.slice(0, 300);
}

export class WebhookSender {
  private readonly agent: Agent;

  constructor(private readonly o: SenderOptions) {
    this.agent = new Agent({
      connect: { lookup: guardedLookup(o.policy) as never, timeout: o.timeoutMs },
      headersTimeout: o.timeoutMs,
      bodyTimeout: o.timeoutMs,
      keepAliveTimeout: 4000,
      maxRedirections: 0,
    });
  }

  /** Sends one attempt; never throws. */
  async send(a: { url: string; secrets: string[]; eventId: string; body: string }): Promise<AttemptResult> {
    const started = performance.now();
    const done = (status: number | null, error: string | null, retryAfter: number | null = null): AttemptResult => ({
      status,
      durationMs: Math.round(performance.now() - started),
      error,
      retryAfterMs: retryAfter,
    });
    const refused = this.refusedBeforeConnecting(a.url);
    if (refused) return done(null, refused);
    try {
      const at = new Date();
      const res = await request(a.url, {
        method: 'POST',
        dispatcher: this.agent,
        headers: {
          'content-type': 'application/json',
          'user-agent': 'catraca-webhooks/1',
          'webhook-id': a.eventId,
          'webhook-timestamp': String(Math.floor(at.getTime() / 1000)),
          'webhook-signature': signatures(a.secrets, a.eventId, at, a.body),
        },
        body: a.body,
        signal: AbortSignal.timeout(this.o.timeoutMs),
      });
      await this.drain(res.body);
      const status = res.statusCode;
      return done(status, delivered(status) ? null : `HTTP ${status}`, retryAfterMs(res.headers['retry-after']));
    } catch (err) {
      return done(null, describe(err));
    }
  }

  /**
   * What the socket's lookup cannot see: the scheme, and a host that is an IP literal (no lookup
   * happens for those). A hostname is checked by the lookup, at connection time.
   */
  private refusedBeforeConnecting(text: string): string | null {
    let u: URL;
    try {
      u = new URL(text);
    } catch {
      return 'invalid URL';
    }
    if (u.protocol !== 'https:' && !(this.o.policy.allowPrivate && u.protocol === 'http:')) return `refused scheme ${u.protocol}`;
    const host = hostOf(u);
    if (!this.o.policy.allowPrivate && ipaddr.isValid(host)) {
      const range = refusedRange(host);
      if (range) return `refused address ${host} (${range})`;
    }
    return null;
  }

  private async drain(body: AsyncIterable<Buffer> & { destroy(): void }): Promise<void> {
    let read = 0;
    for await (const chunk of body) {
      read += chunk.length;
      if (read >= this.o.maxResponseBytes) {
        body.destroy();
        return;
      }
    }
  }

  close(): Promise<void> {
    return this.agent.close();
  }
}
