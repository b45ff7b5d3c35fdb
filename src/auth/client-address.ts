import ipaddr from 'ipaddr.js';

// Who sent a request, for limits per client address (the front door; the portal walks X-Forwarded-For
// with proxy-addr but keys its throttles and validates its proxy list with the same rules): the TCP peer, or, when the peer is one of the
// reverse proxies in GATEWAY_TRUSTED_PROXIES, the right-most X-Forwarded-For entry that is not a
// trusted proxy itself (each proxy appends the address it saw; only entries added by our own proxies
// can be believed, anything left of them is what the client claimed). A peer outside the list is
// the client, whatever X-Forwarded-For it sends.
//
// The result is a rate-limit key: an IPv4 address as text, an IPv6 address as its /64 (one host
// gets a whole /64, so per address would be no limit at all). An IPv4-mapped IPv6 peer counts as
// its IPv4 address.

type Range = [ipaddr.IPv4 | ipaddr.IPv6, number];

/** proxy-addr's named ranges, accepted in every trusted-proxy list (PORTAL_TRUSTED_PROXIES and GATEWAY_TRUSTED_PROXIES). */
const NAMED_RANGES: Record<string, string[]> = {
  loopback: ['127.0.0.1/8', '::1/128'],
  linklocal: ['169.254.0.0/16', 'fe80::/10'],
  uniquelocal: ['10.0.0.0/8', '172.16.0.0/12', '192.168.0.0/16', 'fc00::/7'],
};

/** The CIDRs, single addresses or named ranges of a comma-separated list; throws on an invalid entry. */
export function parseCidrList(list: string): Range[] {
  const out: Range[] = [];
  for (const raw of list.split(',')) {
    const entry = raw.trim();
    if (!entry) continue;
    const named = NAMED_RANGES[entry];
    if (named) out.push(...parseCidrList(named.join(',')));
    else if (entry.includes('/')) {
      if (!ipaddr.isValidCIDR(entry)) throw new Error(`not a CIDR: ${entry}`);
      const [addr, bits] = ipaddr.parseCIDR(entry);
      out.push([normalize(addr), addr.kind() === 'ipv6' && (addr as ipaddr.IPv6).isIPv4MappedAddress() ? bits - 96 : bits]);
    } else {
      if (!ipaddr.isValid(entry)) throw new Error(`not an IP address, a CIDR or one of ${Object.keys(NAMED_RANGES).join(', ')}: ${entry}`);
      const addr = ipaddr.process(entry);
      out.push([addr, addr.kind() === 'ipv4' ? 32 : 128]);
    }
  }
  return out;
}

function normalize(addr: ipaddr.IPv4 | ipaddr.IPv6): ipaddr.IPv4 | ipaddr.IPv6 {
  return addr.kind() === 'ipv6' && (addr as ipaddr.IPv6).isIPv4MappedAddress() ? (addr as ipaddr.IPv6).toIPv4Address() : addr;
}

function parse(text: string): ipaddr.IPv4 | ipaddr.IPv6 | null {
  const t = text.trim();
  // uWS writes IPv4 peers as dotted quads: no parsing needed for the common case's validity
  if (!ipaddr.isValid(t)) return null;
  return ipaddr.process(t);
}

/** The rate-limit key of an address: IPv4 as is, IPv6 as its /64 (e.g. `2001:db8:1:2::/64`). */
export function addressKey(addr: ipaddr.IPv4 | ipaddr.IPv6): string {
  if (addr.kind() === 'ipv4') return addr.toString();
  const p = (addr as ipaddr.IPv6).parts;
  return `${new ipaddr.IPv6([p[0], p[1], p[2], p[3], 0, 0, 0, 0]).toString()}/64`;
}

/** The rate-limit key of an address written as text (an IPv4-mapped IPv6 address counts as IPv4); anything else as given. */
export function throttleKey(ip: string): string {
  const addr = parse(ip);
  return addr ? addressKey(addr) : ip;
}

export class ClientAddresses {
  private readonly trusted: Range[];

  /** `trustedProxies`: GATEWAY_TRUSTED_PROXIES (CIDRs or addresses, comma-separated; empty: none). */
  constructor(trustedProxies: string) {
    this.trusted = parseCidrList(trustedProxies);
  }

  /** Whether X-Forwarded-For is ever read (some proxy is trusted). */
  get readsForwardedFor(): boolean {
    return this.trusted.length > 0;
  }

  private isTrusted(addr: ipaddr.IPv4 | ipaddr.IPv6): boolean {
    for (const [range, bits] of this.trusted) if (range.kind() === addr.kind() && addr.match(range, bits)) return true;
    return false;
  }

  /**
   * The client's rate-limit key from the peer's address (uWS's text) and the X-Forwarded-For header
   * ('' when absent). A peer that does not parse (never, from uWS) is its own text.
   */
  keyOf(peerText: string, forwardedFor: string): string {
    const peer = parse(peerText);
    if (!peer) return peerText;
    if (!forwardedFor || !this.isTrusted(peer)) return addressKey(peer);
    let client = peer;
    const hops = forwardedFor.split(',');
    for (let i = hops.length - 1; i >= 0; i--) {
      const hop = parse(hops[i]);
      if (!hop) break; // garbage from the client's side of our proxies: the last address we believe stands
      client = hop;
      if (!this.isTrusted(hop)) break;
    }
    return addressKey(client);
  }
}
