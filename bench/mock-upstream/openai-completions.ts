import type http from 'node:http';
import { countTokens } from '../../src/providers/sim/tokens.ts';
import { mockToken } from './content.ts';
import type { MockStats } from './stats.ts';
import { readJsonBody, refuseUnknown, sendJson, sendOpenAIError, sendVendorFailure } from './openai-wire.ts';

// OpenAI's legacy POST /v1/completions, as the mock vendor speaks it (text_completion objects):
//   output   the mock's tokens (content.ts), natural length `outputTokens` (or mock.output_tokens),
//            cut at max_tokens (default 16, as OpenAI) → finish_reason "length"; a `stop` sequence
//            ends the text before it → "stop" (the token that completed it is still billed)
//   usage    prompt_tokens = the sim's count of the prompt text (no framing) + of the suffix, or the
//            number of token ids; completion_tokens = tokens generated
//   stream   one chunk per token, a last chunk with the finish reason, a usage chunk (choices [])
//            when stream_options.include_usage, then `data: [DONE]`; mock.first_token_ms and
//            mock.tokens_per_second pace it
//   one prompt per request (batch prompts: 400; a gateway never sends them)
//   refusals unknown fields (400 "Unrecognized request argument supplied"), a missing prompt
//   failures mock-500 → 500, mock-429 → 429

const PARAMS = new Set([
  'model',
  'prompt',
  'suffix',
  'echo',
  'logprobs',
  'max_tokens',
  'stop',
  'temperature',
  'top_p',
  'n',
  'best_of',
  'presence_penalty',
  'frequency_penalty',
  'logit_bias',
  'seed',
  'user',
  'stream',
  'stream_options',
  'mock',
]);

let seq = 0;

/** The one prompt's token count (sim count of a text, or its token ids); null when it is not one prompt. */
function promptTokensOf(prompt: unknown): number | null {
  if (typeof prompt === 'string') return countTokens(prompt);
  if (!Array.isArray(prompt) || prompt.length === 0) return null;
  if (prompt.every((t) => typeof t === 'number')) return prompt.length;
  if (prompt.length !== 1) return null;
  return promptTokensOf(prompt[0]);
}

interface Generated {
  pieces: string[];
  finish: 'stop' | 'length';
}

/** The tokens the mock says, cut at max_tokens or before a stop sequence. */
function generate(natural: number, cap: number, stop: string[]): Generated {
  const pieces: string[] = [];
  let text = '';
  for (let i = 0; i < Math.min(natural, cap); i++) {
    const next = text + mockToken(i);
    const at = stop.map((s) => next.indexOf(s)).filter((x) => x >= 0);
    if (at.length) {
      pieces.push(next.slice(text.length, Math.min(...at)));
      return { pieces, finish: 'stop' };
    }
    pieces.push(mockToken(i));
    text = next;
  }
  return { pieces, finish: natural > cap ? 'length' : 'stop' };
}

export function handleCompletions(req: http.IncomingMessage, res: http.ServerResponse, stats: MockStats, outputTokens: number): void {
  readJsonBody(req, res, (body) => {
    stats.lastBody = body;
    if (refuseUnknown(res, body, PARAMS)) return;
    const model = typeof body.model === 'string' ? body.model : '';
    if (model === 'mock-500' || model === 'mock-429') return sendVendorFailure(res, model === 'mock-500' ? '500' : '429');
    if (body.prompt === undefined) return sendOpenAIError(res, 400, "'prompt' is a required property");
    const promptTokens = promptTokensOf(body.prompt);
    if (promptTokens === null) return sendOpenAIError(res, 400, 'The mock vendor answers one prompt per request.', { param: 'prompt' });
    const prompt = promptTokens + (typeof body.suffix === 'string' ? countTokens(body.suffix) : 0);
    const ov = (body.mock && typeof body.mock === 'object' ? body.mock : {}) as Record<string, unknown>;
    const num = (v: unknown) => (typeof v === 'number' && v >= 0 ? v : undefined);
    const cap = typeof body.max_tokens === 'number' ? body.max_tokens : 16;
    const stop = typeof body.stop === 'string' ? [body.stop] : Array.isArray(body.stop) ? (body.stop as string[]) : [];
    const out = generate(num(ov.output_tokens) ?? outputTokens, cap, stop);
    const usage = `{"prompt_tokens":${prompt},"completion_tokens":${out.pieces.length},"total_tokens":${prompt + out.pieces.length}}`;
    const id = `cmpl-mock${(++seq).toString(36).padStart(8, '0')}`;
    const created = Math.floor(Date.now() / 1000);
    const head = `{"id":"${id}","object":"text_completion","created":${created},"model":${JSON.stringify(model)},`;
    const choice = (text: string, finish: string | null) =>
      `"choices":[{"text":${JSON.stringify(text)},"index":0,"logprobs":null,"finish_reason":${finish === null ? 'null' : `"${finish}"`}}]`;
    if (body.stream !== true) return sendJson(res, 200, `${head}${choice(out.pieces.join(''), out.finish)},"usage":${usage}}`);

    const includeUsage = (body.stream_options as { include_usage?: unknown } | undefined)?.include_usage === true;
    const chunks = out.pieces.map((p) => `data: ${head}${choice(p, null)}}\n\n`);
    const last = `data: ${head}${choice('', out.finish)}}\n\n${includeUsage ? `data: ${head}"choices":[],"usage":${usage}}\n\n` : ''}data: [DONE]\n\n`;
    res.writeHead(200, { 'content-type': 'text/event-stream; charset=utf-8', 'cache-control': 'no-cache' });
    const tps = num(ov.tokens_per_second) ?? 0;
    if (tps === 0) return void res.end(chunks.join('') + last);
    let closed = false;
    res.once('close', () => (closed = true));
    let i = 0;
    const step = () => {
      if (closed) return;
      if (i >= chunks.length) return void res.end(last);
      res.write(chunks[i++]);
      setTimeout(step, 1000 / tps);
    };
    setTimeout(step, num(ov.first_token_ms) ?? 0);
  });
}
