import { describe, expect, it } from 'vitest';
import { errors } from '../../errors.ts';
import { Collected } from '../collector.ts';
import { Untranslatable } from '../messages/to-chat.ts';
import { GeminiEncoder } from './encoder.ts';
import { geminiPath } from './index.ts';
import type { GenerateContentRequest } from './schema.ts';
import { jsonSchemaOf, toChat } from './to-chat.ts';
import { googleErrorBody, usageMetadata } from './wire.ts';

const openai = { protocol: 'openai' as const, reasoning: false };
const refusalOf = (fn: () => unknown) => {
  try {
    fn();
  } catch (err) {
    if (err instanceof Untranslatable) return err.refusal;
    throw err;
  }
  return null;
};

describe('the Gemini request as chat completions', () => {
  it('system, turns, calls without ids answered by name, media, config', () => {
    const req: GenerateContentRequest = {
      systemInstruction: { parts: [{ text: 'be ' }, { text: 'brief' }] },
      contents: [
        { role: 'user', parts: [{ text: 'look: ' }, { inlineData: { mimeType: 'image/png', data: 'AAA' } }] },
        { role: 'model', parts: [{ text: 'thinking', thought: true }, { functionCall: { name: 'a', args: { x: 1 } } }, { functionCall: { name: 'b' } }] },
        { role: 'user', parts: [{ functionResponse: { name: 'b', response: { ok: true } } }, { functionResponse: { name: 'a', response: { v: 2 } } }] },
      ],
      tools: [{ functionDeclarations: [{ name: 'a', parameters: { type: 'OBJECT', properties: { x: { type: 'INTEGER' } } } }, { name: 'b' }] }],
      toolConfig: { functionCallingConfig: { mode: 'ANY', allowedFunctionNames: ['a'] } },
      generationConfig: {
        temperature: 0.2,
        topK: 40,
        maxOutputTokens: 50,
        stopSequences: ['END'],
        responseMimeType: 'application/json',
        responseSchema: { type: 'OBJECT' },
      },
    };
    expect(toChat(req, openai, true)).toEqual({
      messages: [
        { role: 'system', content: 'be brief' },
        {
          role: 'user',
          content: [
            { type: 'text', text: 'look: ' },
            { type: 'image_url', image_url: { url: 'data:image/png;base64,AAA' } },
          ],
        },
        {
          role: 'assistant',
          content: null,
          tool_calls: [
            { id: 'call_1_0', type: 'function', function: { name: 'a', arguments: '{"x":1}' } },
            { id: 'call_1_1', type: 'function', function: { name: 'b', arguments: '{}' } },
          ],
        },
        { role: 'tool', tool_call_id: 'call_1_1', content: '{"ok":true}' },
        { role: 'tool', tool_call_id: 'call_1_0', content: '{"v":2}' },
      ],
      stream: true,
      max_tokens: 50,
      tools: [
        { type: 'function', function: { name: 'a', parameters: { type: 'object', properties: { x: { type: 'integer' } } } } },
        { type: 'function', function: { name: 'b', parameters: { type: 'object', properties: {} } } },
      ],
      tool_choice: { type: 'function', function: { name: 'a' } },
      temperature: 0.2,
      stop: ['END'],
      response_format: { type: 'json_schema', json_schema: { name: 'response', schema: { type: 'object' } } },
    });
  });

  it('thinking as reasoning_effort only for an OpenAI-compatible reasoning model', () => {
    const req = (thinkingConfig: Record<string, unknown>): GenerateContentRequest => ({
      contents: [{ role: 'user', parts: [{ text: 'x' }] }],
      generationConfig: { thinkingConfig },
    });
    const reasoning = { protocol: 'openai' as const, reasoning: true };
    expect(toChat(req({ thinkingBudget: 1024 }), reasoning, false).reasoning_effort).toBe('low');
    expect(toChat(req({ thinkingBudget: 8192 }), reasoning, false).reasoning_effort).toBe('medium');
    expect(toChat(req({ thinkingBudget: -1 }), reasoning, false).reasoning_effort).toBe('medium');
    expect(toChat(req({ thinkingBudget: 0 }), reasoning, false).reasoning_effort).toBeUndefined();
    expect(toChat(req({ thinkingLevel: 'HIGH' }), reasoning, false).reasoning_effort).toBe('high');
    expect(toChat(req({ thinkingBudget: 1024 }), openai, false).reasoning_effort).toBeUndefined();
    expect(toChat(req({ thinkingBudget: 1024 }), { protocol: 'anthropic', reasoning: true }, false).reasoning_effort).toBeUndefined();
  });

  it('refuses what it cannot honour, naming the field', () => {
    const base = { contents: [{ role: 'user', parts: [{ text: 'x' }] }] };
    expect(refusalOf(() => toChat({ ...base, contents: [{ role: 'user', parts: [{ fileData: { fileUri: 'files/abc' } }] }] }, openai, false))?.param).toBe(
      'contents[0].parts[0].fileData',
    );
    expect(
      refusalOf(() => toChat({ ...base, contents: [{ role: 'user', parts: [{ inlineData: { mimeType: 'audio/wav', data: 'A' } }] }] }, openai, false))?.param,
    ).toBe('contents[0].parts[0].inlineData');
    expect(refusalOf(() => toChat({ ...base, contents: [{ role: 'user', parts: [{ functionResponse: { name: 'nobody' } }] }] }, openai, false))?.param).toBe(
      'contents[0].parts[0].functionResponse',
    );
    expect(refusalOf(() => toChat({ ...base, generationConfig: { responseMimeType: 'text/x.enum' } }, openai, false))?.param).toBe(
      'generationConfig.responseMimeType',
    );
    expect(refusalOf(() => toChat({ ...base, generationConfig: { responseModalities: ['TEXT', 'IMAGE'] } }, openai, false))?.message).toBe(
      'generationConfig.responseModalities: only TEXT output is available through this gateway (asked: IMAGE).',
    );
    expect(refusalOf(() => toChat({ ...base, tools: [{ codeExecution: {} }] }, openai, false))?.param).toBe('tools[0].codeExecution');
    expect(refusalOf(() => toChat({ ...base, safetySettings: [{ category: 'HARM_CATEGORY_HATE_SPEECH', threshold: 'OFF' }] }, openai, false))).toBeNull();
  });

  it("lowercases every type name of Google's OpenAPI schema", () => {
    expect(jsonSchemaOf({ type: 'ARRAY', items: { type: 'STRING', enum: ['A'] }, anyOf: [{ type: 'NUMBER' }] })).toEqual({
      type: 'array',
      items: { type: 'string', enum: ['A'] },
      anyOf: [{ type: 'number' }],
    });
  });
});

describe('paths, usage and errors in Google terms', () => {
  it('reads the model (its slash kept) and the method from the path', () => {
    expect(geminiPath('/v1beta/models/acme/model-x:streamGenerateContent')).toEqual({ model: 'acme/model-x', method: 'streamGenerateContent' });
    expect(geminiPath('/v1beta/models/models/gemini-2.5-pro:countTokens')).toEqual({ model: 'gemini-2.5-pro', method: 'countTokens' });
    expect(geminiPath('/v1beta/models/acme%2Fx:generateContent')).toEqual({ model: 'acme/x', method: 'generateContent' });
    expect(geminiPath('/v1beta/models/acme')).toBeNull();
  });

  it('usageMetadata: thoughts apart from the answer, cache reads named', () => {
    expect(usageMetadata({ prompt_tokens: 100, completion_tokens: 30, cached_tokens: 40, reasoning_tokens: 10 })).toEqual({
      promptTokenCount: 100,
      candidatesTokenCount: 20,
      totalTokenCount: 130,
      cachedContentTokenCount: 40,
      thoughtsTokenCount: 10,
    });
  });

  it("Google's error bodies and statuses", () => {
    expect(googleErrorBody(errors.invalidKey())).toEqual({
      error: { code: 400, message: 'API key not valid. Please pass a valid API key.', status: 'INVALID_ARGUMENT' },
    });
    expect(googleErrorBody(errors.missingKey()).error).toMatchObject({ code: 403, status: 'PERMISSION_DENIED' });
    expect(googleErrorBody(errors.modelNotAllowed('a/b')).error).toMatchObject({ code: 403, status: 'PERMISSION_DENIED' });
    expect(googleErrorBody(errors.insufficientBalance('This request requires more credits.')).error).toEqual({
      code: 402,
      message: 'This request requires more credits.',
      status: 'RESOURCE_EXHAUSTED',
    });
    expect(googleErrorBody(errors.rateLimited(3)).error).toMatchObject({ code: 429, status: 'RESOURCE_EXHAUSTED' });
    expect(googleErrorBody(errors.overloaded()).error).toMatchObject({ code: 503, status: 'UNAVAILABLE' });
    expect(googleErrorBody(errors.timeout()).error).toMatchObject({ code: 504, status: 'DEADLINE_EXCEEDED' });
  });
});

describe('the answer in Gemini shape', () => {
  const ctx = { requestId: 'gen-1', model: 'acme/x', created: 0, streaming: true };
  const end = { finishReason: 'tool_calls', usage: { prompt_tokens: 10, completion_tokens: 5 }, estimated: false, costMicros: 1n };

  it('streamed: a text event per token, the calls whole in the last event with finishReason and usage', () => {
    const enc = new GeminiEncoder(ctx, false);
    expect(enc.open()).toBe('');
    expect(Buffer.from(enc.text(Buffer.from('"Hi"'))).toString()).toBe(
      'data: {"candidates":[{"content":{"parts":[{"text":"Hi"}],"role":"model"},"index":0}],"modelVersion":"acme/x","responseId":"gen-1"}\r\n\r\n',
    );
    expect(enc.delta({ reasoning: 'hidden' })).toBe('');
    expect(enc.delta({ tool_calls: [{ index: 0, id: 'c1', function: { name: 'f', arguments: '{"a"' } }] })).toBe('');
    enc.delta({ tool_calls: [{ index: 0, function: { arguments: ':1}' } }] });
    const last = JSON.parse(enc.close(end).slice('data: '.length));
    expect(last).toEqual({
      candidates: [{ content: { parts: [{ functionCall: { id: 'c1', name: 'f', args: { a: 1 } } }], role: 'model' }, finishReason: 'STOP', index: 0 }],
      usageMetadata: { promptTokenCount: 10, candidatesTokenCount: 5, totalTokenCount: 15 },
      modelVersion: 'acme/x',
      responseId: 'gen-1',
    });
    expect(enc.fail(errors.overloaded())).toBe(
      'data: {"error":{"code":503,"message":"Every worker of this model is busy and the wait for one ran out; retry shortly.","status":"UNAVAILABLE"}}\r\n\r\n',
    );
  });

  it('whole: thoughts shown when asked, text and calls in order', () => {
    const out = new Collected();
    out.delta({ reasoning: 'hmm' });
    out.text('Hello');
    out.toolCalls([{ index: 0, function: { name: 'g', arguments: '' } }]);
    const body = new GeminiEncoder({ ...ctx, streaming: false }, true).body(out, { ...end, finishReason: 'length' });
    expect(body.candidates[0]).toEqual({
      content: { parts: [{ text: 'hmm', thought: true }, { text: 'Hello' }, { functionCall: { id: 'call_gen-1_0', name: 'g', args: {} } }], role: 'model' },
      finishReason: 'MAX_TOKENS',
      index: 0,
    });
  });
});
