import { Hono } from 'hono';
import { getCookie } from 'hono/cookie';
import type { NatsConnection } from 'nats';
import type pg from 'pg';
import { createLogger } from '../../log.ts';
import { EVENT_TYPES, type EventType } from '../../notify/events.ts';
import {
  createEndpoint,
  deleteEndpoint,
  deliveryLog,
  getEndpoint,
  getSettings,
  listEndpoints,
  MAX_ENDPOINTS,
  replayDelivery,
  rotateSecret,
  saveSettings,
  setEnabled,
} from '../../notify/settings.ts';
import { checkWebhookUrl, type Resolver } from '../../notify/ssrf.ts';
import { parseUserAmountInput } from '../../pix/amount.ts';
import { CENTAVO_MICROS } from '../../pix/limits.ts';
import { can } from '../authorize.ts';
import { putFlash, takeFlash } from '../flash.ts';
import { type AppEnv, type Ctx, SESSION_COOKIE, tenantOf } from '../http.ts';
import { type Form, one, redirect } from '../../web/http.ts';
import type { MessageKey } from '../i18n/index.ts';
import type { Renderer } from '../render.ts';
import { notificationsPage } from '../views/notifications.ts';

// Notifications (issue 20): the tenant's webhook endpoints (the signing secret shown once, at
// creation and at rotation, through a one-time flash of the session), the low-balance threshold and
// the e-mailed events, the delivery log and replays. Every query is scoped by the session's tenant.

const log = createLogger('portal');
const ENDPOINT_ID = '{ep_[a-z0-9]{10,40}}';
const DELIVERY_ID = '{[0-9]{1,18}}';

export interface NotificationsDeps {
  db: pg.Pool;
  nc: NatsConnection | null;
  /** Dev mode: http and private webhook addresses allowed (never in production). */
  devMode: boolean;
  /** The resolver of webhook hosts (tests); default the system's. */
  notifyResolve?: Resolver;
}

type SecretFlash = { url: string; secret: string };
type PageExtra = { secret?: SecretFlash | null; form?: Form; error?: string | null; flash?: string | null };

export function notificationsRoutes(d: NotificationsDeps, r: Renderer): Hono<AppEnv> {
  const { db } = d;
  const app = new Hono<AppEnv>();
  const view = async (c: Ctx, status: number, extra: PageExtra = {}) => {
    const tenantId = tenantOf(c);
    const [settings, endpoints, entries] = await Promise.all([getSettings(db, tenantId), listEndpoints(db, tenantId), deliveryLog(db, tenantId)]);
    return r.page(
      c,
      status,
      c.var.t('notify.title'),
      (vc) => notificationsPage(vc, { settings, endpoints, log: entries, secret: extra.secret, form: extra.form }),
      {
        error: extra.error,
        flash: extra.flash,
      },
    );
  };
  app.get('/notifications', can('notifications'), async (c) => {
    const flashId = c.var.url.searchParams.get('secret');
    if (flashId === null) return view(c, 200, { flash: flashMessage(c) });
    const secret = await takeFlash<SecretFlash>(db, { sessionToken: getCookie(c, SESSION_COOKIE)!, sessionId: c.var.session!.idHash, id: flashId });
    return secret ? view(c, 200, { secret }) : view(c, 200, { flash: c.var.t('notify.secret_shown') });
  });
  app.post('/notifications/settings', can('notifications'), (c) => saveSettingsForm(c, d, view));
  app.post('/notifications/endpoints', can('notifications'), (c) => addEndpoint(c, d, view));
  app.post(`/notifications/endpoints/:id${ENDPOINT_ID}/rotate`, can('notifications'), async (c) => {
    const ep = await getEndpoint(db, tenantOf(c), c.req.param('id'));
    const secret = ep && (await rotateSecret(db, tenantOf(c), ep.id));
    if (!ep || !secret) return r.notFound(c);
    log.info('webhook secret rotated', { tenant: tenantOf(c), endpoint_id: ep.id });
    return showSecretOnce(c, db, { url: ep.url, secret });
  });
  app.post(`/notifications/endpoints/:id${ENDPOINT_ID}/toggle`, can('notifications'), async (c) => {
    const ep = await getEndpoint(db, tenantOf(c), c.req.param('id'));
    if (!ep) return r.notFound(c);
    if (!ep.enabled) {
      // the address is checked again before it gets deliveries again
      const refused = await urlRefusal(c, d, ep.url);
      if (refused) return view(c, 400, { error: refused });
    }
    await setEnabled(db, tenantOf(c), ep.id, !ep.enabled);
    return redirect(c, '/notifications?done=toggled');
  });
  app.post(`/notifications/endpoints/:id${ENDPOINT_ID}/delete`, can('notifications'), async (c) => {
    if (!(await deleteEndpoint(db, tenantOf(c), c.req.param('id')))) return r.notFound(c);
    log.info('webhook endpoint deleted', { tenant: tenantOf(c), endpoint_id: c.req.param('id') });
    return redirect(c, '/notifications?done=deleted');
  });
  app.post(`/notifications/deliveries/:id${DELIVERY_ID}/replay`, can('notifications'), async (c) => {
    if (!(await replayDelivery(db, tenantOf(c), c.req.param('id')))) return r.notFound(c);
    return redirect(c, '/notifications?done=replayed');
  });
  return app;
}

/** The message of a finished action (Post/Redirect/Get: ?done=…). */
function flashMessage(c: Ctx): string | null {
  const done = c.var.url.searchParams.get('done');
  const keys: Record<string, MessageKey> = { saved: 'notify.saved', toggled: 'notify.toggled', deleted: 'notify.deleted', replayed: 'notify.replayed' };
  return done && keys[done] ? c.var.t(keys[done]) : null;
}

/** Post/Redirect/Get: the secret goes into a one-time flash of the session; the GET shows it once and deletes it. Never logged. */
async function showSecretOnce(c: Ctx, db: pg.Pool, s: SecretFlash): Promise<Response> {
  const id = await putFlash(db, {
    sessionToken: getCookie(c, SESSION_COOKIE)!,
    sessionId: c.var.session!.idHash,
    value: s,
  });
  return redirect(c, `/notifications?secret=${id}`);
}

const picked = (f: Form, name: string): string[] => (Array.isArray(f[name]) ? (f[name] as string[]) : f[name] ? [f[name] as string] : []);
const eventsOf = (f: Form, name: string): EventType[] | null => {
  const list = picked(f, name);
  return list.every((e) => (EVENT_TYPES as readonly string[]).includes(e)) ? [...new Set(list as EventType[])] : null;
};

/** The message for a URL the SSRF policy refuses, or null when it may be used. */
async function urlRefusal(c: Ctx, d: NotificationsDeps, url: string): Promise<string | null> {
  const check = await checkWebhookUrl(url, { allowPrivate: d.devMode, resolve: d.notifyResolve });
  if (check.ok) return null;
  return c.var.t(`notify.url_${check.reason}` as MessageKey, { detail: check.detail ?? '' });
}

type View = (c: Ctx, status: number, extra?: PageExtra) => Promise<Response>;

async function addEndpoint(c: Ctx, d: NotificationsDeps, view: View): Promise<Response> {
  const { t, form } = c.var;
  const tenantId = tenantOf(c);
  const url = one(form, 'url').trim();
  const events = eventsOf(form, 'events');
  if (!events || events.length === 0) return view(c, 400, { form, error: t('notify.no_events') });
  const refused = url.length > 2000 ? t('notify.url_bad_url') : await urlRefusal(c, d, url);
  if (refused) return view(c, 400, { form, error: refused });
  const created = await createEndpoint(d.db, tenantId, url, events);
  if (!created) return view(c, 400, { form, error: t('notify.too_many', { max: MAX_ENDPOINTS }) });
  log.info('webhook endpoint created', { tenant: tenantId, endpoint_id: created.id, origin: new URL(url).origin, events });
  return showSecretOnce(c, d.db, { url, secret: created.secret });
}

async function saveSettingsForm(c: Ctx, d: NotificationsDeps, view: View): Promise<Response> {
  const { t, form } = c.var;
  const tenantId = tenantOf(c);
  const text = one(form, 'threshold').trim();
  let lowBalanceMicros: bigint | null = null;
  if (text) {
    const parsed = parseUserAmountInput(text);
    if (!parsed.ok || parsed.micros <= 0n || parsed.micros % CENTAVO_MICROS !== 0n) return view(c, 400, { form, error: t('notify.bad_threshold') });
    lowBalanceMicros = parsed.micros;
  }
  const emailEvents = eventsOf(form, 'email_events');
  if (!emailEvents) return view(c, 400, { form, error: t('notify.no_events') });
  await saveSettings(d.db, tenantId, { lowBalanceMicros, emailEvents });
  log.info('notification settings saved', { tenant: tenantId, low_balance_micros: lowBalanceMicros?.toString() ?? null, email_events: emailEvents });
  return redirect(c, '/notifications?done=saved');
}
