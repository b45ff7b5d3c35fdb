// The SSE parser is the workers' own (one parser for vendors' streams and catraca's).
export { SseParser, type SseEvent } from '../../workers/adapters/shared/sse.ts';

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
