// Endpoints and headers of Azure OpenAI. A deployment's base_url is either
//   the resource (optionally with its /openai path and an api-version):
//     https://RES.openai.azure.com?api-version=2024-10-21
//     → POST https://RES.openai.azure.com/openai/deployments/{upstream_model}/chat/completions?api-version=2024-10-21
//     (upstream_model is the Azure deployment name; api-version defaults to AZURE_API_VERSION)
//   or the v1 API, which takes the deployment name as `model` and no api-version:
//     https://RES.openai.azure.com/openai/v1 → POST …/openai/v1/chat/completions
// The key goes in the api-key header (Azure's own; the v1 API takes it too).

/** The latest generally-available data-plane api-version (Azure OpenAI's API version lifecycle). */
export const AZURE_API_VERSION = '2024-10-21';

/** Whether a base URL is the v1 API (`…/openai/v1`). */
export const isV1 = (baseUrl: string) => /\/openai\/v1\/*$/.test(new URL(baseUrl).pathname);

const urls = new Map<string, URL>();

/** The chat-completions endpoint of a base URL and deployment, parsed once per pair (shared: never change it). */
export function chatCompletionsUrl(baseUrl: string, deployment: string): URL {
  const k = `${deployment} ${baseUrl}`;
  let url = urls.get(k);
  if (url) return url;
  const base = new URL(baseUrl);
  if (isV1(baseUrl)) {
    url = new URL(`${base.origin}${base.pathname.replace(/\/+$/, '')}/chat/completions${base.search}`);
  } else {
    const root = base.pathname.replace(/\/+$/, '').replace(/\/openai$/, '');
    url = new URL(`${base.origin}${root}/openai/deployments/${encodeURIComponent(deployment)}/chat/completions`);
    url.searchParams.set('api-version', base.searchParams.get('api-version') || AZURE_API_VERSION);
  }
  if (urls.size < 1000) urls.set(k, url);
  return url;
}

export function requestHeaders(apiKey: string | null, bodyBytes: number): Record<string, string> {
  const h: Record<string, string> = {
    'content-type': 'application/json',
    accept: 'text/event-stream',
    'content-length': String(bodyBytes),
    'user-agent': 'catraca-worker/0.1',
  };
  if (apiKey) h['api-key'] = apiKey;
  return h;
}
