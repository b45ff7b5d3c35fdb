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
