// `node dist/src/stack/healthcheck.js [gateway|portal|console|worker|metering]`: the Docker image's
// HEALTHCHECK. Exit 0 when this container's process serves, 1 when not.
//   gateway, portal,  GET /healthz on 127.0.0.1 (GATEWAY_PORT / PORTAL_PORT / CONSOLE_PORT; 503 while
//   console           draining);
//   worker, metering  the process answers on NATS as a micro service (catraca-worker /
//                     catraca-metering) whose metadata.host is this container's hostname.
// Without an argument the process is recognised from PID 1's command line (the compose
// `command:`); the one-shot `migrate` and anything unknown report healthy.
import { readFileSync } from 'node:fs';
import { hostname } from 'node:os';
import { resolve } from 'node:path';
import { pathToFileURL } from 'node:url';
import { connect, RequestStrategy } from 'nats';
import { natsOptions } from '../bus/connect.ts';

export type Checked = 'gateway' | 'portal' | 'console' | 'worker' | 'metering';

/** Which catraca process a command line runs (`node dist/workers/main.js` → worker), or null. */
export function processOf(cmdline: string): Checked | null {
  if (/gateway\/main\.[jt]s/.test(cmdline) || /stack\/main\.[jt]s/.test(cmdline)) return 'gateway';
  if (/workers\/main\.[jt]s/.test(cmdline)) return 'worker';
  if (/metering\/main\.[jt]s/.test(cmdline)) return 'metering';
  if (/portal\/main\.[jt]s/.test(cmdline)) return 'portal';
  if (/console\/main\.[jt]s/.test(cmdline)) return 'console';
  return null;
}

export async function checkHttp(port: number, timeoutMs = 2500): Promise<{ ok: boolean; detail: string }> {
  try {
    const r = await fetch(`http://127.0.0.1:${port}/healthz`, { signal: AbortSignal.timeout(timeoutMs) });
    return { ok: r.ok, detail: `HTTP ${r.status} ${(await r.text()).slice(0, 200)}` };
  } catch (err) {
    return { ok: false, detail: (err as Error).message };
  }
}

export async function checkNats(
  natsUrl: string,
  service: 'catraca-worker' | 'catraca-metering',
  host = hostname(),
  waitMs = 1500,
): Promise<{ ok: boolean; detail: string }> {
  let nc: Awaited<ReturnType<typeof connect>> | undefined;
  try {
    // natsOptions: the credentials of NATS_URL as nats.js takes them (a user:password@ in a server list is not a URL it parses)
    nc = await connect({ ...natsOptions(natsUrl), timeout: 2000, reconnect: false, name: 'catraca healthcheck' });
  } catch (err) {
    return { ok: false, detail: `NATS unreachable: ${(err as Error).message}` };
  }
  try {
    const hosts: string[] = [];
    try {
      for await (const info of await nc.services.client({ strategy: RequestStrategy.JitterTimer, maxWait: waitMs }).info(service)) {
        hosts.push(info.metadata?.host ?? '?');
        if (info.metadata?.host === host) return { ok: true, detail: `${service} on ${host} answers (${info.metadata.instance})` };
      }
    } catch (err) {
      // 503: no responders, i.e. no instance of the service at all
      if ((err as { code?: string }).code !== '503') return { ok: false, detail: `$SRV.INFO failed: ${(err as Error).message}` };
    }
    return { ok: false, detail: `no ${service} on ${host} answered $SRV.INFO (${hosts.length ? `only on ${hosts.join(', ')}` : 'none at all'})` };
  } finally {
    await nc.close();
  }
}

export async function healthcheck(which: Checked | null, env: Record<string, string | undefined> = process.env): Promise<{ ok: boolean; detail: string }> {
  switch (which) {
    case 'gateway':
      return checkHttp(Number(env.GATEWAY_PORT || 8080));
    case 'portal':
      return checkHttp(Number(env.PORTAL_PORT || 8081));
    case 'console':
      return checkHttp(Number(env.CONSOLE_PORT || 8082));
    case 'worker':
    case 'metering':
      if (!env.NATS_URL) return { ok: false, detail: 'NATS_URL is not set' };
      return checkNats(env.NATS_URL, which === 'worker' ? 'catraca-worker' : 'catraca-metering');
    default:
      return { ok: true, detail: 'nothing to check for this process' };
  }
}

async function main(): Promise<void> {
  const arg = process.argv[2];
  let which: Checked | null;
  if (arg) {
    if (!['gateway', 'portal', 'console', 'worker', 'metering'].includes(arg)) {
      process.stderr.write('usage: healthcheck [gateway|portal|console|worker|metering]\n');
      process.exit(2);
    }
    which = arg as Checked;
  } else {
    let cmdline = '';
    try {
      cmdline = readFileSync('/proc/1/cmdline', 'utf8').replace(/\0/g, ' ');
    } catch {}
    which = processOf(cmdline);
  }
  const r = await healthcheck(which);
  process.stdout.write(`${which ?? 'unknown'}: ${r.ok ? 'healthy' : 'unhealthy'}: ${r.detail}\n`);
  process.exit(r.ok ? 0 : 1);
}

if (process.argv[1] && pathToFileURL(resolve(process.argv[1])).href === import.meta.url) {
  void main();
}
