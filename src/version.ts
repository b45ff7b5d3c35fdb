// The one version of every catraca process (monitoring, /healthz, `catraca --version`), read from
// package.json. Found by walking up from this file, so it works from the sources (src/version.ts)
// and from the build (dist/src/version.js) alike.
import { existsSync, readFileSync } from 'node:fs';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';

export function readPackageJson(from = dirname(fileURLToPath(import.meta.url))): { name: string; version: string; path: string } {
  for (let dir = from; ; dir = dirname(dir)) {
    const path = join(dir, 'package.json');
    if (existsSync(path)) {
      const pkg = JSON.parse(readFileSync(path, 'utf8')) as { name?: string; version?: string };
      if (pkg.name === 'catraca' && pkg.version) return { name: pkg.name, version: pkg.version, path };
    }
    if (dirname(dir) === dir) throw new Error(`catraca's package.json not found above ${from}`);
  }
}

export const VERSION: string = readPackageJson().version;
