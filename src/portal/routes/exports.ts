import { Hono } from 'hono';
import type pg from 'pg';
import { createLogger } from '../../log.ts';
import { csvBody } from '../csv.ts';
import { type ExportName, exportFileName, exportQuery } from '../exports.ts';
import { type AppEnv, tenantOf } from '../http.ts';
import { parsePeriod } from '../period.ts';
import { can } from '../authorize.ts';
import type { Renderer } from '../render.ts';
import { badPeriod } from './usage.ts';
import { messagePage } from '../views/layout.ts';

// CSV downloads of a period: GET /exports/statement.csv and /exports/usage.csv ?from=YYYY-MM-DD&to=YYYY-MM-DD
// (São Paulo days, both included, at most MAX_PERIOD_DAYS; see src/portal/exports.ts for the columns).

const log = createLogger('portal');

export interface ExportsDeps {
  db: pg.Pool;
}

export interface ExportLimits {
  /** Exports running at once for one tenant. */
  perTenant: number;
  /** Exports running at once in this process: each holds a database connection of the portal's pool while it streams. */
  total: number;
  /** A download whose client reads nothing for this long is ended and its connection freed, ms. */
  stallMs: number;
}

export const EXPORT_LIMITS: ExportLimits = { perTenant: 2, total: 4, stallMs: 60_000 };

/** Exports running now, by tenant. */
function exportSlots(limits: ExportLimits) {
  const running = new Map<string, number>();
  let total = 0;
  return {
    take(tenantId: string): boolean {
      const mine = running.get(tenantId) ?? 0;
      if (mine >= limits.perTenant || total >= limits.total) return false;
      running.set(tenantId, mine + 1);
      total++;
      return true;
    },
    give(tenantId: string) {
      const mine = (running.get(tenantId) ?? 1) - 1;
      if (mine <= 0) running.delete(tenantId);
      else running.set(tenantId, mine);
      total--;
    },
  };
}

export function exportRoutes(d: ExportsDeps, r: Renderer, limits: ExportLimits = EXPORT_LIMITS): Hono<AppEnv> {
  const app = new Hono<AppEnv>();
  const slots = exportSlots(limits);
  for (const name of ['statement', 'usage'] as const satisfies readonly ExportName[]) {
    app.get(`/exports/${name}.csv`, can('exports'), async (c) => {
      const { t } = c.var;
      const asked = parsePeriod(c.var.url.searchParams);
      if (!asked.ok) return badPeriod(c, r, asked.error);
      const tenantId = tenantOf(c);
      const headers = {
        'content-type': 'text/csv; charset=utf-8',
        'content-disposition': `attachment; filename="${exportFileName(name, asked.period)}"`,
        'cache-control': 'no-store',
      };
      // a HEAD would start a cursor nobody reads
      if (c.req.method === 'HEAD') return c.body(null, 200, headers);
      if (!slots.take(tenantId)) return r.page(c, 429, t('exports.busy_title'), (vc) => messagePage(vc, '429', t('exports.busy')));
      const started = Date.now();
      // fails before the first byte (the slot given back): the portal's error page
      const body = await csvBody(d.db, exportQuery(name, tenantId, asked.period), {
        stallMs: limits.stallMs,
        cut: () => c.env.outgoing.destroy(),
        onDone: (err) => {
          slots.give(tenantId);
          if (err) log.warn('export ended early', { export: name, tenant: tenantId, err: err.message, ms: Date.now() - started });
        },
      });
      return c.body(body, 200, headers);
    });
  }
  return app;
}
