import type { MockUsageEntry } from './anthropic.ts';
import type { MockBatchStats } from './batch.ts';

/** What the mock vendor saw and billed, read by tests and benchmarks. */
export interface MockStats {
  requests: number;
  completed: number;
  /** client closed before the response ended */
  aborted: number;
  inFlight: number;
  lastAuthorization: string | null;
  /** the last request body as parsed JSON (tests check what the worker sent) */
  lastBody: Record<string, unknown> | null;
  /** what each answered request was billed, in order (tests add up what a client's calls cost) */
  usages: MockUsageEntry[];
  /** the path of the last request (which endpoint the worker called) */
  lastPath: string | null;
  /** chat completion requests per upstream model name (which deployment a request reached) */
  byModel: Record<string, number>;
  /** the vendor batch APIs (batch.ts): files, batches, lines, tokens and the tokens billed at the batch discount */
  batch: MockBatchStats;
}
