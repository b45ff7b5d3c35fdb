#!/usr/bin/env node
// The admin CLI (`npx catraca …`, `node bin/catraca.js …`). In a checkout with its dev
// dependencies it runs the TypeScript sources through tsx, so it is never behind them; without
// them (the Docker image, `npm ci --omit=dev`) it runs the build, dist/src/cli/main.js.
import { existsSync } from 'node:fs';
import { createRequire } from 'node:module';

const source = new URL('../src/cli/main.ts', import.meta.url);
const build = new URL('../dist/src/cli/main.js', import.meta.url);

function haveTsx() {
  try {
    createRequire(import.meta.url).resolve('tsx/esm/api');
    return true;
  } catch {
    return false;
  }
}

let entry;
if (existsSync(source) && haveTsx()) {
  const { register } = await import('tsx/esm/api');
  register();
  entry = source;
} else if (existsSync(build)) {
  entry = build;
} else {
  process.stderr.write('catraca: no build found (dist/src/cli/main.js): run `npm run build` first\n');
  process.exit(1);
}
const { main } = await import(entry.href);
await main();
