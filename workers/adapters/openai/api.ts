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
