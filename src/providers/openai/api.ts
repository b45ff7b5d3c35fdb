// Endpoint and headers of an OpenAI-compatible vendor (OpenAI, OpenRouter, Groq, Together,
// vLLM, Ollama, …). base_url ends in /v1.

const urls = new Map<string, URL>();

/** The endpoint of a base URL, parsed once per base URL (a catalog holds a handful). The URL is shared: read it, never change it. */
export function chatCompletionsUrl(baseUrl: string): URL {
  let url = urls.get(baseUrl);
  if (!url) {
    url = new URL(baseUrl.replace(/\/+$/, '') + '/chat/completions');
    if (urls.size < 1000) urls.set(baseUrl, url);
  }
  return url;
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

const otherUrls = new Map<string, URL>();
/** `{base_url}/embeddings`, `{base_url}/completions`: parsed once per base URL and path, shared (never change it). */
export function endpointUrl(baseUrl: string, path: 'embeddings' | 'completions'): URL {
  const k = `${path} ${baseUrl}`;
  let url = otherUrls.get(k);
  if (!url) {
    url = new URL(`${baseUrl.replace(/\/+$/, '')}/${path}`);
    if (otherUrls.size < 1000) otherUrls.set(k, url);
  }
  return url;
}

/** Headers of a request whose answer is one JSON body (embeddings). */
export function jsonRequestHeaders(apiKey: string | null, bodyBytes: number): Record<string, string> {
  return { ...requestHeaders(apiKey, bodyBytes), accept: 'application/json' };
}
