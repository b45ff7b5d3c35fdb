import { createHash, timingSafeEqual } from 'node:crypto';
import http from 'node:http';
import type { AddressInfo } from 'node:net';
import { Sha256 } from '@aws-crypto/sha256-js';
import { EventStreamCodec } from '@smithy/core/event-streams';
import { SignatureV4 } from '@smithy/signature-v4';
import { fromUtf8, toUtf8 } from '@smithy/util-utf8';
import { countTokens } from '../../src/providers/sim/tokens.ts';
import { MOCK_REASONING, MOCK_TOOL_CALL, mockToken } from './content.ts';

// A mock Amazon Bedrock runtime (POST /model/{modelId}/converse-stream). It checks what Bedrock
// checks before a model sees the request:
//   SigV4: the Authorization header's credential scope (access key, date, region, service
//     "bedrock"), x-amz-date within 5 minutes, x-amz-content-sha256 equal to the body's hash, a
//     session token when the key is a temporary one, and the signature itself, recomputed over
//     the headers it names with the access key's secret (@smithy/signature-v4)
//                                          → 403 UnrecognizedClientException / InvalidSignatureException
//   or a Bedrock API key as Authorization: Bearer …            → 403 when it is not the resource's
// and answers in ConverseStream's wire format: application/vnd.amazon.eventstream frames
// (messageStart, contentBlockStart/Delta/Stop, messageStop, metadata with usage). Output: the
// mock's tokens (mockToken), cut at inferenceConfig.maxTokens. Usage as Bedrock reports it:
//   inputTokens   the sim's count of the system and message text, minus what the cache served
//   cache         with a cachePoint block in system: 40 tokens read and 10 written (apart from inputTokens)
// By model id:
//   mock-reasoning → reasoningContent (MOCK_REASONING, then a signature) before the answer; the
//     reasoning tokens are part of outputTokens
//   mock-tools → one toolUse (MOCK_TOOL_CALL, its input in two pieces), stopReason tool_use, 12 output tokens
//   mock-throttled → 429 ThrottlingException        mock-500 → 500 InternalServerException
//   mock-exception-midstream → two text deltas, then a throttlingException frame

export interface MockBedrockOptions {
  region: string;
  /** access key id → secret access key */
  keys: Record<string, string>;
  /** access keys that are temporary: they need x-amz-security-token equal to this */
  sessionTokens?: Record<string, string>;
  /** a Bedrock API key accepted as Bearer */
  apiKey?: string;
  outputTokens?: number;
}

export interface MockBedrock {
  url: string;
  stats: {
    requests: number;
    refused: number;
    lastPath: string | null;
    lastBody: Record<string, unknown> | null;
    /** how the last accepted request authenticated */
    lastAuth: 'sigv4' | 'api-key' | null;
    lastSignedHeaders: string[];
    byModel: Record<string, number>;
    usages: Array<{ model: string; inputTokens: number; outputTokens: number; cacheReadInputTokens: number; cacheWriteInputTokens: number }>;
  };
  close(): Promise<void>;
}

const codec = new EventStreamCodec(toUtf8, fromUtf8);
const AUTH = /^AWS4-HMAC-SHA256 Credential=([^/]+)\/(\d{8})\/([^/]+)\/([^/]+)\/aws4_request, ?SignedHeaders=([^,]+), ?Signature=([0-9a-f]{64})$/;

function event(type: string, payload: unknown): Uint8Array {
  return codec.encode({
    headers: {
      ':event-type': { type: 'string', value: type },
      ':content-type': { type: 'string', value: 'application/json' },
      ':message-type': { type: 'string', value: 'event' },
    },
    body: fromUtf8(JSON.stringify({ ...(payload as object), p: 'abcdefghij' })),
  });
}

function exception(type: string, message: string): Uint8Array {
  return codec.encode({
    headers: {
      ':exception-type': { type: 'string', value: type },
      ':content-type': { type: 'string', value: 'application/json' },
      ':message-type': { type: 'string', value: 'exception' },
    },
    body: fromUtf8(JSON.stringify({ message })),
  });
}

function refuse(res: http.ServerResponse, status: number, type: string, message: string): void {
  const body = JSON.stringify({ message });
  res.writeHead(status, {
    'content-type': 'application/json',
    'x-amzn-errortype': `${type}:http://internal.amazon.com/coral/com.amazon.bedrock/`,
    'content-length': Buffer.byteLength(body),
  });
  res.end(body);
}

const safeEqual = (a: string, b: string) => a.length === b.length && timingSafeEqual(Buffer.from(a), Buffer.from(b));

/** Why the request's SigV4 signature is not valid for these keys, or null when it is. */
async function checkSigV4(
  req: http.IncomingMessage,
  body: Buffer,
  opts: MockBedrockOptions,
): Promise<{ type: string; message: string; signed?: string[] } | null> {
  const m = AUTH.exec(String(req.headers.authorization ?? ''));
  if (!m) return { type: 'UnrecognizedClientException', message: 'The security token included in the request is invalid.' };
  const [, accessKeyId, day, region, service, signedList, signature] = m as unknown as string[];
  const secret = opts.keys[accessKeyId!];
  if (!secret) return { type: 'UnrecognizedClientException', message: 'The security token included in the request is invalid.' };
  if (region !== opts.region || service !== 'bedrock')
    return { type: 'InvalidSignatureException', message: `Credential should be scoped to a valid region and service 'bedrock'.` };
  const amzDate = String(req.headers['x-amz-date'] ?? '');
  const at = Date.parse(amzDate.replace(/^(\d{4})(\d{2})(\d{2})T(\d{2})(\d{2})(\d{2})Z$/, '$1-$2-$3T$4:$5:$6Z'));
  if (!Number.isFinite(at) || !amzDate.startsWith(day!) || Math.abs(Date.now() - at) > 5 * 60_000)
    return { type: 'InvalidSignatureException', message: 'Signature expired: the request date is more than 5 minutes from the server time.' };
  const hash = createHash('sha256').update(body).digest('hex');
  if (req.headers['x-amz-content-sha256'] !== undefined && req.headers['x-amz-content-sha256'] !== hash)
    return { type: 'InvalidSignatureException', message: 'The provided x-amz-content-sha256 header does not match what was computed.' };
  const token = opts.sessionTokens?.[accessKeyId!];
  if (token !== undefined && req.headers['x-amz-security-token'] !== token)
    return { type: 'UnrecognizedClientException', message: 'The security token included in the request is invalid.' };
  const signedNames = signedList!.split(';');
  if (!signedNames.includes('host') || !signedNames.includes('x-amz-date'))
    return { type: 'InvalidSignatureException', message: 'Host and x-amz-date must be signed.' };
  const headers: Record<string, string> = {};
  for (const name of signedNames) headers[name] = String(req.headers[name] ?? '');
  const host = headers.host!;
  const [hostname, port] = host.split(':');
  const signer = new SignatureV4({
    service: 'bedrock',
    region: opts.region,
    sha256: Sha256,
    credentials: { accessKeyId: accessKeyId!, secretAccessKey: secret, ...(token ? { sessionToken: token } : {}) },
  });
  const again = await signer.sign(
    {
      method: req.method ?? 'POST',
      protocol: 'http:',
      hostname: hostname!,
      ...(port ? { port: Number(port) } : {}),
      path: (req.url ?? '/').split('?')[0]!,
      query: {},
      headers,
      body,
    },
    { signingDate: new Date(at), signableHeaders: new Set(signedNames) },
  );
  const expected = /Signature=([0-9a-f]{64})$/.exec(String(again.headers.authorization ?? ''))?.[1] ?? '';
  if (!safeEqual(expected, signature!))
    return {
      type: 'InvalidSignatureException',
      message: 'The request signature we calculated does not match the signature you provided. Check your AWS Secret Access Key and signing method.',
    };
  return null;
}

type Block = { text?: string; cachePoint?: unknown; toolUse?: unknown; toolResult?: { content?: Array<{ text?: string }> } };

function inputTokens(body: { system?: Block[]; messages?: Array<{ content?: Block[] }> }): number {
  let n = 3;
  for (const b of body.system ?? []) if (typeof b.text === 'string') n += countTokens(b.text);
  for (const m of body.messages ?? []) {
    n += 3;
    for (const b of m.content ?? []) {
      if (typeof b.text === 'string') n += countTokens(b.text);
      for (const c of b.toolResult?.content ?? []) if (typeof c.text === 'string') n += countTokens(c.text);
    }
  }
  return n;
}

export async function startMockBedrock(opts: MockBedrockOptions): Promise<MockBedrock> {
  const stats: MockBedrock['stats'] = {
    requests: 0,
    refused: 0,
    lastPath: null,
    lastBody: null,
    lastAuth: null,
    lastSignedHeaders: [],
    byModel: {},
    usages: [],
  };
  const server = http.createServer((req, res) => {
    const chunks: Buffer[] = [];
    req.on('data', (c: Buffer) => chunks.push(c));
    req.on('end', async () => {
      stats.requests++;
      const raw = Buffer.concat(chunks);
      const path = (req.url ?? '/').split('?')[0]!;
      stats.lastPath = path;
      const auth = String(req.headers.authorization ?? '');
      if (auth.startsWith('Bearer ')) {
        if (!opts.apiKey || !safeEqual(auth.slice(7), opts.apiKey)) {
          stats.refused++;
          return refuse(res, 403, 'AccessDeniedException', 'Authentication failed: the API key is not valid.');
        }
        stats.lastAuth = 'api-key';
      } else {
        const why = await checkSigV4(req, raw, opts);
        if (why) {
          stats.refused++;
          return refuse(res, 403, why.type, why.message);
        }
        stats.lastAuth = 'sigv4';
        stats.lastSignedHeaders = /SignedHeaders=([^,]+)/.exec(auth)![1]!.split(';');
      }
      const route = /^\/model\/([^/]+)\/converse-stream$/.exec(path);
      if (req.method !== 'POST' || !route) {
        stats.refused++;
        return refuse(res, 404, 'UnknownOperationException', 'Unknown operation');
      }
      const model = decodeURIComponent(route[1]!);
      let body: { system?: Block[]; messages?: Array<{ content?: Block[] }>; inferenceConfig?: { maxTokens?: number }; toolConfig?: unknown };
      try {
        body = JSON.parse(raw.toString('utf8'));
      } catch {
        return refuse(res, 400, 'ValidationException', 'Malformed input request, please reformat your input and try again.');
      }
      stats.lastBody = body as Record<string, unknown>;
      stats.byModel[model] = (stats.byModel[model] ?? 0) + 1;
      if (!Array.isArray(body.messages) || body.messages.length === 0)
        return refuse(res, 400, 'ValidationException', 'A conversation must start with a user message.');
      if (model === 'mock-throttled') return refuse(res, 429, 'ThrottlingException', 'Too many requests, please wait before trying again.');
      if (model === 'mock-500') return refuse(res, 500, 'InternalServerException', 'The server encountered an internal error.');
      const cached = (body.system ?? []).some((b) => b.cachePoint !== undefined);
      const read = cached ? 40 : 0;
      const write = cached ? 10 : 0;
      const input = Math.max(1, inputTokens(body) - read - write);
      const max = body.inferenceConfig?.maxTokens ?? 4096;
      res.writeHead(200, { 'content-type': 'application/vnd.amazon.eventstream', 'x-amzn-requestid': 'mock-request' });
      const frames: Uint8Array[] = [event('messageStart', { role: 'assistant' })];
      let output = 0;
      let stop = 'end_turn';
      let block = 0;
      if (model === 'mock-reasoning') {
        for (const r of MOCK_REASONING) frames.push(event('contentBlockDelta', { contentBlockIndex: block, delta: { reasoningContent: { text: r } } }));
        frames.push(event('contentBlockDelta', { contentBlockIndex: block, delta: { reasoningContent: { signature: 'sig-mock-bedrock' } } }));
        frames.push(event('contentBlockStop', { contentBlockIndex: block++ }));
        output += MOCK_REASONING.length;
      }
      if (model === 'mock-tools') {
        const args = MOCK_TOOL_CALL.arguments;
        frames.push(event('contentBlockStart', { contentBlockIndex: block, start: { toolUse: { toolUseId: MOCK_TOOL_CALL.id, name: MOCK_TOOL_CALL.name } } }));
        frames.push(event('contentBlockDelta', { contentBlockIndex: block, delta: { toolUse: { input: args.slice(0, 10) } } }));
        frames.push(event('contentBlockDelta', { contentBlockIndex: block, delta: { toolUse: { input: args.slice(10) } } }));
        frames.push(event('contentBlockStop', { contentBlockIndex: block++ }));
        output = 12;
        stop = 'tool_use';
      } else {
        const natural = opts.outputTokens ?? 16;
        const n = Math.min(natural, Math.max(0, max - output));
        if (natural > n) stop = 'max_tokens';
        for (let i = 0; i < n; i++) {
          frames.push(event('contentBlockDelta', { contentBlockIndex: block, delta: { text: mockToken(i) } }));
          if (model === 'mock-exception-midstream' && i === 1) {
            frames.push(exception('throttlingException', 'Too many requests, please wait before trying again.'));
            for (const f of frames) res.write(f);
            return res.end();
          }
        }
        frames.push(event('contentBlockStop', { contentBlockIndex: block }));
        output += n;
      }
      frames.push(event('messageStop', { stopReason: stop }));
      const usage = {
        inputTokens: input,
        outputTokens: output,
        totalTokens: input + output + read + write,
        cacheReadInputTokens: read,
        cacheWriteInputTokens: write,
      };
      frames.push(event('metadata', { usage, metrics: { latencyMs: 12 } }));
      stats.usages.push({ model, inputTokens: input, outputTokens: output, cacheReadInputTokens: read, cacheWriteInputTokens: write });
      // frames in a few writes, one of them split inside a frame (as TCP segments may split them)
      const all = Buffer.concat(frames);
      const cut = Math.floor(all.length / 2) + 3;
      res.write(all.subarray(0, cut));
      setTimeout(() => res.end(all.subarray(cut)), 5);
    });
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  const { port } = server.address() as AddressInfo;
  return {
    url: `http://127.0.0.1:${port}`,
    stats,
    close: async () => {
      server.closeAllConnections();
      await new Promise<void>((resolve) => server.close(() => resolve()));
    },
  };
}
