// Endpoint and headers of Anthropic's Messages API. base_url ends in /v1 (https://api.anthropic.com/v1).
export const ANTHROPIC_VERSION = '2023-06-01';

export function messagesUrl(baseUrl: string): URL {
  return new URL(baseUrl.replace(/\/+$/, '') + '/messages');
}

export function requestHeaders(apiKey: string | null, bodyBytes: number): Record<string, string> {
  const h: Record<string, string> = {
    'content-type': 'application/json',
    accept: 'text/event-stream',
    'content-length': String(bodyBytes),
    'anthropic-version': ANTHROPIC_VERSION,
    'user-agent': 'catraca-worker/0.1',
  };
  if (apiKey) h['x-api-key'] = apiKey;
  return h;
}
