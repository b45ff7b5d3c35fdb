import type { Job, ToolCallDelta, UsageCount } from '../bus/messages.ts';
import type { CatalogEntry } from '../catalog/catalog.ts';

// The contract between the worker loop and one upstream vendor (Portkey style: one folder per
// provider under src/providers/<provider>/, each exporting an `Adapter`).

/** Tokens as the vendor billed them (OpenAI's convention: prompt counts cache reads and writes). */
export type TokenUsage = UsageCount;

export type AdapterEvent =
  /** A piece of the assistant's text, in order; concatenating every delta gives the output. */
  | { type: 'delta'; content: string }
  /** Pieces of tool calls (OpenAI delta shape, merged by index by whoever assembles them). */
  | { type: 'tool_calls'; tool_calls: ToolCallDelta[] }
  /** Reasoning text streamed before or beside the answer (billed as output by the vendor's usage). */
  | { type: 'reasoning'; content: string }
  /** The signature that closes a reasoning block (Anthropic thinking), to be returned to the vendor as is. */
  | { type: 'reasoning_signature'; signature: string }
  /** A reasoning block the vendor sent encrypted (Anthropic redacted_thinking). */
  | { type: 'redacted_reasoning'; data: string }
  /** The vendor's prompt count, reported before the output (Anthropic's message_start). */
  | { type: 'prompt_usage'; prompt_tokens: number; cached_tokens?: number; cache_write_tokens?: number; cache_write_1h_tokens?: number }
  /** Usage for the whole request. `estimated` when the adapter counted tokens itself. */
  | ({ type: 'usage'; estimated?: boolean } & TokenUsage)
  /** The upstream's finish_reason ('stop', 'length', 'content_filter', 'tool_calls', …), and the stop sequence that ended it. */
  | { type: 'finish'; reason: string; stop_sequence?: string }
  /** A whole answer that is not a token stream (embeddings, token counts): its JSON body, in our shape. */
  | { type: 'body'; json: string };

/** One job on its way to the vendor: what the client asked, and the worker's own catalog entry. */
export interface UpstreamCall {
  job: Job;
  /** Resolved by the worker from its own catalog (never from the job): upstream, key variable, bounds. */
  model: CatalogEntry;
  /** Set by the adapter once the request was handed to the vendor: from then on it may bill the prompt. */
  sent: boolean;
  /** Set by the adapter when the vendor accepted the request (a 2xx answer): it bills the prompt. */
  accepted: boolean;
}

export function newCall(job: Job, model: CatalogEntry): UpstreamCall {
  return { job, model, sent: false, accepted: false };
}

export interface Adapter {
  readonly name: string;
  /**
   * Streams one job from the upstream, calling `emit` for each event as it arrives (synchronously,
   * in order). Resolves when the vendor finished; rejects with an `UpstreamError` when it failed.
   * Aborting `signal` must stop the upstream call promptly (the promise then rejects or resolves).
   */
  stream(call: UpstreamCall, signal: AbortSignal, emit: (ev: AdapterEvent) => void): Promise<void>;
  /**
   * Token counts for a request that ended without an upstream usage event (cancelled, failed
   * mid-stream, or an upstream that never reports usage), given the text generated so far.
   */
  countUsage(call: UpstreamCall, output: string): Promise<{ usage: TokenUsage; estimated: boolean }>;
  /** Loads what the adapter needs (e.g. tokenizer ranks) before the worker takes jobs. */
  warmup?(): Promise<void>;
}

/**
 * A failure of the upstream call, already mapped to what the client should see: `status` is the
 * HTTP status the front door answers with, `code` is our stable error code, `message` is safe to
 * show (never contains an upstream key).
 */
export class UpstreamError extends Error {
  constructor(
    readonly status: number,
    readonly code: string,
    message: string,
    /** Seconds the client should wait, when the upstream said so (429). */
    readonly retryAfter?: number,
  ) {
    super(message);
    this.name = 'UpstreamError';
  }
}

export const isUpstreamError = (err: unknown): err is UpstreamError => err instanceof UpstreamError;
