import type { Job } from '../bus/messages.ts';
import type { CatalogEntry, Deployment } from '../catalog/catalog.ts';
import type { DeploymentHealthView } from '../bus/monitoring.ts';
import { isUpstreamError } from '../providers/types.ts';

// Which deployment of a model a job tries, in what order, and what this runner has learnt of each:
//
//   cooldown  a deployment that answered 429, 5xx, timed out or could not be reached is not called
//             for COOLDOWN_MS (or the vendor's retry-after), doubling with each further failure in a
//             row up to MAX_COOLDOWN_MS;
//   circuit   after CIRCUIT_FAILURES failures in a row it opens for CIRCUIT_OPEN_MS; then it is
//             half-open: one request probes it (success closes it, failure opens it again);
//   order     healthy deployments by weight (a weighted random order), or as the request's
//             `provider` preferences say (order, only, ignore, sort by price, throughput or
//             latency); allow_fallbacks false tries the first one only.
// Each runner (a worker process, a front door's in-process pools) keeps its own view.

export const COOLDOWN_MS = 5_000;
export const MAX_COOLDOWN_MS = 60_000;
export const CIRCUIT_FAILURES = 5;
export const CIRCUIT_OPEN_MS = 30_000;
const EWMA = 0.2;

export type Routing = NonNullable<Job['routing']>;

interface State {
  failures: number;
  cooldownUntil: number;
  circuit: 'closed' | 'open' | 'half_open';
  openedAt: number;
  probing: boolean;
  /** ms to the first event, smoothed */
  ttftMs: number | null;
  /** output tokens per second once streaming, smoothed */
  tokensPerSecond: number | null;
  served: number;
  failed: number;
  lastError: string | null;
}

export class DeploymentHealth {
  private readonly states = new Map<string, State>();
  private readonly names = new Map<string, { model: string; name: string }>();

  constructor(private readonly random: () => number = Math.random) {}

  private state(model: string, d: Deployment): State {
    const key = `${model}\u0000${d.id}`;
    let s = this.states.get(key);
    if (!s) {
      s = {
        failures: 0,
        cooldownUntil: 0,
        circuit: 'closed',
        openedAt: 0,
        probing: false,
        ttftMs: null,
        tokensPerSecond: null,
        served: 0,
        failed: 0,
        lastError: null,
      };
      this.states.set(key, s);
      this.names.set(key, { model, name: d.name });
    }
    return s;
  }

  /** Whether a request may be sent to it now (a half-open circuit lets one probe through). */
  private callable(s: State, now: number): boolean {
    if (s.circuit === 'open') {
      if (now - s.openedAt < CIRCUIT_OPEN_MS) return false;
      s.circuit = 'half_open';
      s.probing = false;
    }
    if (s.circuit === 'half_open') return !s.probing;
    return now >= s.cooldownUntil;
  }

  /**
   * The deployments to try for one job, in order: those the preferences allow and that are not
   * cooling down; an empty list when every allowed one is (the caller answers with the soonest retry).
   */
  plan(model: CatalogEntry, routing: Routing | undefined, now = Date.now()): Deployment[] {
    const allowed = model.deployments.filter((d) => matches(d, routing?.only ?? null, true) && !matches(d, routing?.ignore ?? null, false));
    const ready = allowed.filter((d) => this.callable(this.state(model.id, d), now));
    const ordered = this.order(model.id, ready, routing);
    if (routing?.allow_fallbacks === false) ordered.splice(1);
    return ordered;
  }

  /** A request goes to `d` now: a half-open circuit lets no other through until this one ends. */
  attempting(model: string, d: Deployment): void {
    const s = this.state(model, d);
    if (s.circuit === 'half_open') s.probing = true;
  }

  /** Seconds until the first allowed deployment may be called again (for a retry-after). */
  retryAfterS(model: CatalogEntry, now = Date.now()): number {
    let soonest = Number.POSITIVE_INFINITY;
    for (const d of model.deployments) {
      const s = this.state(model.id, d);
      const at = s.circuit === 'open' ? s.openedAt + CIRCUIT_OPEN_MS : s.cooldownUntil;
      soonest = Math.min(soonest, at);
    }
    return Math.max(1, Math.ceil((soonest - now) / 1000));
  }

  private order(model: string, ready: Deployment[], routing: Routing | undefined): Deployment[] {
    const named = routing?.order?.length
      ? routing.order.flatMap((n) => ready.filter((d) => d.name === n || d.id === n)).filter((d, i, a) => a.indexOf(d) === i)
      : [];
    const rest = ready.filter((d) => !named.includes(d));
    const sort = routing?.sort;
    let tail: Deployment[];
    if (sort === 'price') tail = [...rest].sort((a, b) => cmp(a.prices.input + a.prices.output, b.prices.input + b.prices.output));
    else if (sort === 'latency') tail = [...rest].sort((a, b) => (this.state(model, a).ttftMs ?? 0) - (this.state(model, b).ttftMs ?? 0));
    else if (sort === 'throughput') tail = [...rest].sort((a, b) => (this.state(model, b).tokensPerSecond ?? 0) - (this.state(model, a).tokensPerSecond ?? 0));
    else tail = this.weighted(rest);
    // with an explicit order, the others are fallbacks only if allowed
    if (routing?.order?.length && routing.allow_fallbacks === false) return named;
    return [...named, ...tail];
  }

  /** A weighted random order: each next deployment drawn with probability weight / remaining weight. */
  private weighted(ds: Deployment[]): Deployment[] {
    const left = [...ds];
    const out: Deployment[] = [];
    while (left.length) {
      let total = 0;
      for (const d of left) total += d.weight;
      let r = this.random() * total;
      let i = 0;
      for (; i < left.length - 1; i++) {
        r -= left[i].weight;
        if (r < 0) break;
      }
      out.push(left.splice(i, 1)[0]);
    }
    return out;
  }

  succeeded(model: string, d: Deployment, ttftMs: number | null, tokens: number, streamMs: number): void {
    const s = this.state(model, d);
    s.failures = 0;
    s.cooldownUntil = 0;
    s.circuit = 'closed';
    s.probing = false;
    s.served++;
    if (ttftMs !== null) s.ttftMs = s.ttftMs === null ? ttftMs : s.ttftMs + EWMA * (ttftMs - s.ttftMs);
    if (tokens > 0 && streamMs > 0) {
      const tps = (tokens * 1000) / streamMs;
      s.tokensPerSecond = s.tokensPerSecond === null ? tps : s.tokensPerSecond + EWMA * (tps - s.tokensPerSecond);
    }
  }

  /** An attempt ended in a way that says nothing about the deployment: a half-open probe is over, nothing else changes. */
  released(model: string, d: Deployment): void {
    this.state(model, d).probing = false;
  }

  /** A failure that says the deployment is unwell (not a client's bad request): cooldown, maybe the circuit. */
  failed(model: string, d: Deployment, err: unknown, now = Date.now()): void {
    const s = this.state(model, d);
    s.failures++;
    s.failed++;
    s.probing = false;
    s.lastError = isUpstreamError(err) ? err.code : err instanceof Error ? err.message : String(err);
    const retryAfterMs = isUpstreamError(err) && err.retryAfter !== undefined ? err.retryAfter * 1000 : 0;
    const backoff = Math.min(MAX_COOLDOWN_MS, COOLDOWN_MS * 2 ** (s.failures - 1));
    s.cooldownUntil = now + Math.max(retryAfterMs, backoff);
    if (s.circuit === 'half_open' || s.failures >= CIRCUIT_FAILURES) {
      s.circuit = 'open';
      s.openedAt = now;
    }
  }

  snapshot(now = Date.now()): DeploymentHealthView[] {
    const out: DeploymentHealthView[] = [];
    for (const [key, s] of this.states) {
      const { model, name } = this.names.get(key)!;
      const open = s.circuit === 'open' && now - s.openedAt < CIRCUIT_OPEN_MS;
      const cooling = Math.max(0, s.cooldownUntil - now);
      out.push({
        model,
        deployment: key.slice(model.length + 1),
        name,
        healthy: !open && cooling === 0,
        circuit: open ? 'open' : s.circuit === 'open' ? 'half_open' : s.circuit,
        cooldown_ms: cooling,
        consecutive_failures: s.failures,
        served: s.served,
        failed: s.failed,
        ttft_ms: s.ttftMs === null ? null : Math.round(s.ttftMs),
        tokens_per_second: s.tokensPerSecond === null ? null : Math.round(s.tokensPerSecond * 10) / 10,
        last_error: s.lastError,
      });
    }
    return out;
  }
}

function matches(d: Deployment, names: string[] | null, whenNone: boolean): boolean {
  if (!names || names.length === 0) return whenNone;
  return names.includes(d.name) || names.includes(d.id);
}

/**
 * The most deployments DeploymentHealth.plan can give one job of this model with these preferences:
 * each is an attempt the vendor may bill (its prompt, when cut after it was sent), so the front
 * door's hold pays for this many.
 */
export function maxAttempts(model: Pick<CatalogEntry, 'deployments'>, routing: Routing | undefined): number {
  if (!routing) return model.deployments.length;
  let n = 0;
  for (const d of model.deployments) if (matches(d, routing.only ?? null, true) && !matches(d, routing.ignore ?? null, false)) n++;
  return routing.allow_fallbacks === false ? Math.min(n, 1) : n;
}

const cmp = (a: bigint, b: bigint) => (a < b ? -1 : a > b ? 1 : 0);

/**
 * Whether a failure before the first byte is worth another deployment or model: the vendor was
 * busy, failing, unreachable, too slow, not configured on this worker, or the prompt was too long
 * for it. A request the vendor refused for what it says (400) is not.
 */
export function failoverWorthy(err: unknown): boolean {
  if (!isUpstreamError(err)) return false;
  return err.status === 429 || err.status >= 500 || err.code === 'context_length_exceeded';
}

/**
 * Whether a failure worth failing over for also says the deployment is unwell (cooldown, circuit).
 * A prompt too long for its context does not: it is the request's, and counting it would let one
 * tenant's long prompts open a shared deployment's circuit for every tenant.
 */
export function countsAgainstHealth(err: unknown): boolean {
  return failoverWorthy(err) && !(isUpstreamError(err) && err.code === 'context_length_exceeded');
}
