import { Hono } from 'hono';
import type pg from 'pg';
import { createLogger } from '../../log.ts';
import type { PixService } from '../../pix/service.ts';
import { paySimulatedCharge } from '../../pix/simulator/pay.ts';
import type { PixSimulator } from '../../pix/simulator/server.ts';
import { type AppEnv, tenantOf } from '../http.ts';
import { redirect } from '../../web/http.ts';
import type { Renderer } from '../render.ts';
import { readMessages } from '../../mail/mailbox-dir.ts';
import { TXID } from './topup.ts';
import { can } from '../authorize.ts';
import { devMailPage } from '../views/dev.ts';

// Development only (mounted in dev mode, src/portal/config.ts): the charge page's "pay with the
// simulator" button (the simulator then calls our webhook like a PSP would), and /dev/mail.

const log = createLogger('portal');

export interface DevDeps {
  db: pg.Pool;
  pix: PixService;
  simulator: PixSimulator | null;
  /** DEV_MAIL_DIR: where the SMTP sink of `npm start` keeps what it received. */
  devMailDir?: string;
}

/** /dev/mail: the e-mails the embedded SMTP sink received (no session needed: dev mode runs on loopback only). */
export function devMailRoutes(d: DevDeps, r: Renderer): Hono<AppEnv> {
  return new Hono<AppEnv>().get('/dev/mail', can('public'), (c) =>
    r.page(c, 200, c.var.t('dev.mail_title'), (vc) => devMailPage(vc, d.devMailDir ? readMessages(d.devMailDir) : [])),
  );
}

export function devRoutes(d: DevDeps, r: Renderer): Hono<AppEnv> {
  const app = new Hono<AppEnv>();
  app.post(`/topup/:txid${TXID}/simulate`, can('topup'), async (c) => {
    const txid = c.req.param('txid');
    if (!(await d.pix.getCharge(txid, tenantOf(c)))) return r.notFound(c);
    const res = await paySimulatedCharge(d.db, { txid, simulatorUrl: d.simulator?.url });
    if (!res.ok) log.warn('simulated payment failed', { txid, status: res.status, error: res.error });
    return redirect(c, `/topup/${txid}`);
  });
  return app;
}
