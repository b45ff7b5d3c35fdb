import { spawn } from 'node:child_process';
import { existsSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import type { Logger } from '../log.ts';
import { onShutdown } from './shutdown.ts';

function recorder() {
  const lines: string[] = [];
  const log: Logger = {
    debug: (m) => void lines.push(`debug ${m}`),
    info: (m) => void lines.push(`info ${m}`),
    warn: (m) => void lines.push(`warn ${m}`),
    error: (m) => void lines.push(`error ${m}`),
  };
  return { log, lines };
}

describe('onShutdown', () => {
  it('runs the steps once and exits 0; a second signal exits 1 at once', async () => {
    const { log, lines } = recorder();
    const codes: number[] = [];
    let release!: () => void;
    let runs = 0;
    const s = onShutdown(
      log,
      () => {
        runs++;
        return new Promise<void>((r) => (release = r));
      },
      { forceAfterMs: 10_000, exit: (c) => void codes.push(c) },
    );
    const first = s.trigger('SIGTERM');
    void s.trigger('SIGTERM');
    expect(codes).toEqual([1]);
    release();
    await first;
    expect(runs).toBe(1);
    expect(codes).toEqual([1, 0]);
    expect(lines).toEqual(['info shutting down', 'warn second signal: exiting now', 'info stopped']);
  });

  it('the parent going while the stop runs (Ctrl-C reaches npm and the stack together) lets the stop finish', async () => {
    const { log, lines } = recorder();
    const codes: number[] = [];
    let release!: () => void;
    const s = onShutdown(log, () => new Promise<void>((r) => (release = r)), { forceAfterMs: 10_000, exit: (c) => void codes.push(c) });
    const first = s.trigger('SIGINT');
    void s.trigger('parent exited', 'wait');
    expect(codes).toEqual([]);
    release();
    await first;
    expect(codes).toEqual([0]);
    expect(lines).toEqual(['info shutting down', 'info stopped']);
  });

  it('exits 1 when a step fails or does not finish in time', async () => {
    const { log, lines } = recorder();
    const codes: number[] = [];
    await onShutdown(
      log,
      async () => {
        throw new Error('boom');
      },
      { forceAfterMs: 10_000, exit: (c) => void codes.push(c) },
    ).trigger('SIGINT');
    expect(codes).toEqual([1]);
    expect(lines.at(-1)).toBe('error shutdown failed');

    const hung = onShutdown(log, () => new Promise<void>(() => {}), { forceAfterMs: 20, exit: (c) => void codes.push(c) });
    void hung.trigger('SIGTERM');
    await new Promise((r) => setTimeout(r, 60));
    expect(codes).toEqual([1, 1]);
    expect(lines.at(-1)).toBe('error shutdown did not finish in time: exiting');
  });
});

describe('stopWithParent', () => {
  it('under npm start, a SIGTERM to npm stops the script too, instead of leaving it running orphaned', async () => {
    const dir = mkdtempSync(join(tmpdir(), 'catraca-orphan-'));
    const out = join(dir, 'out.log');
    let npm: ReturnType<typeof spawn> | undefined;
    try {
      writeFileSync(
        join(dir, 'script.ts'),
        `import { appendFileSync } from 'node:fs';
import { onShutdown, stopWithParent } from ${JSON.stringify(new URL('./shutdown.ts', import.meta.url).href)};
const line = (m: string, f: object = {}) => appendFileSync(${JSON.stringify(out)}, m + ' ' + JSON.stringify(f) + '\\n');
const log = { debug: line, info: line, warn: line, error: line };
const shutdown = onShutdown(log, async () => line('steps ran'), { forceAfterMs: 5000 });
if (process.env.npm_lifecycle_event) stopWithParent(shutdown, 50);
setInterval(() => {}, 1000);
line('ready');
`,
      );
      const tsx = import.meta.resolve('tsx');
      writeFileSync(join(dir, 'package.json'), JSON.stringify({ name: 'orphan', version: '1.0.0', scripts: { start: `node --import ${tsx} script.ts` } }));
      npm = spawn('npm', ['start', '--silent'], { cwd: dir, detached: true, stdio: 'ignore' });
      const lines = () => (existsSync(out) ? readFileSync(out, 'utf8').trim().split('\n') : []);
      const until = async (what: string, ok: () => boolean) => {
        for (const deadline = Date.now() + 15_000; !ok(); await new Promise((r) => setTimeout(r, 50)))
          if (Date.now() > deadline) throw new Error(`timed out waiting for ${what}: ${lines().join(' | ')}`);
      };
      await until('the script', () => lines().includes('ready {}'));
      // npm 11 passes a SIGTERM to the shell it ran the script in, which ends without passing it on
      process.kill(npm.pid!, 'SIGTERM');
      await until('the script to stop', () => lines().includes('stopped {}'));
      const [ready, shuttingDown, ...rest] = lines();
      expect([ready, ...rest]).toEqual(['ready {}', 'steps ran {}', 'stopped {}']);
      // (a later npm that passes the signal on stops it the usual way)
      expect(['shutting down {"signal":"parent exited"}', 'shutting down {"signal":"SIGTERM"}']).toContain(shuttingDown);
    } finally {
      try {
        if (npm?.pid) process.kill(-npm.pid, 'SIGKILL'); // whatever is left of its process group
      } catch {}
      rmSync(dir, { recursive: true, force: true });
    }
  }, 30_000);
});
