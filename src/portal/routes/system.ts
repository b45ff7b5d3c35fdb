import { readFileSync } from 'node:fs';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { Hono } from 'hono';
import type { AppEnv } from '../http.ts';
import { json, send } from '../../web/http.ts';
import { can } from '../authorize.ts';

// The portal's own files (read once at start) and the health check.

const STATIC_DIR = join(dirname(fileURLToPath(import.meta.url)), '..', 'static');
const STATIC: Record<string, { type: string; body: Uint8Array<ArrayBuffer> }> = {
  '/static/portal.js': { type: 'text/javascript; charset=utf-8', body: readFileSync(join(STATIC_DIR, 'portal.js')) },
  '/static/portal.css': { type: 'text/css; charset=utf-8', body: readFileSync(join(STATIC_DIR, 'portal.css')) },
};

export function staticRoutes(): Hono<AppEnv> {
  const app = new Hono<AppEnv>();
  for (const [path, file] of Object.entries(STATIC))
    app.get(path, can('public'), (c) => send(c, 200, file.type, file.body, { 'cache-control': 'public, max-age=300' }));
  return app;
}

/** Any method: a load balancer's or Docker's probe. */
export function healthRoutes(): Hono<AppEnv> {
  return new Hono<AppEnv>().all('/healthz', can('public'), (c) => json(c, 200, { ok: true }));
}
