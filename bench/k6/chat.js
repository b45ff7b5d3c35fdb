// k6 script for catraca: the scenarios of bench/scenarios.json (same names, rates, durations,
// thresholds as the Node runner, bench/load/main.ts).
//
//   k6 run -e SCENARIO=stream-500 -e GATEWAY_URL=http://127.0.0.1:8080/v1 -e API_KEY=sk-… bench/k6/chat.js
//   # the same load direct to the mock first, then through the gateway, overhead in the summary:
//   k6 run -e SCENARIO=stream-500 -e DIRECT_URL=http://127.0.0.1:9100/v1 -e DIRECT_MODEL=mock-gpt \
//          -e GATEWAY_URL=http://127.0.0.1:8080/v1 -e API_KEY=sk-… bench/k6/chat.js
//
// Env: SCENARIO (default stream-500), GATEWAY_URL (or BASE_URL), API_KEY, MODEL (default
// bench/mock), DIRECT_URL, DIRECT_KEY (default sk-mock), DIRECT_MODEL (default mock-gpt),
// DURATION / WARMUP / RATE to override the scenario, SUMMARY_FILE (default
// bench/results/k6-<scenario>.json).
//
// Streaming: stock k6 reads the whole response before returning, so it cannot time the first
// token. It reports `ttfb_ms` (= http_req_waiting: request sent → first response byte). For the
// gateway the first byte is the status line, sent when the job is accepted, before the first
// token; so TTFB is a lower bound of TTFT. The body is parsed after the fact: `[DONE]` seen, no
// error event, content chunks counted. True TTFT and inter-token gaps: use the Node runner, or
// k6 built with the xk6-sse extension.

import http from 'k6/http';
import { check } from 'k6';
import { Counter, Rate, Trend } from 'k6/metrics';
import { parseStream } from './sse.js';

const file = JSON.parse(open('../scenarios.json'));
const NAME = __ENV.SCENARIO || 'stream-500';
const raw = file.scenarios[NAME];
if (!raw) throw new Error(`unknown scenario ${NAME}; known: ${Object.keys(file.scenarios).join(', ')}`);
const d = file.defaults;
const sc = {
  mode: raw.mode,
  rate: Number(__ENV.RATE || raw.rate || 0),
  concurrency: raw.concurrency || 0,
  stream: raw.stream,
  warmup: Number(__ENV.WARMUP || raw.warmup_s || d.warmup_s),
  duration: Number(__ENV.DURATION || raw.duration_s || d.duration_s),
  maxTokens: raw.max_tokens || d.max_tokens,
  k6: raw.k6,
};

const GATEWAY_URL = (__ENV.GATEWAY_URL || __ENV.BASE_URL || 'http://127.0.0.1:8080/v1').replace(/\/$/, '');
const DIRECT_URL = __ENV.DIRECT_URL ? __ENV.DIRECT_URL.replace(/\/$/, '') : '';
const TARGETS = {
  gateway: { url: GATEWAY_URL, key: __ENV.API_KEY || '', model: __ENV.MODEL || d.model },
  direct: { url: DIRECT_URL, key: __ENV.DIRECT_KEY || 'sk-mock', model: __ENV.DIRECT_MODEL || 'mock-gpt' },
};

const ttfb = new Trend('ttft_lower_bound_ms', true);
const total = new Trend('total_ms', true);
const streamErrors = new Counter('stream_errors');
const incomplete = new Counter('stream_incomplete');
const contentChunks = new Counter('content_chunks');
const ok = new Rate('request_ok');

function executor(target, startS) {
  const common = { exec: 'chat', env: { TARGET: target }, tags: { target }, startTime: `${startS}s`, gracefulStop: '30s' };
  const seconds = sc.warmup + sc.duration;
  if (sc.mode === 'open') {
    // pre-allocate what the load needs at a 2-second request time; k6 drops (dropped_iterations) beyond maxVUs
    return {
      ...common,
      executor: 'constant-arrival-rate',
      rate: sc.rate,
      timeUnit: '1s',
      duration: `${seconds}s`,
      preAllocatedVUs: Math.max(10, Math.ceil(sc.rate * 0.5)),
      maxVUs: Math.max(50, sc.rate * 4),
    };
  }
  return { ...common, executor: 'constant-vus', vus: sc.concurrency, duration: `${seconds}s` };
}

const scenarios = {};
const phase = sc.warmup + sc.duration + 35; // + graceful stop + a pause between targets
if (DIRECT_URL) {
  scenarios.direct = executor('direct', 0);
  scenarios.gateway = executor('gateway', phase);
} else {
  scenarios.gateway = executor('gateway', 0);
}

// Thresholds on the gateway (k6 sees absolute times, so they are: nominal mock time + goal + the
// direct p99 measured on the reference machine; see bench/README.md). The warm-up is part of
// the k6 run: k6 has no unrecorded warm-up, so thresholds include it.
const thresholds = {
  'request_ok{target:gateway}': [`rate>=${1 - sc.k6.max_error_rate}`],
  'http_req_failed{target:gateway}': [`rate<=${sc.k6.max_error_rate}`],
  dropped_iterations: ['count==0'],
  'total_ms{target:gateway}': sc.k6.total_p99_ms ? [`p(99)<${sc.k6.total_p99_ms}`] : ['p(99)>=0'],
  'ttft_lower_bound_ms{target:gateway}': sc.k6.ttft_p99_ms && sc.stream ? [`p(99)<${sc.k6.ttft_p99_ms}`] : ['p(99)>=0'],
};
if (DIRECT_URL) {
  // always-true thresholds so the per-target sub-metrics appear in the summary
  thresholds['total_ms{target:direct}'] = ['p(99)>=0'];
  thresholds['ttft_lower_bound_ms{target:direct}'] = ['p(99)>=0'];
}

export const options = {
  scenarios,
  thresholds,
  summaryTrendStats: ['avg', 'min', 'med', 'p(90)', 'p(99)', 'max'],
  discardResponseBodies: false,
  noConnectionReuse: false,
};

export function chat() {
  const t = TARGETS[__ENV.TARGET];
  const body = { model: t.model, messages: [{ role: 'user', content: d.prompt }], stream: sc.stream, max_tokens: sc.maxTokens };
  if (sc.stream) body.stream_options = { include_usage: true };
  const res = http.post(`${t.url}/chat/completions`, JSON.stringify(body), {
    headers: { 'content-type': 'application/json', authorization: `Bearer ${t.key}` },
    timeout: `${d.timeout_ms}ms`,
    tags: { target: __ENV.TARGET },
  });
  const tags = { target: __ENV.TARGET };
  total.add(res.timings.duration, tags);
  let good = res.status === 200;
  if (good && sc.stream) {
    const r = parseStream(res.body || '');
    contentChunks.add(r.content, tags);
    if (r.error) {
      streamErrors.add(1, tags);
      good = false;
    } else if (!r.done || r.content === 0) {
      incomplete.add(1, tags);
      good = false;
    }
    ttfb.add(res.timings.waiting, tags);
  } else if (good) {
    good = (res.body || '').indexOf('"choices"') !== -1;
  }
  ok.add(good, tags);
  check(res, { 'status 200': (r) => r.status === 200 }, tags);
}

function stat(data, name, s) {
  const m = data.metrics[name];
  return m && m.values && m.values[s] !== undefined ? m.values[s] : null;
}

export function handleSummary(data) {
  const lines = [
    `catraca k6: ${NAME} (${sc.mode === 'open' ? `${sc.rate} req/s` : `${sc.concurrency} VUs`}, ${sc.warmup}+${sc.duration} s, ${sc.stream ? 'streamed' : 'not streamed'})`,
  ];
  const rows = [];
  for (const target of DIRECT_URL ? ['direct', 'gateway'] : ['gateway']) {
    rows.push({
      target,
      total_p50: stat(data, `total_ms{target:${target}}`, 'med'),
      total_p99: stat(data, `total_ms{target:${target}}`, 'p(99)'),
      ttfb_p50: stat(data, `ttft_lower_bound_ms{target:${target}}`, 'med'),
      ttfb_p99: stat(data, `ttft_lower_bound_ms{target:${target}}`, 'p(99)'),
    });
  }
  for (const r of rows)
    lines.push(`${r.target}: total p50 ${fmt(r.total_p50)} p99 ${fmt(r.total_p99)} ms; ttfb p50 ${fmt(r.ttfb_p50)} p99 ${fmt(r.ttfb_p99)} ms`);
  let overhead = null;
  if (rows.length === 2) {
    const [a, b] = rows;
    overhead = {
      total_p50_added_ms: diff(b.total_p50, a.total_p50),
      total_p99_added_ms: diff(b.total_p99, a.total_p99),
      ttfb_p50_added_ms: diff(b.ttfb_p50, a.ttfb_p50),
      ttfb_p99_added_ms: diff(b.ttfb_p99, a.ttfb_p99),
    };
    lines.push(
      `gateway overhead: total p50 +${fmt(overhead.total_p50_added_ms)} ms, p99 +${fmt(overhead.total_p99_added_ms)} ms; ttfb p50 +${fmt(overhead.ttfb_p50_added_ms)} ms, p99 +${fmt(overhead.ttfb_p99_added_ms)} ms (goals: p50 ≤ ${raw.goals.added_p50_ms ?? '-'} ms, p99 ≤ ${raw.goals.added_p99_ms ?? '-'} ms)`,
    );
  }
  const dropped = stat(data, 'dropped_iterations', 'count') || 0;
  lines.push(`dropped iterations: ${dropped}`);
  const out = __ENV.SUMMARY_FILE || `bench/results/k6-${NAME}.json`;
  return {
    stdout: lines.join('\n') + '\n',
    [out]: JSON.stringify({ scenario: NAME, rows, overhead, dropped, metrics: data.metrics }, null, 2),
  };
}

function diff(a, b) {
  return a === null || b === null ? null : Math.round((a - b) * 1000) / 1000;
}
function fmt(v) {
  return v === null ? 'n/a' : (Math.round(v * 1000) / 1000).toString();
}
