import type { Done, ExtendedDelta } from '../bus/frames.ts';
import type { Job, JobApi, UsageCount } from '../bus/messages.ts';
import type { CatalogEntry } from '../catalog/catalog.ts';
import type { ParamRefusal } from '../chat/params.ts';
import type { Config } from '../config.ts';
import type { ApiKeyRecord } from '../db/keys.ts';
import type { Db } from '../db/pool.ts';
import type { CatracaError } from '../errors.ts';
import type { Collected } from './collector.ts';

// A public protocol (chat completions, Anthropic messages, responses, embeddings, legacy
// completions) as the front door's shared pipeline sees it: how to read a request, what it may
// cost at most, what job it becomes, and how the answer is written back. Admission, dispatch,
// relay and billing are the pipeline's (src/gateway/exchange.ts), the same for every protocol.

export type ProtocolName = 'chat' | 'messages' | 'count_tokens' | 'responses' | 'embeddings' | 'completions' | 'gemini' | 'gemini_count_tokens';

/** What a catalog model is for: chat routes serve `chat` models, /v1/embeddings `embedding` ones. */
export type ModelKind = 'chat' | 'embedding';

/** A request as the pipeline needs it; `body` is the protocol's own, `model` removed. */
export interface ParsedRequest {
  /** the model as named by the client: a catalog id or an alias */
  model: string;
  stream: boolean;
  body: Record<string, unknown>;
  /** the client's own end user (OpenAI's `user`, Anthropic's metadata.user_id), recorded per request */
  endUser?: string;
  /** models to try, in order, when `model` fails before its first byte (OpenRouter's `models`) */
  fallbacks?: string[];
  /** OpenRouter's provider preferences over the model's deployments */
  routing?: NonNullable<Job['routing']>;
}

/** How a request ended, for the encoder: what it generated and what it cost. */
export interface Ending {
  /** OpenAI's finish reason (stop, length, tool_calls, content_filter) */
  finishReason: string;
  stopSequence?: string;
  usage: UsageCount;
  estimated: boolean;
  /** what the tenant is debited, micro-BRL */
  costMicros: bigint;
}

/** Writes one request's answer in its protocol's wire format. */
export interface ResponseEncoder {
  /** Streamed: what opens the stream (sent with the first delta, or alone when the stream ends). */
  open(): string;
  /** Streamed, per token: `literal` is the JSON string literal of the text, copied as it is. */
  text(literal: Uint8Array): string | Uint8Array;
  /** Streamed: reasoning, signatures, tool-call pieces (and text that came with them). */
  delta(d: ExtendedDelta): string;
  /** Streamed: a comment or ping that keeps an idle stream open. */
  keepalive(): string;
  /** Streamed: the end of the stream (finish, usage, terminator). */
  close(end: Ending): string;
  /** Streamed: a failure after the stream opened, then its end. */
  fail(e: CatracaError): string;
  /** Not streamed: the whole answer. */
  body(out: Collected, end: Ending): unknown;
  /**
   * Work the end of a completed request waits for (responses: storing the answer, so that it can be
   * read as soon as the client sees it completed); called before `close` or `body`. Never rejects.
   */
  beforeEnd?(out: Collected, end: Ending): Promise<void> | undefined;
}

/** What a protocol's `prepare` may use besides the request. */
export interface PrepareContext {
  requestId: string;
  key: ApiKeyRecord;
  db: Db;
  config: Config;
}

export interface EncoderContext {
  requestId: string;
  /** the catalog id of the model that answers */
  model: string;
  /** epoch seconds */
  created: number;
  streaming: boolean;
}

export interface Protocol<R extends ParsedRequest = ParsedRequest> {
  readonly name: ProtocolName;
  /** the path, for spans and logs */
  readonly path: string;
  readonly kind: ModelKind;
  /** the field that names the client's end user (default `user`) */
  readonly endUserParam?: string;
  /** free routes (token counts) hold and debit nothing */
  readonly free?: boolean;
  /** Reads the body (zod); throws a 400 CatracaError naming the field. */
  parse(json: Record<string, unknown>): R;
  /**
   * Work that needs the database or the caller's key, after `parse` and before anything is checked
   * or held (responses: the stored conversation `previous_response_id` continues). Throws a
   * CatracaError to refuse.
   */
  prepare?(req: R, ctx: PrepareContext): Promise<void>;
  /** Fields this model cannot take or we cannot bill: the refusal, or null. */
  check(req: R, model: CatalogEntry): ParamRefusal | null;
  /** Most prompt tokens the vendor can bill for this request (sizes the hold). */
  inputBound(req: R, model: CatalogEntry): number;
  /**
   * The output cap the client asked for (null: none, the model's maximum applies), the field that
   * carries it, and whether a cap above the model's maximum is lowered to it instead of refused.
   */
  outputCap(req: R): { requested: number | null; param: string; clamp: boolean };
  /** The job for this model: the vendor's own API where its adapter takes it, else translated to chat. */
  job(req: R, model: CatalogEntry): { api: JobApi; body: Record<string, unknown> };
  encoder(ctx: EncoderContext, req: R): ResponseEncoder;
  /** Headers every answer of this route carries besides x-request-id. */
  responseHeaders?(requestId: string): Record<string, string>;
  /** The route's error body (OpenAI's unless the protocol has its own), and its status where the protocol's differs (Anthropic's 529). */
  errorBody(e: CatracaError): { body: unknown; headers?: Record<string, string>; status?: number };
  /**
   * Per request, before its body is read: the protocol's own headers (Anthropic's anthropic-version
   * and anthropic-beta). Returns the protocol to run the request with; throws a CatracaError to refuse it.
   */
  withHeaders?(header: (name: string) => string): Protocol<R>;
}

export type { Done };
