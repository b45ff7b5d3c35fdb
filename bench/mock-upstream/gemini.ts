import { randomBytes, timingSafeEqual } from 'node:crypto';
import http from 'node:http';
import type { AddressInfo } from 'node:net';
import { importSPKI, jwtVerify } from 'jose';
import { countTokens } from '../../src/providers/sim/tokens.ts';
import { MOCK_REASONING, MOCK_TOOL_CALL, mockToken } from './content.ts';

// A mock of Google's Gemini API and of Vertex AI, with Google's OAuth token endpoint. It checks what
// Google checks before a model sees the request:
//   Gemini API  POST /v1beta/models/{model}:streamGenerateContent?alt=sse (or :generateContent),
//               the key in x-goog-api-key (or ?key=)  → else 400 INVALID_ARGUMENT, reason API_KEY_INVALID
//   Vertex AI   POST /v1/projects/{project}/locations/{region}/publishers/google/models/{model}:…,
//               the project and region its own, Authorization: Bearer with a token it minted and
//               that has not expired                  → else 401 UNAUTHENTICATED / 403 PERMISSION_DENIED
//   POST /token the JWT bearer grant: an RS256 assertion whose signature verifies with the service
//               account's public key, iss = the account, aud = this endpoint, scope cloud-platform,
//               not expired                           → else 400 invalid_grant
// and answers in Gemini's wire format (candidates, parts, finishReason, usageMetadata). Output: the
// mock's tokens, cut at generationConfig.maxOutputTokens. promptTokenCount: the sim's count of the
// system instruction and contents' text. By model:
//   mock-thinking → thought parts (MOCK_REASONING) before the answer, thoughtsTokenCount 3 (apart from candidatesTokenCount)
//   mock-cached   → cachedContentTokenCount = half the prompt (part of promptTokenCount)
//   mock-tools    → one functionCall (MOCK_TOOL_CALL), candidatesTokenCount 12
//   mock-429      → 429 RESOURCE_EXHAUSTED             mock-500 → 500 INTERNAL

export interface MockGeminiOptions {
  apiKey: string;
  vertex?: { project: string; region: string; clientEmail: string; publicKeyPem: string; tokenTtlS?: number };
  outputTokens?: number;
}

export interface MockGemini {
  url: string;
  /** the token endpoint (a service account's token_uri) */
  tokenUrl: string;
  stats: {
    lastPath: string | null;
    lastBody: Record<string, unknown> | null;
    lastAuth: 'api-key' | 'vertex' | null;
    refused: number;
    tokensMinted: number;
    tokenRefusals: string[];
    byModel: Record<string, number>;
    usages: Array<{ model: string; usageMetadata: Record<string, number> }>;
  };
  /** ends every token it minted (as if they expired) */
  expireTokens(): void;
  close(): Promise<void>;
}

const ROUTE = /^\/(?:v1beta|v1\/projects\/([^/]+)\/locations\/([^/]+)\/publishers\/google)\/models\/([^/:]+):(streamGenerateContent|generateContent)$/;

function googleError(res: http.ServerResponse, code: number, status: string, message: string, details?: unknown[]): void {
  const body = JSON.stringify({ error: { code, message, status, ...(details ? { details } : {}) } });
  res.writeHead(code, { 'content-type': 'application/json; charset=UTF-8', 'content-length': Buffer.byteLength(body) });
  res.end(body);
}

const safeEqual = (a: string, b: string) => a.length === b.length && timingSafeEqual(Buffer.from(a), Buffer.from(b));

type Part = { text?: string; functionCall?: unknown; functionResponse?: { response?: unknown } };

function promptCount(body: { systemInstruction?: { parts?: Part[] }; contents?: Array<{ parts?: Part[] }> }): number {
  let n = 3;
  for (const p of body.systemInstruction?.parts ?? []) if (typeof p.text === 'string') n += countTokens(p.text);
  for (const c of body.contents ?? []) {
    n += 3;
    for (const p of c.parts ?? []) {
      if (typeof p.text === 'string') n += countTokens(p.text);
      if (p.functionResponse) n += countTokens(JSON.stringify(p.functionResponse.response ?? {}));
    }
  }
  return n;
}

export async function startMockGemini(opts: MockGeminiOptions): Promise<MockGemini> {
  const stats: MockGemini['stats'] = {
    lastPath: null,
    lastBody: null,
    lastAuth: null,
    refused: 0,
    tokensMinted: 0,
    tokenRefusals: [],
    byModel: {},
    usages: [],
  };
  const tokens = new Map<string, number>(); // access token → expiry (ms)
  const publicKey = opts.vertex ? await importSPKI(opts.vertex.publicKeyPem, 'RS256') : undefined;
  let tokenUrl = '';

  async function mint(raw: string, res: http.ServerResponse) {
    const form = new URLSearchParams(raw);
    const refuse = (why: string) => {
      stats.tokenRefusals.push(why);
      const body = JSON.stringify({ error: 'invalid_grant', error_description: why });
      res.writeHead(400, { 'content-type': 'application/json', 'content-length': Buffer.byteLength(body) });
      res.end(body);
    };
    if (!opts.vertex || !publicKey) return refuse('No service accounts here.');
    if (form.get('grant_type') !== 'urn:ietf:params:oauth:grant-type:jwt-bearer') return refuse('Unsupported grant type.');
    try {
      const { payload } = await jwtVerify(form.get('assertion') ?? '', publicKey, {
        algorithms: ['RS256'],
        issuer: opts.vertex.clientEmail,
        audience: tokenUrl,
      });
      if (typeof payload.scope !== 'string' || !payload.scope.split(' ').includes('https://www.googleapis.com/auth/cloud-platform'))
        return refuse('Invalid scope.');
    } catch {
      return refuse('Invalid JWT Signature.');
    }
    const token = `ya29.mock-${randomBytes(12).toString('hex')}`;
    const ttl = opts.vertex.tokenTtlS ?? 3599;
    tokens.set(token, Date.now() + ttl * 1000);
    stats.tokensMinted++;
    const body = JSON.stringify({ access_token: token, expires_in: ttl, token_type: 'Bearer' });
    res.writeHead(200, { 'content-type': 'application/json', 'content-length': Buffer.byteLength(body) });
    res.end(body);
  }

  const server = http.createServer((req, res) => {
    const chunks: Buffer[] = [];
    req.on('data', (c: Buffer) => chunks.push(c));
    req.on('end', () => {
      const raw = Buffer.concat(chunks).toString('utf8');
      const url = new URL(req.url ?? '/', 'http://mock');
      if (req.method === 'POST' && url.pathname === '/token') return void mint(raw, res);
      stats.lastPath = url.pathname + url.search;
      const route = ROUTE.exec(url.pathname);
      if (req.method !== 'POST' || !route) {
        stats.refused++;
        return googleError(res, 404, 'NOT_FOUND', `The requested URL ${url.pathname} was not found on this server.`);
      }
      const [, project, region, modelRaw, method] = route;
      if (project !== undefined) {
        const auth = String(req.headers.authorization ?? '');
        const expiry = tokens.get(auth.replace(/^Bearer /, ''));
        if (!auth.startsWith('Bearer ') || expiry === undefined || expiry <= Date.now()) {
          stats.refused++;
          return googleError(
            res,
            401,
            'UNAUTHENTICATED',
            'Request had invalid authentication credentials. Expected OAuth 2 access token, login cookie or other valid authentication credential.',
          );
        }
        if (!opts.vertex || decodeURIComponent(project) !== opts.vertex.project || decodeURIComponent(region!) !== opts.vertex.region) {
          stats.refused++;
          return googleError(res, 403, 'PERMISSION_DENIED', `Permission 'aiplatform.endpoints.predict' denied on resource (or it may not exist).`);
        }
        stats.lastAuth = 'vertex';
      } else {
        const key = String(req.headers['x-goog-api-key'] ?? url.searchParams.get('key') ?? '');
        if (!safeEqual(key, opts.apiKey)) {
          stats.refused++;
          return googleError(res, 400, 'INVALID_ARGUMENT', 'API key not valid. Please pass a valid API key.', [
            { '@type': 'type.googleapis.com/google.rpc.ErrorInfo', reason: 'API_KEY_INVALID', domain: 'googleapis.com' },
          ]);
        }
        stats.lastAuth = 'api-key';
      }
      const model = decodeURIComponent(modelRaw!);
      let body: { systemInstruction?: { parts?: Part[] }; contents?: Array<{ parts?: Part[] }>; generationConfig?: { maxOutputTokens?: number } };
      try {
        body = JSON.parse(raw);
      } catch {
        return googleError(res, 400, 'INVALID_ARGUMENT', 'Invalid JSON payload received.');
      }
      stats.lastBody = body as Record<string, unknown>;
      stats.byModel[model] = (stats.byModel[model] ?? 0) + 1;
      if (!Array.isArray(body.contents) || body.contents.length === 0)
        return googleError(res, 400, 'INVALID_ARGUMENT', '* GenerateContentRequest.contents: contents is not specified');
      if (model === 'mock-429') return googleError(res, 429, 'RESOURCE_EXHAUSTED', 'Resource has been exhausted (e.g. check quota).');
      if (model === 'mock-500') return googleError(res, 500, 'INTERNAL', 'An internal error has occurred.');
      const prompt = promptCount(body);
      const max = body.generationConfig?.maxOutputTokens ?? 8192;
      const chunks2: Array<Record<string, unknown>> = [];
      const usage: Record<string, number> = { promptTokenCount: prompt, candidatesTokenCount: 0, totalTokenCount: 0 };
      if (model === 'mock-cached') usage.cachedContentTokenCount = Math.floor(prompt / 2);
      let finish = 'STOP';
      if (model === 'mock-thinking') {
        for (const t of MOCK_REASONING) chunks2.push({ candidates: [{ content: { role: 'model', parts: [{ text: t, thought: true }] }, index: 0 }] });
        usage.thoughtsTokenCount = MOCK_REASONING.length;
      }
      if (model === 'mock-tools') {
        chunks2.push({
          candidates: [
            { content: { role: 'model', parts: [{ functionCall: { name: MOCK_TOOL_CALL.name, args: JSON.parse(MOCK_TOOL_CALL.arguments) } }] }, index: 0 },
          ],
        });
        usage.candidatesTokenCount = 12;
      } else {
        const natural = opts.outputTokens ?? 16;
        const n = Math.min(natural, max);
        if (natural > n) finish = 'MAX_TOKENS';
        for (let i = 0; i < n; i++) chunks2.push({ candidates: [{ content: { role: 'model', parts: [{ text: mockToken(i) }] }, index: 0 }] });
        usage.candidatesTokenCount = n;
      }
      usage.totalTokenCount = prompt + usage.candidatesTokenCount! + (usage.thoughtsTokenCount ?? 0);
      const last = chunks2[chunks2.length - 1]!;
      (last.candidates as Array<Record<string, unknown>>)[0]!.finishReason = finish;
      last.usageMetadata = usage;
      last.modelVersion = model;
      stats.usages.push({ model, usageMetadata: usage });
      if (method === 'generateContent') {
        const parts = chunks2.flatMap((c) => (c.candidates as Array<{ content: { parts: unknown[] } }>)[0]!.content.parts);
        const whole = JSON.stringify({
          candidates: [{ content: { role: 'model', parts }, finishReason: finish, index: 0 }],
          usageMetadata: usage,
          modelVersion: model,
        });
        res.writeHead(200, { 'content-type': 'application/json; charset=UTF-8' });
        return res.end(whole);
      }
      if (url.searchParams.get('alt') !== 'sse') return googleError(res, 400, 'INVALID_ARGUMENT', 'This mock streams only with alt=sse.');
      res.writeHead(200, { 'content-type': 'text/event-stream', 'cache-control': 'no-cache' });
      // Gemini's own framing: "data: {json}\r\n\r\n"
      res.end(chunks2.map((c) => `data: ${JSON.stringify(c)}\r\n\r\n`).join(''));
    });
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  const { port } = server.address() as AddressInfo;
  const url = `http://127.0.0.1:${port}`;
  tokenUrl = `${url}/token`;
  return {
    url,
    tokenUrl,
    stats,
    expireTokens: () => tokens.clear(),
    close: async () => {
      server.closeAllConnections();
      await new Promise<void>((resolve) => server.close(() => resolve()));
    },
  };
}
