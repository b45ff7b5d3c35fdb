#!/usr/bin/env node
// `npm run build`: compiles src/ and workers/ to dist/ with tsc (tsconfig.build.json: type-checked,
// `.ts` import specifiers rewritten to `.js`), then copies the files the compiled code reads at run
// time next to it: the portal's and the console's static files, the SQL migrations and the SQL function files, the NFS-e schemas (src/nfse/schema)
// (src/db/migrate.ts reads both folders). dist/ is rebuilt from scratch so a deleted source never
// lingers there. `npm start` runs this first (prestart).
import { spawnSync } from 'node:child_process';
import { cpSync, existsSync, mkdirSync, readdirSync, rmSync } from 'node:fs';
import { createRequire } from 'node:module';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';

const root = join(dirname(fileURLToPath(import.meta.url)), '..');
const dist = join(root, 'dist');
const require = createRequire(join(root, 'package.json'));

/** Files read at run time relative to the module that reads them (src/… → dist/src/…). */
const ASSETS = [
  { from: 'src/portal/static', filter: (f) => /\.(css|js|svg|png|ico)$/.test(f) },
  { from: 'src/console/static', filter: (f) => /\.(css|js|svg|png|ico)$/.test(f) },
  { from: 'src/db/migrations', filter: (f) => /^\d+_.*\.sql$/.test(f) },
  { from: 'src/db/functions', filter: (f) => /\.sql$/.test(f) },
  { from: 'src/nfse/schema', filter: (f) => /\.xsd$/.test(f) },
  { from: 'src/nfse/simulator', filter: (f) => /\.json$/.test(f) },
];

let tsc;
try {
  tsc = join(dirname(require.resolve('typescript/package.json')), 'bin', 'tsc');
} catch {
  console.error('build: typescript is not installed (it is a dev dependency): run `npm install` first');
  process.exit(1);
}

const started = Date.now();
rmSync(dist, { recursive: true, force: true });
const r = spawnSync(process.execPath, [tsc, '-p', join(root, 'tsconfig.build.json')], { cwd: root, stdio: 'inherit' });
if (r.status !== 0) {
  console.error(`build: tsc failed (exit ${r.status ?? r.signal}); dist/ is incomplete`);
  rmSync(dist, { recursive: true, force: true });
  process.exit(1);
}
for (const { from, filter } of ASSETS) {
  const src = join(root, from);
  const dest = join(dist, from);
  mkdirSync(dest, { recursive: true });
  for (const f of readdirSync(src)) if (filter(f)) cpSync(join(src, f), join(dest, f));
}
if (!existsSync(join(dist, 'src/stack/main.js'))) {
  console.error('build: dist/src/stack/main.js is missing after tsc');
  process.exit(1);
}
console.error(`build: dist/ ready in ${Date.now() - started} ms`);
