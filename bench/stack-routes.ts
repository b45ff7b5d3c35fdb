import type { Route } from './load/runner.ts';

// The public routes bench/run-stack.ts can send its gateway phase to (`--route a,b,c`), what each
// sends and what it is compared with. Each gateway phase has a direct phase of its own beside it,
// the same load sent straight to the mock in the protocol the gateway speaks to the vendor.

export type StackRouteName = 'chat' | 'responses' | 'messages' | 'completions' | 'messages-native' | 'gemini';

export interface StackRoute {
  name: StackRouteName;
  /** the load runner's wire format for the gateway phase */
  api: Route;
  /** the gateway's path, for the log */
  path: string;
  /** the gateway model: bench/mock (the mock's chat API, pool openai) or bench/claude (its Messages API, pool anthropic) */
  model: 'bench/mock' | 'bench/claude';
  /** the pool that serves the model (the front door or a worker must serve it) */
  pool: 'openai' | 'anthropic';
  /** the direct phase: the mock's chat API (mock-gpt) or its Anthropic Messages API (mock-claude) */
  direct: 'chat' | 'messages';
}

export const STACK_ROUTES: Record<StackRouteName, StackRoute> = {
  chat: { name: 'chat', api: 'chat', path: '/v1/chat/completions', model: 'bench/mock', pool: 'openai', direct: 'chat' },
  responses: { name: 'responses', api: 'responses', path: '/v1/responses', model: 'bench/mock', pool: 'openai', direct: 'chat' },
  // Anthropic's Messages API translated to the vendor's chat completions
  messages: { name: 'messages', api: 'messages', path: '/v1/messages', model: 'bench/mock', pool: 'openai', direct: 'chat' },
  completions: { name: 'completions', api: 'completions', path: '/v1/completions', model: 'bench/mock', pool: 'openai', direct: 'chat' },
  // Anthropic's Messages API to an Anthropic-protocol vendor (the mock's /v1/messages): no translation
  'messages-native': { name: 'messages-native', api: 'messages', path: '/v1/messages', model: 'bench/claude', pool: 'anthropic', direct: 'messages' },
  // Google's Gemini API translated to the vendor's chat completions
  gemini: { name: 'gemini', api: 'gemini', path: '/v1beta/models/bench/mock:streamGenerateContent', model: 'bench/mock', pool: 'openai', direct: 'chat' },
};

/** `--route chat,messages,responses` → the routes in that order (default chat); an unknown or repeated name throws. */
export function parseRoutes(text: string | undefined): StackRoute[] {
  const names = (text ?? 'chat')
    .split(',')
    .map((s) => s.trim())
    .filter(Boolean);
  if (!names.length) throw new Error('--route: no route given');
  const out: StackRoute[] = [];
  for (const n of names) {
    const r = Object.hasOwn(STACK_ROUTES, n) ? STACK_ROUTES[n as StackRouteName] : undefined;
    if (!r) throw new Error(`unknown --route ${n}; known: ${Object.keys(STACK_ROUTES).join(', ')}`);
    if (out.includes(r)) throw new Error(`--route ${n} given twice (--rounds N repeats every route)`);
    out.push(r);
  }
  return out;
}

/**
 * The order of the phases: every route once per round, in the order given (chat, messages, chat,
 * messages, … with two routes and two rounds), so that a drift of the machine's load is shared.
 */
export function phaseOrder(routes: StackRoute[], rounds: number): Array<{ route: StackRoute; round: number }> {
  if (!Number.isInteger(rounds) || rounds < 1) throw new Error(`--rounds must be a whole number ≥ 1, got ${rounds}`);
  const out: Array<{ route: StackRoute; round: number }> = [];
  for (let round = 1; round <= rounds; round++) for (const route of routes) out.push({ route, round });
  return out;
}

/** GATEWAY_LOCAL_POOLS with every pool the routes need (an Anthropic-protocol route needs `anthropic`); unchanged when not set. */
export function localPoolsFor(localPools: string | undefined, routes: StackRoute[]): string | undefined {
  if (!localPools) return localPools;
  const pools = localPools
    .split(',')
    .map((s) => s.trim())
    .filter(Boolean);
  for (const r of routes) if (!pools.includes(r.pool)) pools.push(r.pool);
  return pools.join(',');
}
