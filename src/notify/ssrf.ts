import { lookup as dnsLookup } from 'node:dns/promises';
import type { LookupAddress, LookupOptions } from 'node:dns';
import ipaddr from 'ipaddr.js';

// Where a webhook may go (SSRF). A tenant names the URL and we POST to it from inside our network,
// so, outside development:
//   - https only, no credentials in the URL;
//   - every address its host resolves to must be global unicast: never loopback, private (10/8,
//     172.16/12, 192.168/16), link-local (169.254/16 — the clouds' metadata service — fe80::/10),
//     unique-local (fc00::/7), CGNAT (100.64/10), multicast, broadcast, unspecified, reserved or
//     documentation ranges, nor an IPv6 form that embeds an IPv4 one (mapped, NAT64, 6to4, Teredo)
//     — only what ipaddr.js calls `unicast`;
//   - checked when the URL is saved AND at every delivery, where the connection goes to the address
//     this check resolved and approved (the lookup the socket uses is this one), so a DNS answer
//     that changes between the check and the connection (rebinding) cannot reach an internal address.
// In development (the portal's dev mode, the tests' flag) http and any address are allowed.

export type Resolver = (host: string) => Promise<LookupAddress[]>;

/** The system resolver (getaddrinfo: /etc/hosts, then DNS), every address. */
export const systemResolver: Resolver = (host) => dnsLookup(host, { all: true, verbatim: true });

export interface UrlPolicy {
  /** Development: http and private addresses allowed. */
  allowPrivate: boolean;
  resolve?: Resolver;
}

export type UrlCheck =
  | { ok: true; url: URL }
  | { ok: false; reason: 'bad_url' | 'not_https' | 'credentials' | 'unresolvable' | 'private_address'; detail?: string };

/** null when the address may be called; else what it is (loopback, private, linkLocal, …). */
export function refusedRange(address: string): string | null {
  let ip: ipaddr.IPv4 | ipaddr.IPv6;
  try {
    ip = ipaddr.parse(address);
  } catch {
    return 'invalid';
  }
  if (ip.kind() === 'ipv6' && (ip as ipaddr.IPv6).isIPv4MappedAddress()) ip = (ip as ipaddr.IPv6).toIPv4Address();
  const range = ip.range();
  return range === 'unicast' ? null : range;
}

/** The host of a URL as DNS or an IP literal wants it (no IPv6 brackets). */
export const hostOf = (u: URL): string => u.hostname.replace(/^\[|\]$/g, '');

/** Checks a webhook URL: its form, and every address it resolves to now. */
export async function checkWebhookUrl(text: string, policy: UrlPolicy): Promise<UrlCheck> {
  let u: URL;
  try {
    u = new URL(text);
  } catch {
    return { ok: false, reason: 'bad_url' };
  }
  if (u.protocol !== 'https:' && !(policy.allowPrivate && u.protocol === 'http:')) return { ok: false, reason: 'not_https' };
  if (u.username || u.password) return { ok: false, reason: 'credentials' };
  if (!u.hostname) return { ok: false, reason: 'bad_url' };
  if (policy.allowPrivate) return { ok: true, url: u };
  const host = hostOf(u);
  let addresses: LookupAddress[];
  if (ipaddr.isValid(host)) addresses = [{ address: host, family: host.includes(':') ? 6 : 4 }];
  else {
    try {
      addresses = await (policy.resolve ?? systemResolver)(host);
    } catch {
      return { ok: false, reason: 'unresolvable', detail: host };
    }
    if (addresses.length === 0) return { ok: false, reason: 'unresolvable', detail: host };
  }
  for (const a of addresses) {
    const range = refusedRange(a.address);
    if (range) return { ok: false, reason: 'private_address', detail: `${a.address} (${range})` };
  }
  return { ok: true, url: u };
}

/** A refusal at connection time: the socket is never opened. */
export class RefusedAddressError extends Error {
  constructor(readonly detail: string) {
    super(`refused address ${detail}`);
    this.name = 'RefusedAddressError';
  }
}

type LookupCallback = (err: NodeJS.ErrnoException | null, address: string | LookupAddress[], family?: number) => void;

/**
 * The `lookup` of the sockets that deliver webhooks (net/tls.connect through undici's connect
 * options): resolves with `resolve`, refuses the connection when any address is not global
 * unicast, and hands the socket exactly the addresses it checked.
 */
export function guardedLookup(policy: UrlPolicy) {
  const resolve = policy.resolve ?? systemResolver;
  return (host: string, options: LookupOptions | number | LookupCallback, cb?: LookupCallback): void => {
    const callback = (typeof options === 'function' ? options : cb) as LookupCallback;
    const opts: LookupOptions = typeof options === 'object' && options !== null ? options : {};
    resolve(host).then(
      (all) => {
        const wanted = opts.family === 4 || opts.family === 6 ? all.filter((a) => a.family === opts.family) : all;
        if (wanted.length === 0) return callback(Object.assign(new Error(`no address for ${host}`), { code: 'ENOTFOUND' }), '');
        if (!policy.allowPrivate) {
          for (const a of wanted) {
            const range = refusedRange(a.address);
            if (range) return callback(new RefusedAddressError(`${a.address} (${range})`), '');
          }
        }
        if (opts.all) callback(null, wanted);
        else callback(null, wanted[0].address, wanted[0].family);
      },
      (err: NodeJS.ErrnoException) => callback(err, ''),
    );
  };
}
