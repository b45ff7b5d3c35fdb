// Memory of a process over time, for soaks (not product code): every 10 s one JSON line of
// process.memoryUsage() and the V8 heap spaces' sizes (KiB) to $MEM_LOG_DIR (default
// bench/results/mem)/<entry>-<pid>.jsonl. It tells V8's old space (what a leak grows) from its
// young generation (resized 1–32 MiB by the scavenger: the steps a short run's RSS shows) and
// from memory outside the heap. Every stack process of a soak loads it with
//   BENCH_NODE_ARGS="--require ./bench/mem-log.cjs" npx tsx bench/soak.ts …
const fs = require('node:fs');
const path = require('node:path');
const v8 = require('node:v8');

const dir = process.env.MEM_LOG_DIR || path.join(__dirname, 'results', 'mem');
const entry = (process.argv[1] || 'node')
  .split(/[\\/]/)
  .slice(-2)
  .join('-')
  .replace(/[^a-z0-9._-]+/gi, '_');
const file = path.join(dir, `${entry}-${process.pid}.jsonl`);
fs.mkdirSync(dir, { recursive: true });
const t0 = Date.now();
const kib = (n) => Math.round(n / 1024);
setInterval(() => {
  const m = process.memoryUsage();
  const spaces = Object.fromEntries(v8.getHeapSpaceStatistics().map((s) => [s.space_name, kib(s.space_size)]));
  const line = {
    t: Math.round((Date.now() - t0) / 1000),
    rss: kib(m.rss),
    heapTotal: kib(m.heapTotal),
    heapUsed: kib(m.heapUsed),
    external: kib(m.external),
    spaces,
  };
  fs.appendFileSync(file, `${JSON.stringify(line)}\n`);
}, 10_000).unref();
