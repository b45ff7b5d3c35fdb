import { describe, expect, test } from 'vitest';
import type { CatalogEntry, Deployment } from '../catalog/catalog.ts';
import { UpstreamError } from '../providers/types.ts';
import { CIRCUIT_FAILURES, CIRCUIT_OPEN_MS, COOLDOWN_MS, countsAgainstHealth, DeploymentHealth, failoverWorthy, maxAttempts } from './deployments.ts';

const dep = (name: string, weight = 1, input = 1n): Deployment => ({
  id: name === 'primary' ? 'primary' : `dep_${name}`,
  name,
  protocol: 'openai',
  base_url: 'http://x/v1',
  api_key_env: null,
  upstream_model: 'm',
  weight,
  prices: { input, output: 1n },
  batchPrices: { input, output: 1n },
});
const entry = (...deployments: Deployment[]) => ({ id: 'v/m', deployments }) as unknown as CatalogEntry;
const names = (ds: Deployment[]) => ds.map((d) => d.name);
const t0 = 1_000_000;

describe('DeploymentHealth.plan', () => {
  test('weighted random order: each next one drawn by weight among those left', () => {
    const m = entry(dep('primary', 1), dep('b', 3));
    // r < 1/4 → primary first; else b
    expect(names(new DeploymentHealth(() => 0.1).plan(m, undefined, t0))).toEqual(['primary', 'b']);
    expect(names(new DeploymentHealth(() => 0.5).plan(m, undefined, t0))).toEqual(['b', 'primary']);
  });

  test('order, only, ignore, sort and allow_fallbacks', () => {
    const m = entry(dep('primary', 1, 5n), dep('b', 1, 1n), dep('c', 1, 3n));
    const h = new DeploymentHealth(() => 0);
    expect(names(h.plan(m, { order: ['c', 'b'] }, t0))).toEqual(['c', 'b', 'primary']);
    expect(names(h.plan(m, { order: ['c'], allow_fallbacks: false }, t0))).toEqual(['c']);
    expect(names(h.plan(m, { only: ['b', 'c'], sort: 'price' }, t0))).toEqual(['b', 'c']);
    expect(names(h.plan(m, { ignore: ['primary'], sort: 'price' }, t0))).toEqual(['b', 'c']);
    expect(names(h.plan(m, { allow_fallbacks: false, sort: 'price' }, t0))).toEqual(['b']);
  });

  test('a failure cools a deployment down (retry-after honoured, doubling), success ends it', () => {
    const a = dep('primary');
    const b = dep('b');
    const m = entry(a, b);
    const h = new DeploymentHealth(() => 0);
    h.failed(m.id, a, new UpstreamError(429, 'upstream_rate_limited', 'slow down', 30), t0);
    expect(names(h.plan(m, undefined, t0 + 29_000))).toEqual(['b']);
    expect(names(h.plan(m, undefined, t0 + 30_000))).toEqual(['primary', 'b']);
    h.failed(m.id, a, new UpstreamError(500, 'upstream_error', 'oops'), t0);
    expect(names(h.plan(m, undefined, t0 + 2 * COOLDOWN_MS - 1))).toEqual(['b']); // second failure in a row: 2 × the base
    h.succeeded(m.id, a, 10, 5, 100);
    expect(names(h.plan(m, undefined, t0))).toEqual(['primary', 'b']);
    expect(h.retryAfterS(entry(a), t0)).toBe(1);
  });

  test('the circuit opens after repeated failures, half-opens for one probe, closes on success', () => {
    const a = dep('primary');
    const m = entry(a);
    const h = new DeploymentHealth(() => 0);
    for (let i = 0; i < CIRCUIT_FAILURES; i++) h.failed(m.id, a, new UpstreamError(502, 'upstream_unreachable', 'down'), t0);
    expect(h.snapshot(t0)[0]).toMatchObject({ circuit: 'open', healthy: false, consecutive_failures: CIRCUIT_FAILURES });
    expect(h.plan(m, undefined, t0 + CIRCUIT_OPEN_MS - 1)).toEqual([]);
    expect(h.retryAfterS(m, t0)).toBe(CIRCUIT_OPEN_MS / 1000);
    // half-open: one probe goes through, no second one while it runs
    expect(names(h.plan(m, undefined, t0 + CIRCUIT_OPEN_MS))).toEqual(['primary']);
    h.attempting(m.id, a);
    expect(h.plan(m, undefined, t0 + CIRCUIT_OPEN_MS + 1)).toEqual([]);
    h.succeeded(m.id, a, 5, 1, 10);
    expect(h.snapshot(t0 + CIRCUIT_OPEN_MS + 2)[0]).toMatchObject({ circuit: 'closed', healthy: true, consecutive_failures: 0 });
  });
});

test('failoverWorthy: busy, failing, unreachable, too slow or too long a prompt; never a client error', () => {
  expect(failoverWorthy(new UpstreamError(429, 'upstream_rate_limited', ''))).toBe(true);
  expect(failoverWorthy(new UpstreamError(502, 'upstream_unreachable', ''))).toBe(true);
  expect(failoverWorthy(new UpstreamError(504, 'upstream_timeout', ''))).toBe(true);
  expect(failoverWorthy(new UpstreamError(400, 'context_length_exceeded', ''))).toBe(true);
  expect(failoverWorthy(new UpstreamError(400, 'upstream_bad_request', ''))).toBe(false);
  expect(failoverWorthy(new Error('x'))).toBe(false);
});

test('a prompt too long for the context fails over but never counts against the deployment: no cooldown, no circuit', () => {
  const tooLong = new UpstreamError(400, 'context_length_exceeded', 'too long');
  expect(failoverWorthy(tooLong)).toBe(true);
  expect(countsAgainstHealth(tooLong)).toBe(false);
  expect(countsAgainstHealth(new UpstreamError(500, 'upstream_error', ''))).toBe(true);
  expect(countsAgainstHealth(new UpstreamError(429, 'upstream_rate_limited', ''))).toBe(true);
  expect(countsAgainstHealth(new UpstreamError(400, 'upstream_bad_request', ''))).toBe(false);
});

test('an attempt that says nothing of the deployment ends a half-open probe without closing or opening the circuit', () => {
  const a = dep('primary');
  const m = entry(a);
  const h = new DeploymentHealth(() => 0);
  for (let i = 0; i < CIRCUIT_FAILURES; i++) h.failed(m.id, a, new UpstreamError(500, 'upstream_error', ''), t0);
  const probeAt = t0 + CIRCUIT_OPEN_MS;
  expect(names(h.plan(m, undefined, probeAt))).toEqual(['primary']);
  h.attempting(m.id, a);
  expect(h.plan(m, undefined, probeAt + 1)).toEqual([]);
  // the probe's prompt was too long for it: the next request may probe
  h.released(m.id, a);
  expect(names(h.plan(m, undefined, probeAt + 2))).toEqual(['primary']);
  expect(h.snapshot(probeAt + 2)[0]).toMatchObject({ circuit: 'half_open', consecutive_failures: CIRCUIT_FAILURES });
});

test('maxAttempts: every deployment the preferences allow, one with allow_fallbacks false', () => {
  const m = entry(dep('primary'), dep('b'), dep('c'));
  expect(maxAttempts(m, undefined)).toBe(3);
  expect(maxAttempts(m, { order: ['c'] })).toBe(3);
  expect(maxAttempts(m, { only: ['b', 'dep_c'] })).toBe(2);
  expect(maxAttempts(m, { ignore: ['primary'] })).toBe(2);
  expect(maxAttempts(m, { allow_fallbacks: false })).toBe(1);
  expect(maxAttempts(m, { only: ['nowhere'] })).toBe(0);
  // never fewer than plan() gives
  const h = new DeploymentHealth(() => 0.3);
  for (const routing of [undefined, { order: ['c'] }, { only: ['b', 'c'] }, { ignore: ['b'], sort: 'price' as const }, { allow_fallbacks: false }]) {
    expect(h.plan(m, routing, t0).length).toBeLessThanOrEqual(maxAttempts(m, routing));
  }
});
