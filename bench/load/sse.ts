// The SSE parser is the workers' own (one parser for vendors' streams and catraca's).
export { SseParser, type SseEvent } from '../../src/providers/shared/sse.ts';

export type ChunkKind = 'content' | 'empty' | 'done' | 'error' | 'invalid';

/**
 * Classifies one OpenAI stream `data:` payload cheaply, without JSON.parse on the hot path:
 * `[DONE]`; a chunk with non-empty `delta.content` ("content"); an error event (`{"error":…}`,
 * OpenRouter's mid-stream failure); anything else that looks like JSON ("empty": the role
 * chunk, finish chunk, usage chunk). Error payloads are parsed to be sure.
 */
export function classifyChunk(data: string): ChunkKind {
  if (data === '[DONE]') return 'done';
  if (data.charCodeAt(0) !== 123 /* { */) return 'invalid';
  if (data.includes('"error"')) {
    try {
      const v = JSON.parse(data) as { error?: unknown };
      if (v && typeof v === 'object' && v.error) return 'error';
    } catch {
      return 'invalid';
    }
  }
  let i = data.indexOf('"content":');
  while (i !== -1) {
    let j = i + 10;
    while (data.charCodeAt(j) === 32) j++;
    // a string value that is not empty: "content":"x…
    if (data.charCodeAt(j) === 34 && data.charCodeAt(j + 1) !== 34) return 'content';
    i = data.indexOf('"content":', j);
  }
  return 'empty';
}

/** The same for one chunk of POST /v1/completions (legacy): a non-empty `text` is content. */
export function classifyCompletionChunk(data: string): ChunkKind {
  const kind = classifyChunk(data);
  if (kind !== 'empty') return kind;
  const i = data.indexOf('"text":"');
  return i !== -1 && data.charCodeAt(i + 8) !== 34 ? 'content' : 'empty';
}

/**
 * The same classification of one event of POST /v1/responses, by its `event:` name: text deltas
 * are content, response.completed / response.incomplete the end, `error` / response.failed errors.
 */
export function classifyResponsesEvent(event: string): ChunkKind {
  if (event === 'response.output_text.delta') return 'content';
  if (event === 'response.completed' || event === 'response.incomplete') return 'done';
  if (event === 'error' || event === 'response.failed') return 'error';
  return event.startsWith('response.') ? 'empty' : 'invalid';
}

/**
 * The same for one event of POST /v1/messages (Anthropic's), by its `event:` name: text deltas are
 * content, message_stop the end, `error` an error.
 */
export function classifyMessagesEvent(event: string, data: string): ChunkKind {
  if (event === 'content_block_delta') return data.includes('"text_delta"') ? 'content' : 'empty';
  if (event === 'message_stop') return 'done';
  if (event === 'error') return 'error';
  return event === 'message_start' || event === 'content_block_start' || event === 'content_block_stop' || event === 'message_delta' || event === 'ping'
    ? 'empty'
    : 'invalid';
}

/**
 * One event of Gemini's streamGenerateContent (alt=sse): a piece with text ("content"), the last
 * one (its finishReason: "done"), an error, or anything else ("empty").
 */
export function classifyGeminiEvent(data: string): ChunkKind {
  const kind = classifyChunk(data);
  if (kind !== 'empty') return kind;
  if (data.includes('"finishReason"')) return 'done';
  const i = data.indexOf('"text":"');
  return i !== -1 && data.charCodeAt(i + 8) !== 34 ? 'content' : 'empty';
}
