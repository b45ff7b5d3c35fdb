// The programs some integration tests need besides NATS and PostgreSQL: Debian's Chromium (the
// portal's and the console's walks in a browser) and docker-compose 1.29 (the compose file's
// `config` checks). `.ci/run` installs both. Outside CI a suite whose program is missing is skipped,
// and says so; under CI it fails: a CI run that never opened a page must not pass.
// CHROMIUM_PATH and DOCKER_COMPOSE_PATH name another binary (or, pointing nowhere, show what a
// machine without one does).
import { existsSync } from 'node:fs';
import { describe, it } from 'vitest';

/** `CI` set to anything but "false" or "0" (GitHub Actions, GitLab, .ci/run: `true`). */
export const UNDER_CI = Boolean(process.env.CI) && process.env.CI !== 'false' && process.env.CI !== '0';

export interface Tool {
  name: string;
  /** The binary found, or undefined. */
  path: string | undefined;
  /** Where it was looked for. */
  looked: string[];
  install: string;
}

function tool(name: string, envVar: string, candidates: string[], install: string): Tool {
  const named = process.env[envVar];
  const looked = named ? [named] : candidates;
  return { name, path: looked.find((p) => existsSync(p)), looked, install };
}

export const CHROMIUM = tool('Chromium', 'CHROMIUM_PATH', ['/usr/bin/chromium'], 'apt-get install chromium');
export const DOCKER_COMPOSE = tool(
  'docker-compose',
  'DOCKER_COMPOSE_PATH',
  ['/usr/bin/docker-compose', '/usr/local/bin/docker-compose'],
  'apt-get install docker-compose',
);

/** The path of a tool that a suite declared with `describeWith` (which runs its body only when it is there). */
export function pathOf(t: Tool): string {
  if (!t.path) throw new Error(`${t.name} is not installed`);
  return t.path;
}

/**
 * `describe(name, body)` when `t` is installed. Without it: under CI one failing test in its place
 * (never a skip); elsewhere the suite skipped, with a warning.
 */
export function describeWith(t: Tool, name: string, body: () => void): void {
  if (t.path) {
    describe(name, body);
    return;
  }
  const missing = `${t.name} is not installed (looked at ${t.looked.join(', ')}; ${t.install})`;
  if (UNDER_CI) {
    describe(name, () => {
      it(`needs ${t.name}`, () => {
        throw new Error(`${missing}: under CI a missing tool is a failure, never a skip`);
      });
    });
    return;
  }
  console.warn(`skipping "${name}": ${missing}`);
  describe.skip(name, body);
}
