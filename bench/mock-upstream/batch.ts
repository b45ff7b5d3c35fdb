import type http from 'node:http';

// The vendors' own batch APIs, for catraca's `vendor` batch mode (docs/batch.md):
//
// OpenAI (Files + Batch API):
//   POST /v1/files                  multipart/form-data, `purpose` ("batch") and `file` (JSONL): the File object
//   GET  /v1/files/{id}             the File object;  GET /v1/files/{id}/content: its bytes
//   POST /v1/batches                {input_file_id, endpoint, completion_window: "24h", metadata?}: the Batch, `validating`
//                                   (metadata: at most 16 pairs, keys of at most 64 characters, string values of at most 512)
//   GET  /v1/batches?limit&after    the key's batches, newest first: {object: "list", data, first_id, last_id, has_more}
//                                   (limit 1–100, default 20; after: a batch id, the page after it)
//   GET  /v1/batches/{id}           validating → in_progress → finalizing → completed (or failed, cancelling → cancelled)
//   POST /v1/batches/{id}/cancel    `cancelling`, then `cancelled` with the output of the lines that ran
// Anthropic (Message Batches):
//   POST /v1/messages/batches       {requests: [{custom_id, params}]}: the Message Batch, `in_progress`
//   GET  /v1/messages/batches/{id}  in_progress → ended (canceling → ended after a cancel); results_url once ended
//   GET  /v1/messages/batches/{id}/results   JSONL {custom_id, result: {type: succeeded|errored|canceled|expired, …}}
//   POST /v1/messages/batches/{id}/cancel
//
// What they check, as the vendors do: the key (Bearer for OpenAI, x-api-key or Bearer for Anthropic; a file or
// batch of another key is a 404), the input file's purpose, `completion_window`, every line a JSON
// object with a unique custom_id, method POST and the batch's endpoint as url, one model in the
// whole file, at most 50 000 embedding inputs across a batch of /v1/embeddings (OpenAI fails the
// batch in `validating`, with `errors`); Anthropic's custom_id
// pattern (1–64 of [a-zA-Z0-9_-]) and uniqueness (400).
//
// Each line runs as the same request to this mock's own online route (stream off), one after the
// other, so its answer and usage are exactly the online ones. What the vendor bills for batch
// lines is half the online price: `stats.batch` counts the tokens and the tokens billed at 50 %.
// Timing (tests make it fast or slow): `validateMs` before a batch starts, `lineMs` before each line,
// `finalizeMs` between the last line and the end — set by MockUpstreamOptions.batch, changed at
// run time through `mock.batchTiming`, or per batch by the header `x-mock-batch-line-ms` on create.

export interface BatchTiming {
  validateMs: number;
  lineMs: number;
  finalizeMs: number;
}

/** What the mock's batch APIs saw and billed. */
export interface MockBatchStats {
  files: number;
  batches: number;
  /** Anthropic message batches created */
  messageBatches: number;
  /** GET /v1/batches answered (OpenAI's list) */
  batchLists: number;
  /** lines run (answered by the online route) */
  lines: number;
  succeeded: number;
  failed: number;
  cancelled: number;
  prompt_tokens: number;
  completion_tokens: number;
  /** the vendor's batch discount: tokens billed at this fraction of the online price */
  discount: number;
  billed_prompt_tokens: number;
  billed_completion_tokens: number;
}

export const newBatchStats = (): MockBatchStats => ({
  files: 0,
  batches: 0,
  messageBatches: 0,
  batchLists: 0,
  lines: 0,
  succeeded: 0,
  failed: 0,
  cancelled: 0,
  prompt_tokens: 0,
  completion_tokens: 0,
  discount: 0.5,
  billed_prompt_tokens: 0,
  billed_completion_tokens: 0,
});

interface MockFile {
  id: string;
  owner: string;
  purpose: string;
  filename: string;
  bytes: Buffer;
  created_at: number;
}

interface OpenAIBatch {
  id: string;
  owner: string;
  endpoint: string;
  input_file_id: string;
  completion_window: string;
  metadata: Record<string, string> | null;
  status: 'validating' | 'failed' | 'in_progress' | 'finalizing' | 'completed' | 'expired' | 'cancelling' | 'cancelled';
  errors: { object: 'list'; data: Array<{ code: string; message: string; line: number | null; param: string | null }> } | null;
  output_file_id: string | null;
  error_file_id: string | null;
  created_at: number;
  in_progress_at: number | null;
  finalizing_at: number | null;
  completed_at: number | null;
  failed_at: number | null;
  cancelling_at: number | null;
  cancelled_at: number | null;
  expires_at: number;
  request_counts: { total: number; completed: number; failed: number };
}

interface MessageBatch {
  id: string;
  owner: string;
  processing_status: 'in_progress' | 'canceling' | 'ended';
  requests: Array<{ custom_id: string; params: Record<string, unknown> }>;
  results: Array<{ custom_id: string; result: Record<string, unknown> }>;
  created_at: string;
  ended_at: string | null;
  cancel_initiated_at: string | null;
  expires_at: string;
}

export interface BatchContext {
  /** this mock's own base, e.g. http://127.0.0.1:9100 (no /v1) */
  origin(): string;
  timing: BatchTiming;
  stats: MockBatchStats;
}

const ENDPOINTS = ['/v1/chat/completions', '/v1/embeddings', '/v1/completions', '/v1/responses'];
const now = () => Math.floor(Date.now() / 1000);
const iso = (ms = Date.now()) => new Date(ms).toISOString();
const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));
let seq = 0;
const newId = (prefix: string) => `${prefix}${Date.now().toString(36)}${(++seq).toString(36).padStart(6, '0')}`;

function send(res: http.ServerResponse, status: number, body: unknown, type = 'application/json') {
  const text = typeof body === 'string' ? body : JSON.stringify(body);
  res.writeHead(status, { 'content-type': type, 'content-length': Buffer.byteLength(text) });
  res.end(text);
}

const openaiError = (res: http.ServerResponse, status: number, message: string, param: string | null = null, code: string | null = null) =>
  send(res, status, { error: { message, type: 'invalid_request_error', param, code } });

const anthropicError = (res: http.ServerResponse, status: number, type: string, message: string) =>
  send(res, status, { type: 'error', error: { type, message } });

function readBody(req: http.IncomingMessage): Promise<Buffer> {
  return new Promise((resolve, reject) => {
    const parts: Buffer[] = [];
    req.on('data', (c: Buffer) => parts.push(c));
    req.on('end', () => resolve(Buffer.concat(parts)));
    req.on('error', reject);
  });
}

/** The fields of a multipart/form-data body: name → {filename?, data}. */
export function parseMultipart(body: Buffer, contentType: string): Map<string, { filename?: string; data: Buffer }> {
  const out = new Map<string, { filename?: string; data: Buffer }>();
  const m = /boundary=(?:"([^"]+)"|([^;]+))/i.exec(contentType);
  if (!m) return out;
  const delimiter = Buffer.from(`--${m[1] ?? m[2]}`);
  let at = body.indexOf(delimiter);
  while (at >= 0) {
    const start = at + delimiter.length;
    if (body.subarray(start, start + 2).toString() === '--') break;
    const next = body.indexOf(delimiter, start);
    if (next < 0) break;
    const part = body.subarray(start + 2, next - 2); // after CRLF, before CRLF--boundary
    const headEnd = part.indexOf('\r\n\r\n');
    if (headEnd >= 0) {
      const head = part.subarray(0, headEnd).toString('utf8');
      const name = /name="([^"]*)"/i.exec(head)?.[1];
      const filename = /filename="([^"]*)"/i.exec(head)?.[1];
      if (name) out.set(name, { filename, data: part.subarray(headEnd + 4) });
    }
    at = next;
  }
  return out;
}

/** Vendor batch APIs over the mock's online routes; `handle` answers a request it owns and returns true. */
export class MockBatches {
  private readonly files = new Map<string, MockFile>();
  private readonly batches = new Map<string, OpenAIBatch>();
  private readonly messageBatches = new Map<string, MessageBatch>();

  constructor(private readonly ctx: BatchContext) {}

  handle(req: http.IncomingMessage, res: http.ServerResponse, path: string): boolean {
    const method = req.method ?? 'GET';
    if (path.startsWith('/v1/messages/batches')) {
      void this.anthropic(req, res, method, path).catch((err) => anthropicError(res, 500, 'api_error', String(err)));
      return true;
    }
    if (path === '/v1/files' || path.startsWith('/v1/files/') || path === '/v1/batches' || path.startsWith('/v1/batches/')) {
      void this.openai(req, res, method, path).catch((err) => openaiError(res, 500, String(err)));
      return true;
    }
    return false;
  }

  // ---- OpenAI ----

  private async openai(req: http.IncomingMessage, res: http.ServerResponse, method: string, path: string): Promise<void> {
    const auth = req.headers.authorization;
    const key = auth && /^Bearer\s+\S+/i.test(auth) ? auth.replace(/^Bearer\s+/i, '') : null;
    const body = await readBody(req);
    if (!key) return openaiError(res, 401, "You didn't provide an API key. You need to provide your API key in an Authorization header using Bearer auth.");
    const parts = path.split('/').filter(Boolean); // v1, files|batches, id?, action?
    if (parts[1] === 'files') {
      if (method === 'POST' && parts.length === 2) return this.uploadFile(req, res, key, body);
      const file = this.files.get(parts[2] ?? '');
      if (!file || file.owner !== key) return openaiError(res, 404, `No such File object: ${parts[2]}`, 'id');
      if (method === 'GET' && parts.length === 3) return send(res, 200, fileObject(file));
      if (method === 'GET' && parts[3] === 'content') return send(res, 200, file.bytes.toString('utf8'), 'application/octet-stream');
      return openaiError(res, 404, `Invalid URL (${method} ${path})`);
    }
    if (method === 'POST' && parts.length === 2) return this.createBatch(req, res, key, body);
    if (method === 'GET' && parts.length === 2) return this.listBatches(req, res, key);
    const batch = this.batches.get(parts[2] ?? '');
    if (!batch || batch.owner !== key) return openaiError(res, 404, `No batch found with id '${parts[2]}'.`, 'batch_id', 'batch_not_found');
    if (method === 'GET' && parts.length === 3) return send(res, 200, batchObject(batch));
    if (method === 'POST' && parts[3] === 'cancel') {
      if (batch.status === 'validating' || batch.status === 'in_progress' || batch.status === 'finalizing') {
        batch.status = 'cancelling';
        batch.cancelling_at = now();
      } else if (batch.status !== 'cancelling') {
        return openaiError(res, 409, `Cannot cancel a batch with status '${batch.status}'.`);
      }
      return send(res, 200, batchObject(batch));
    }
    return openaiError(res, 404, `Invalid URL (${method} ${path})`);
  }

  private uploadFile(req: http.IncomingMessage, res: http.ServerResponse, key: string, body: Buffer): void {
    const fields = parseMultipart(body, String(req.headers['content-type'] ?? ''));
    const purpose = fields.get('purpose')?.data.toString('utf8');
    const file = fields.get('file');
    if (!purpose) return openaiError(res, 400, "Missing required parameter: 'purpose'.", 'purpose');
    if (!file) return openaiError(res, 400, "Missing required parameter: 'file'.", 'file');
    if (!['batch', 'fine-tune', 'assistants', 'vision', 'user_data', 'evals'].includes(purpose)) {
      return openaiError(
        res,
        400,
        `'${purpose}' is not one of ['fine-tune', 'assistants', 'batch', 'user_data', 'responses', 'vision', 'evals'] - 'purpose'`,
        'purpose',
      );
    }
    const f: MockFile = { id: newId('file-mock'), owner: key, purpose, filename: file.filename ?? 'file', bytes: file.data, created_at: now() };
    this.files.set(f.id, f);
    this.ctx.stats.files++;
    send(res, 200, fileObject(f));
  }

  /** GET /v1/batches: the key's batches, newest first, in pages (`limit`, `after`), as OpenAI lists them. */
  private listBatches(req: http.IncomingMessage, res: http.ServerResponse, key: string): void {
    const q = new URL(req.url ?? '/', 'http://mock').searchParams;
    const limit = q.has('limit') ? Number(q.get('limit')) : 20;
    if (!Number.isInteger(limit) || limit < 1 || limit > 100) return openaiError(res, 400, "Invalid 'limit': integer between 1 and 100 expected.", 'limit');
    this.ctx.stats.batchLists++;
    const mine = [...this.batches.values()].filter((b) => b.owner === key).reverse();
    const after = q.get('after');
    const from = after ? mine.findIndex((b) => b.id === after) + 1 : 0;
    if (after && from === 0) return send(res, 200, { object: 'list', data: [], first_id: null, last_id: null, has_more: false });
    const data = mine.slice(from, from + limit).map(batchObject);
    send(res, 200, { object: 'list', data, first_id: data[0]?.id ?? null, last_id: data.at(-1)?.id ?? null, has_more: from + limit < mine.length });
  }

  private createBatch(req: http.IncomingMessage, res: http.ServerResponse, key: string, raw: Buffer): void {
    let body: Record<string, unknown>;
    try {
      body = JSON.parse(raw.toString('utf8'));
    } catch {
      return openaiError(res, 400, 'We could not parse the JSON body of your request.');
    }
    const { input_file_id, endpoint, completion_window, metadata } = body as Record<string, unknown>;
    if (typeof endpoint !== 'string' || !ENDPOINTS.includes(endpoint)) {
      return openaiError(res, 400, `Invalid value for 'endpoint': expected one of ${ENDPOINTS.join(', ')}.`, 'endpoint');
    }
    if (completion_window !== '24h') return openaiError(res, 400, "Invalid value for 'completion_window': expected '24h'.", 'completion_window');
    if (metadata !== undefined && metadata !== null) {
      const pairs = typeof metadata === 'object' && !Array.isArray(metadata) ? Object.entries(metadata) : null;
      if (!pairs || pairs.length > 16 || pairs.some(([k, v]) => k.length > 64 || typeof v !== 'string' || v.length > 512)) {
        return openaiError(
          res,
          400,
          "Invalid 'metadata': at most 16 key-value pairs, keys of at most 64 characters and string values of at most 512.",
          'metadata',
        );
      }
    }
    const file = this.files.get(String(input_file_id));
    if (!file || file.owner !== key) return openaiError(res, 404, `No such File object: ${input_file_id}`, 'input_file_id');
    if (file.purpose !== 'batch') return openaiError(res, 400, `File ${file.id} has purpose '${file.purpose}', not 'batch'.`, 'input_file_id');
    const b: OpenAIBatch = {
      id: newId('batch_mock'),
      owner: key,
      endpoint,
      input_file_id: file.id,
      completion_window: '24h',
      metadata: (metadata as Record<string, string> | undefined) ?? null,
      status: 'validating',
      errors: null,
      output_file_id: null,
      error_file_id: null,
      created_at: now(),
      in_progress_at: null,
      finalizing_at: null,
      completed_at: null,
      failed_at: null,
      cancelling_at: null,
      cancelled_at: null,
      expires_at: now() + 86400,
      request_counts: { total: 0, completed: 0, failed: 0 },
    };
    this.batches.set(b.id, b);
    this.ctx.stats.batches++;
    const lineMs = Number(req.headers['x-mock-batch-line-ms']);
    void this.runBatch(b, file, Number.isFinite(lineMs) ? lineMs : undefined);
    send(res, 200, batchObject(b));
  }

  private async runBatch(b: OpenAIBatch, file: MockFile, lineMs?: number): Promise<void> {
    const t = this.ctx.timing;
    await sleep(t.validateMs);
    const lines = validateLines(file.bytes, b.endpoint);
    if ('error' in lines) {
      b.status = 'failed';
      b.failed_at = now();
      b.errors = { object: 'list', data: [lines.error] };
      return;
    }
    b.request_counts.total = lines.ok.length;
    if (b.status === 'cancelling') return this.endBatch(b, [], []);
    b.status = 'in_progress';
    b.in_progress_at = now();
    const output: string[] = [];
    const errors: string[] = [];
    for (const l of lines.ok) {
      await sleep(lineMs ?? t.lineMs);
      if ((b.status as string) === 'cancelling') break;
      const answer = await this.online(l.url, l.body, { authorization: `Bearer ${b.owner}` });
      const line = {
        id: newId('batch_req_mock'),
        custom_id: l.custom_id,
        response: { status_code: answer.status, request_id: newId('req_mock'), body: answer.body },
        error: null,
      };
      if (answer.status === 200) {
        b.request_counts.completed++;
        output.push(JSON.stringify(line));
        this.bill(answer.body);
      } else {
        b.request_counts.failed++;
        errors.push(JSON.stringify(line));
        this.ctx.stats.failed++;
      }
    }
    this.ctx.stats.cancelled += b.request_counts.total - b.request_counts.completed - b.request_counts.failed;
    if ((b.status as string) !== 'cancelling') {
      b.status = 'finalizing';
      b.finalizing_at = now();
    }
    await sleep(t.finalizeMs);
    this.endBatch(b, output, errors);
  }

  private endBatch(b: OpenAIBatch, output: string[], errors: string[]): void {
    const write = (lines: string[], name: string) => {
      if (lines.length === 0) return null;
      const f: MockFile = {
        id: newId('file-mock'),
        owner: b.owner,
        purpose: 'batch_output',
        filename: name,
        bytes: Buffer.from(`${lines.join('\n')}\n`),
        created_at: now(),
      };
      this.files.set(f.id, f);
      return f.id;
    };
    b.output_file_id = write(output, `${b.id}_output.jsonl`);
    b.error_file_id = write(errors, `${b.id}_error.jsonl`);
    if (b.status === 'cancelling') {
      b.status = 'cancelled';
      b.cancelled_at = now();
    } else {
      b.status = 'completed';
      b.completed_at = now();
    }
  }

  /** One line as the same request to the mock's online route: its status and JSON body. */
  private async online(
    url: string,
    body: Record<string, unknown>,
    headers: Record<string, string>,
  ): Promise<{ status: number; body: Record<string, unknown> }> {
    const sent = { ...body };
    delete sent.stream;
    delete sent.stream_options;
    const r = await fetch(`${this.ctx.origin()}${url}`, {
      method: 'POST',
      headers: { 'content-type': 'application/json', ...headers },
      body: JSON.stringify(sent),
    });
    const text = await r.text();
    this.ctx.stats.lines++;
    try {
      return { status: r.status, body: JSON.parse(text) };
    } catch {
      return { status: r.status, body: { error: { message: text, type: 'server_error', param: null, code: null } } };
    }
  }

  /** A succeeded line's usage, counted and billed at the batch discount. */
  private bill(body: Record<string, unknown>): void {
    const u = (body.usage ?? {}) as Record<string, number | undefined>;
    const prompt = u.prompt_tokens ?? u.input_tokens ?? 0;
    const completion = u.completion_tokens ?? u.output_tokens ?? 0;
    const s = this.ctx.stats;
    s.succeeded++;
    s.prompt_tokens += prompt;
    s.completion_tokens += completion;
    s.billed_prompt_tokens += prompt * s.discount;
    s.billed_completion_tokens += completion * s.discount;
  }

  // ---- Anthropic ----

  private async anthropic(req: http.IncomingMessage, res: http.ServerResponse, method: string, path: string): Promise<void> {
    const bearer = req.headers.authorization;
    const key =
      typeof req.headers['x-api-key'] === 'string'
        ? req.headers['x-api-key']
        : bearer && /^Bearer\s+\S+/i.test(bearer)
          ? bearer.replace(/^Bearer\s+/i, '')
          : null;
    const raw = await readBody(req);
    if (!key) return anthropicError(res, 401, 'authentication_error', 'x-api-key header is required');
    const parts = path.split('/').filter(Boolean); // v1, messages, batches, id?, action?
    if (method === 'POST' && parts.length === 3) return this.createMessageBatch(res, key, raw);
    const b = this.messageBatches.get(parts[3] ?? '');
    if (!b || b.owner !== key) return anthropicError(res, 404, 'not_found_error', `No message batch found with id '${parts[3]}'.`);
    if (method === 'GET' && parts.length === 4) return send(res, 200, this.messageBatchObject(b));
    if (method === 'GET' && parts[4] === 'results') {
      if (b.processing_status !== 'ended') return anthropicError(res, 400, 'invalid_request_error', `Message batch ${b.id} is still processing.`);
      return send(res, 200, b.results.map((r) => JSON.stringify(r)).join('\n') + '\n', 'application/binary');
    }
    if (method === 'POST' && parts[4] === 'cancel') {
      if (b.processing_status === 'in_progress') {
        b.processing_status = 'canceling';
        b.cancel_initiated_at = iso();
      }
      return send(res, 200, this.messageBatchObject(b));
    }
    return anthropicError(res, 404, 'not_found_error', `Invalid URL (${method} ${path})`);
  }

  private createMessageBatch(res: http.ServerResponse, key: string, raw: Buffer): void {
    let body: { requests?: unknown };
    try {
      body = JSON.parse(raw.toString('utf8'));
    } catch {
      return anthropicError(res, 400, 'invalid_request_error', 'The request body is not valid JSON.');
    }
    if (!Array.isArray(body.requests) || body.requests.length === 0)
      return anthropicError(res, 400, 'invalid_request_error', 'requests: at least one request is required');
    const seen = new Set<string>();
    for (const [i, r] of (body.requests as Array<Record<string, unknown>>).entries()) {
      const id = r?.custom_id;
      if (typeof id !== 'string' || !/^[a-zA-Z0-9_-]{1,64}$/.test(id))
        return anthropicError(res, 400, 'invalid_request_error', `requests.${i}.custom_id: String should match pattern '^[a-zA-Z0-9_-]{1,64}$'`);
      if (seen.has(id)) return anthropicError(res, 400, 'invalid_request_error', `requests: custom_id '${id}' is not unique`);
      seen.add(id);
      if (!r.params || typeof r.params !== 'object') return anthropicError(res, 400, 'invalid_request_error', `requests.${i}.params: Field required`);
    }
    const b: MessageBatch = {
      id: newId('msgbatch_mock'),
      owner: key,
      processing_status: 'in_progress',
      requests: body.requests as MessageBatch['requests'],
      results: [],
      created_at: iso(),
      ended_at: null,
      cancel_initiated_at: null,
      expires_at: iso(Date.now() + 86_400_000),
    };
    this.messageBatches.set(b.id, b);
    this.ctx.stats.messageBatches++;
    void this.runMessageBatch(b);
    send(res, 200, this.messageBatchObject(b));
  }

  private async runMessageBatch(b: MessageBatch): Promise<void> {
    const t = this.ctx.timing;
    await sleep(t.validateMs);
    for (const r of b.requests) {
      if (b.processing_status === 'canceling') {
        b.results.push({ custom_id: r.custom_id, result: { type: 'canceled' } });
        this.ctx.stats.cancelled++;
        continue;
      }
      await sleep(t.lineMs);
      if ((b.processing_status as string) === 'canceling') {
        b.results.push({ custom_id: r.custom_id, result: { type: 'canceled' } });
        this.ctx.stats.cancelled++;
        continue;
      }
      const params = { ...r.params };
      delete params.stream;
      const answer = await this.online('/v1/messages', params, { 'x-api-key': b.owner, 'anthropic-version': '2023-06-01' });
      if (answer.status === 200) {
        b.results.push({ custom_id: r.custom_id, result: { type: 'succeeded', message: answer.body } });
        this.bill(answer.body);
      } else {
        b.results.push({ custom_id: r.custom_id, result: { type: 'errored', error: answer.body } });
        this.ctx.stats.failed++;
      }
    }
    await sleep(t.finalizeMs);
    b.processing_status = 'ended';
    b.ended_at = iso();
  }

  private messageBatchObject(b: MessageBatch) {
    const count = (type: string) => b.results.filter((r) => r.result.type === type).length;
    return {
      id: b.id,
      type: 'message_batch',
      processing_status: b.processing_status,
      request_counts: {
        processing: b.requests.length - b.results.length,
        succeeded: count('succeeded'),
        errored: count('errored'),
        canceled: count('canceled'),
        expired: count('expired'),
      },
      ended_at: b.ended_at,
      created_at: b.created_at,
      expires_at: b.expires_at,
      archived_at: null,
      cancel_initiated_at: b.cancel_initiated_at,
      results_url: b.processing_status === 'ended' ? `${this.ctx.origin()}/v1/messages/batches/${b.id}/results` : null,
    };
  }
}

function fileObject(f: MockFile) {
  return {
    id: f.id,
    object: 'file',
    bytes: f.bytes.byteLength,
    created_at: f.created_at,
    filename: f.filename,
    purpose: f.purpose,
    status: 'processed',
    status_details: null,
  };
}

function batchObject(b: OpenAIBatch) {
  const { owner: _owner, ...rest } = b;
  return { ...rest, object: 'batch' };
}

type Line = { custom_id: string; url: string; body: Record<string, unknown> };

/** OpenAI's documented bound on a batch of /v1/embeddings (its error's code is this mock's own: OpenAI documents the limit, not the error). */
export const EMBEDDING_INPUTS_PER_BATCH = 50_000;

/** An embeddings request's inputs: a string or one array of token ids is one; an array of strings or of token-id arrays, its length. */
function embeddingInputs(input: unknown): number {
  if (!Array.isArray(input)) return 1;
  return input.length > 0 && input.every((t) => typeof t === 'number') ? 1 : input.length;
}
type LineError = { code: string; message: string; line: number | null; param: string | null };

/** The input file's lines as OpenAI checks them in `validating`; the first fault fails the batch. */
export function validateLines(bytes: Buffer, endpoint: string): { ok: Line[] } | { error: LineError } {
  const text = bytes.toString('utf8');
  const out: Line[] = [];
  const ids = new Set<string>();
  let model: string | null = null;
  const rows = text.split(/\r?\n/);
  for (const [i, row] of rows.entries()) {
    if (row.trim() === '') continue;
    const line = i + 1;
    let l: Record<string, unknown>;
    try {
      l = JSON.parse(row);
    } catch {
      return { error: { code: 'invalid_json_line', message: `This line is not parseable as valid JSON.`, line, param: null } };
    }
    if (typeof l.custom_id !== 'string' || l.custom_id === '')
      return { error: { code: 'missing_required_parameter', message: 'Missing custom_id', line, param: 'custom_id' } };
    if (ids.has(l.custom_id))
      return { error: { code: 'duplicate_custom_id', message: `The custom_id for this request is a duplicate of another request.`, line, param: 'custom_id' } };
    ids.add(l.custom_id);
    if (l.method !== 'POST') return { error: { code: 'invalid_method', message: 'Only POST is supported.', line, param: 'method' } };
    if (l.url !== endpoint)
      return { error: { code: 'mismatched_endpoint', message: `The URL provided for this request does not match the batch endpoint.`, line, param: 'url' } };
    const body = l.body as Record<string, unknown> | undefined;
    if (!body || typeof body !== 'object' || typeof body.model !== 'string')
      return { error: { code: 'missing_required_parameter', message: 'Missing body.model', line, param: 'body.model' } };
    if (model !== null && body.model !== model)
      return { error: { code: 'mismatched_model', message: 'All requests in the input file must use the same model.', line, param: 'body.model' } };
    model = body.model;
    out.push({ custom_id: l.custom_id, url: l.url, body });
  }
  if (out.length === 0) return { error: { code: 'empty_file', message: 'The batch input file is empty.', line: null, param: null } };
  if (endpoint === '/v1/embeddings') {
    const inputs = out.reduce((n, l) => n + embeddingInputs(l.body.input), 0);
    if (inputs > EMBEDDING_INPUTS_PER_BATCH) {
      return {
        error: {
          code: 'too_many_embedding_inputs',
          message: `A batch of /v1/embeddings takes at most ${EMBEDDING_INPUTS_PER_BATCH} embedding inputs across its requests; this one has ${inputs}.`,
          line: null,
          param: null,
        },
      };
    }
  }
  return { ok: out };
}
