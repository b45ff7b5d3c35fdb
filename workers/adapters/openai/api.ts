import http from 'node:http';
import https from 'node:https';

// Endpoint and headers of an OpenAI-compatible vendor (OpenAI, OpenRouter, Groq, Together,
// vLLM, Ollama, …). base_url ends in /v1.

export function chatCompletionsUrl(baseUrl: string): URL {
  return new URL(baseUrl.replace(/\/+$/, '') + '/chat/completions');
}

export function requestHeaders(apiKey: string | null, bodyBytes: number): Record<string, string> {
  const h: Record<string, string> = {
    'content-type': 'application/json',
    accept: 'text/event-stream',
    'content-length': String(bodyBytes),
    'user-agent': 'catraca-worker/0.1',
  };
  if (apiKey) h.authorization = `Bearer ${apiKey}`;
  return h;
}

// node:http with keep-alive agents rather than global fetch: Node 20 ships no public way to set
// undici's connect timeout without the undici package, and we want UPSTREAM_CONNECT_TIMEOUT_MS.
export const agents = {
  http: new http.Agent({ keepAlive: true, maxSockets: Infinity, scheduling: 'lifo', keepAliveMsecs: 30_000 }),
  https: new https.Agent({ keepAlive: true, maxSockets: Infinity, scheduling: 'lifo', keepAliveMsecs: 30_000 }),
};
