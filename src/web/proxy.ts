import type { TLSSocket } from 'node:tls';
import type { IncomingMessage } from 'node:http';
import ipaddr from 'ipaddr.js';
import proxyaddr from 'proxy-addr';

// Who the client is, behind the reverse proxies we trust (PORTAL_TRUSTED_PROXIES). proxy-addr (the
// jshttp module Express uses) walks X-Forwarded-For from the right: the socket's peer must be a
// trusted proxy for the header to count at all, and each entry that is itself a trusted proxy is
// skipped; the first one that is not is the client. Anyone else reaching the portal directly has
// their headers ignored, whatever they forge.

/** What the deprecated PORTAL_TRUST_PROXY=1 meant in practice: a proxy on this host. */
export const LOOPBACK_PROXIES = ['127.0.0.0/8', '::1/128'];

/** 127.0.0.0/8, ::1 (also as ::ffff:127.x) and localhost: reachable from this machine only. */
export function isLoopbackHost(host: string): boolean {
  const h = host
    .trim()
    .toLowerCase()
    .replace(/^\[|\]$/g, '');
  return h === 'localhost' || h === '::1' || /^(::ffff:)?127(\.\d{1,3}){3}$/.test(h);
}

const split = (list: string | undefined) =>
  (list ?? '')
    .split(',')
    .map((s) => s.trim())
    .filter(Boolean);

/** The trusted proxies of a configuration: PORTAL_TRUSTED_PROXIES, plus loopback for the deprecated PORTAL_TRUST_PROXY=1. */
export function trustedProxies(env: { PORTAL_TRUSTED_PROXIES?: string; PORTAL_TRUST_PROXY?: boolean }): string[] {
  return [...new Set([...split(env.PORTAL_TRUSTED_PROXIES), ...(env.PORTAL_TRUST_PROXY ? LOOPBACK_PROXIES : [])])];
}

export type TrustFn = (addr: string, i: number) => boolean;
export const compileTrust = (list: string[]): TrustFn => proxyaddr.compile(list);

/**
 * The client's address, and whether the request came through a trusted proxy (then its
 * X-Forwarded-Proto may be believed). IPv4-mapped IPv6 peers are written as IPv4.
 */
export function clientOf(req: IncomingMessage, trust: TrustFn): { ip: string; viaProxy: boolean } {
  const peer = req.socket.remoteAddress ?? '';
  if (!peer) return { ip: 'unknown', viaProxy: false };
  let ip = peer;
  let viaProxy = false;
  try {
    viaProxy = trust(peer, 0);
    if (viaProxy) ip = proxyaddr(req, trust);
  } catch {
    // an X-Forwarded-For entry that is no address: the proxy's own address stands
  }
  return { ip: canonical(ip.slice(0, 100)), viaProxy };
}

/**
 * Whether the client reached us over https (then cookies get `Secure`): the public URL is https,
 * our own socket is TLS, or a trusted proxy says so in X-Forwarded-Proto (never anyone else).
 */
export function reachedOverHttps(req: IncomingMessage, viaProxy: boolean, publicHttps: boolean): boolean {
  if (publicHttps || (req.socket as TLSSocket).encrypted === true) return true;
  if (!viaProxy) return false;
  return (
    String(req.headers['x-forwarded-proto'] ?? '')
      .split(',')[0]
      .trim() === 'https'
  );
}

function canonical(ip: string): string {
  if (!ipaddr.isValid(ip)) return ip;
  const a = ipaddr.process(ip);
  return a.toString();
}
