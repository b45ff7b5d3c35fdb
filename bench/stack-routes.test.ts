import { describe, expect, it } from 'vitest';
import { localPoolsFor, parseRoutes, phaseOrder } from './stack-routes.ts';

describe('run-stack --route', () => {
  it('takes one route or a comma list, in the order given; chat by default', () => {
    expect(parseRoutes(undefined).map((r) => r.name)).toEqual(['chat']);
    expect(parseRoutes('responses').map((r) => r.name)).toEqual(['responses']);
    expect(parseRoutes('chat,messages, responses,messages-native').map((r) => r.name)).toEqual(['chat', 'messages', 'responses', 'messages-native']);
    expect(parseRoutes('chat,gemini').map((r) => [r.name, r.api, r.model, r.direct])).toEqual([
      ['chat', 'chat', 'bench/mock', 'chat'],
      ['gemini', 'gemini', 'bench/mock', 'chat'],
    ]);
  });

  it('refuses an unknown, an empty or a repeated route', () => {
    expect(() => parseRoutes('chat,embeddings')).toThrow('unknown --route embeddings; known: chat, responses, messages, completions, messages-native, gemini');
    expect(() => parseRoutes(',')).toThrow('--route: no route given');
    expect(() => parseRoutes('chat,chat')).toThrow('--route chat given twice');
    expect(() => parseRoutes('toString')).toThrow('unknown --route toString');
  });

  it('the translated Messages route is compared with the mock’s chat, the native one with its Messages API', () => {
    const [translated, native] = parseRoutes('messages,messages-native');
    expect(translated).toMatchObject({ api: 'messages', model: 'bench/mock', pool: 'openai', direct: 'chat' });
    expect(native).toMatchObject({ api: 'messages', path: '/v1/messages', model: 'bench/claude', pool: 'anthropic', direct: 'messages' });
  });

  it('interleaves the routes round by round', () => {
    const order = phaseOrder(parseRoutes('chat,messages'), 2).map((p) => `${p.route.name}#${p.round}`);
    expect(order).toEqual(['chat#1', 'messages#1', 'chat#2', 'messages#2']);
    expect(() => phaseOrder(parseRoutes('chat'), 0)).toThrow('--rounds');
  });

  it('adds the pools the routes need to the front door’s own pools', () => {
    expect(localPoolsFor('openai,sim', parseRoutes('chat,messages'))).toBe('openai,sim');
    expect(localPoolsFor('openai,sim', parseRoutes('chat,messages-native'))).toBe('openai,sim,anthropic');
    expect(localPoolsFor(undefined, parseRoutes('messages-native'))).toBeUndefined();
  });
});

describe('run-stack: the routes side by side', () => {
  it('one column per route: CPU per process, the stack, added latency; means over the rounds', async () => {
    const { sideBySide } = await import('./run-stack.ts');
    const h = (p50: number, p99: number) => ({ count: 1, mean: p50, p50, p90: p99, p99, max: p99 }) as never;
    const target = (name: string, load: number) =>
      ({ target: name, loadavg_1m: { start: load, end: load }, errors: { total: 0, by_status: {}, by_type: {} }, total_ms: h(0, 0) }) as never;
    const phase = (route: 'chat' | 'messages-native', round: number, gateway: number, added: number) => ({
      route,
      round,
      label: `${route}#${round}`,
      results: [target('direct', 0.5), target('gateway', 0.7)],
      overhead: [
        { baseline: 'direct', target: 'gateway', metric: 'total' as const, p50_added_ms: added, p99_added_ms: 10 * added, p50_ratio: 1, p99_ratio: 1 },
        { baseline: 'direct', target: 'gateway', metric: 'ttft' as const, p50_added_ms: added / 2, p99_added_ms: 5 * added, p50_ratio: 1, p99_ratio: 1 },
      ],
      goals: [],
      metering_lag: {} as never,
      cpu_pct_gateway_phase: {},
      cpu_ms_per_request: {
        requests: 100,
        ms: { gateway: gateway, 'mock-upstream': 0.5 },
        idle_pct: {},
        stack_ms: gateway,
        mock_direct_ms: 0.5,
        ratio_to_mock: 2,
      },
    });
    const text = sideBySide(
      [phase('chat', 1, 1, 1), phase('messages-native', 1, 2, 2), phase('chat', 2, 1.5, 3), phase('messages-native', 2, 2, 2)],
      parseRoutes('chat,messages-native'),
      2,
    );
    const lines = text.split('\n');
    expect(lines[1]).toMatch(/^ms per request, mean of 2 rounds\s+chat\s+messages-native$/);
    expect(lines.find((l) => l.startsWith('gateway '))).toMatch(/1\.25\s+2$/);
    expect(lines.find((l) => l.startsWith('mock-upstream (not stack)'))).toMatch(/0\.5\s+0\.5$/);
    expect(lines.find((l) => l.startsWith('stack, lowest–highest'))).toMatch(/1–1\.5\s+2–2$/);
    expect(lines.find((l) => l.startsWith('direct phase'))).toMatch(/chat\s+messages$/);
    expect(lines.find((l) => l.startsWith('added total p50'))).toMatch(/2\s+2$/);
    expect(lines.find((l) => l.startsWith('added TTFT p99'))).toMatch(/10\s+10$/);
  });
});
