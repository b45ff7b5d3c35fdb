import { Hono, type MiddlewareHandler } from 'hono';
import { bodyLimit } from 'hono/body-limit';
import { createLogger } from '../../log.ts';
import type { Metrics } from '../../metrics/registry.ts';
import type { RecurringService } from '../../pix/recurring/service.ts';
import type { PixService } from '../../pix/service.ts';
import { type AppEnv, MAX_WEBHOOK_BYTES } from '../http.ts';
import { json } from '../../web/http.ts';
import { TokenBuckets } from '../limiter.ts';
import { throttleKey } from '../../auth/client-address.ts';
import { can } from '../authorize.ts';

// PSP callbacks: the secret is part of the URL we registered; the BCB standard appends /pix. The
// secret is taken %-decoded; a malformed escape stays as sent, refused like any wrong secret.
const PATHS = ['/webhooks/pix/:secret', '/webhooks/pix/:secret/', '/webhooks/pix/:secret/pix', '/webhooks/pix/:secret/pix/'];
// Pix Automático: PUT /webhookrec and /webhookcobr register the same base; the PSP appends /rec and /cobr.
const REC_PATHS = ['/webhooks/pix/:secret/rec', '/webhooks/pix/:secret/rec/'];
const COBR_PATHS = ['/webhooks/pix/:secret/cobr', '/webhooks/pix/:secret/cobr/'];

/**
 * Per client address: wrong secrets (someone guessing): 10, then one more per minute — past that
 * the address gets 429 whatever it sends. A wrong secret is counted and logged, never stored
 * (anonymous requests cannot grow the database). Every request, generously (a PSP delivers one
 * callback per payment, in bursts, and delivers a refused one again later): 600, then 10 a second.
 */
export const WEBHOOK_REQUESTS = { burst: 600, perSecond: 10 };
export const WEBHOOK_BAD_SECRETS = { burst: 10, perSecond: 1 / 60 };

const log = createLogger('pix');

export function webhookRoutes(pix: PixService, metrics: Metrics, recurring: RecurringService | null = null): Hono<AppEnv> {
  const app = new Hono<AppEnv>();
  const requests = new TokenBuckets(WEBHOOK_REQUESTS);
  const badSecrets = new TokenBuckets(WEBHOOK_BAD_SECRETS);
  const limited = metrics.counter('catraca_portal_rate_limited_total', 'Portal requests refused 429 before any work, by route', { route: 'pix_webhook' });
  const rejected = metrics.counter('catraca_pix_webhook_rejected_total', 'Pix webhook deliveries refused, by reason (never stored)', { reason: 'bad_secret' });

  const rateLimit: MiddlewareHandler<AppEnv> = async (c, next) => {
    const key = throttleKey(c.var.ip);
    // an address that used up its wrong secrets waits, whatever it sends now
    if (!badSecrets.has(key) || !requests.take(key)) {
      limited.inc();
      const retry = Math.max(badSecrets.retryAfterS(key), requests.retryAfterS(key), 1);
      return json(c, 429, { error: 'too many requests' }, { 'retry-after': String(retry) });
    }
    await next();
  };
  const limit = bodyLimit({ maxSize: MAX_WEBHOOK_BYTES, onError: (c) => json(c, 413, { error: 'too large' }) });
  app.on('POST', PATHS, can('public'), rateLimit, limit, async (c) => {
    const rawBody = Buffer.from(await c.req.arrayBuffer());
    const r = await pix.handleWebhook({ secret: c.req.param('secret') ?? '', headers: c.env.incoming.headers, rawBody, remoteAddr: c.var.ip });
    if (r.rejected === 'bad_secret') {
      badSecrets.take(throttleKey(c.var.ip));
      rejected.inc();
      log.warn('pix webhook rejected: wrong secret (not stored)', { remote: c.var.ip });
    }
    return json(c, r.status, r.body);
  });
  for (const [kind, paths] of [
    ['rec', REC_PATHS],
    ['cobr', COBR_PATHS],
  ] as const) {
    app.on('POST', paths, can('public'), rateLimit, limit, async (c) => {
      if (!recurring) return json(c, 404, { error: 'not found' });
      const rawBody = Buffer.from(await c.req.arrayBuffer());
      const r = await recurring.handleWebhook(kind, { secret: c.req.param('secret') ?? '', headers: c.env.incoming.headers, rawBody, remoteAddr: c.var.ip });
      if (r.rejected === 'bad_secret') {
        badSecrets.take(throttleKey(c.var.ip));
        rejected.inc();
        log.warn('pix recurrence webhook rejected: wrong secret (not stored)', { remote: c.var.ip, kind });
      }
      return json(c, r.status, r.body);
    });
  }
  app.on('ALL', [...PATHS, ...REC_PATHS, ...COBR_PATHS], can('public'), (c) => json(c, 405, { error: 'method not allowed' }));
  return app;
}
