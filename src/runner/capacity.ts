import { readFileSync } from 'node:fs';

// How many jobs one worker runs at once when WORKER_CONCURRENCY is not set: what its memory
// budget and its file descriptors allow. Measured with bench/long-streams.ts (5 000 streams that
// wait 5 s for their first token, then stream 10 tokens): an in-flight stream costs a worker
// 3–28 KiB (an upstream socket, its HTTP parser and buffers, the job, frame and abort state; the
// reading moves with GC timing) and 0.4–1.1 ms of CPU over its whole life; the front door
// 10–18 KiB and 0.35–0.7 ms (docs/benchmarks.md). 32 KiB per stream is above every reading. Waiting costs
// no CPU at all, so the limit is memory and sockets, not a fixed count.
export const STREAM_KIB = 32;
/** descriptors kept for NATS, PostgreSQL, logs and the runtime */
const FD_RESERVE = 512;

/** The soft limit on open files (each in-flight stream holds one upstream socket). */
export function openFileLimit(limits = '/proc/self/limits'): number {
  try {
    const m = /^Max open files\s+(\d+|unlimited)/m.exec(readFileSync(limits, 'utf8'));
    if (m) return m[1] === 'unlimited' ? Number.MAX_SAFE_INTEGER : Number(m[1]);
  } catch {
    /* not Linux */
  }
  return 1024;
}

/**
 * floor(memory budget / STREAM_KIB), at most the open-file limit less a reserve, at least 1.
 * `socketsPerStream`: 1 in a worker (the upstream socket); 2 for a front door's in-process pools
 * (the client's socket too).
 */
export function defaultConcurrency(streamMemoryMb: number, nofile = openFileLimit(), socketsPerStream = 1): number {
  const byMemory = Math.floor((streamMemoryMb * 1024) / STREAM_KIB);
  return Math.max(1, Math.min(byMemory, Math.floor((nofile - FD_RESERVE) / socketsPerStream)));
}
