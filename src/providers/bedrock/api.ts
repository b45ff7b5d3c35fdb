import { Sha256 } from '@aws-crypto/sha256-js';
import { SignatureV4 } from '@smithy/signature-v4';
import { type UpstreamCall, UpstreamError } from '../types.ts';

// Endpoint, region and authentication of Amazon Bedrock's runtime API. A deployment's base_url is
// the regional runtime endpoint, https://bedrock-runtime.{region}.amazonaws.com (the region is read
// from the host), or any URL with ?region= (a VPC endpoint, a test's mock); upstream_model is the
// model or inference-profile id (anthropic.claude-sonnet-4-…-v1:0, sa.anthropic.…). Requests go to
// POST {base}/model/{modelId}/converse-stream.
//
// The variable named by api_key_env holds either AWS credentials, ACCESS_KEY_ID:SECRET_ACCESS_KEY
// or ACCESS_KEY_ID:SECRET_ACCESS_KEY:SESSION_TOKEN (each request is signed with SigV4, service
// "bedrock"), or a Bedrock API key (sent as Authorization: Bearer; API keys never contain ':').

const AWS_HOST = /^bedrock-runtime(?:-fips)?\.([a-z]{2}(?:-[a-z]+)+-\d+)\.amazonaws\.com$/;

/** The deployment's AWS region: ?region= on its base URL, else its runtime host's. */
export function regionOf(baseUrl: string): string | undefined {
  const u = new URL(baseUrl);
  return u.searchParams.get('region') || AWS_HOST.exec(u.hostname)?.[1];
}

export function converseStreamUrl(baseUrl: string, call: UpstreamCall): URL {
  const u = new URL(baseUrl);
  return new URL(`${u.origin}${u.pathname.replace(/\/+$/, '')}/model/${encodeURIComponent(call.model.upstream_model)}/converse-stream`);
}

export type BedrockCredentials = { kind: 'sigv4'; accessKeyId: string; secretAccessKey: string; sessionToken?: string } | { kind: 'api-key'; apiKey: string };

export function parseCredentials(secret: string): BedrockCredentials {
  if (!secret.includes(':')) return { kind: 'api-key', apiKey: secret };
  const [accessKeyId, secretAccessKey, sessionToken, ...rest] = secret.split(':');
  if (!accessKeyId || !secretAccessKey || rest.length > 0)
    throw new UpstreamError(502, 'upstream_not_configured', 'The Bedrock credentials on this worker are not ACCESS_KEY_ID:SECRET[:SESSION_TOKEN].');
  return { kind: 'sigv4', accessKeyId, secretAccessKey, ...(sessionToken ? { sessionToken } : {}) };
}

export function requestHeaders(_key: string | null, bodyBytes: number): Record<string, string> {
  return {
    'content-type': 'application/json',
    accept: 'application/vnd.amazon.eventstream',
    'content-length': String(bodyBytes),
    'user-agent': 'catraca-worker/0.1',
  };
}

/** One signer per credentials and region (each keeps its derived signing keys cached). */
const signers = new Map<string, SignatureV4>();

function signerFor(c: Extract<BedrockCredentials, { kind: 'sigv4' }>, region: string): SignatureV4 {
  const k = `${region} ${c.accessKeyId}:${c.secretAccessKey}:${c.sessionToken ?? ''}`;
  let s = signers.get(k);
  if (!s) {
    s = new SignatureV4({ service: 'bedrock', region, sha256: Sha256, credentials: { ...c } });
    if (signers.size > 100) signers.clear();
    signers.set(k, s);
  }
  return s;
}

/** The headers of one request, authenticated: signed with SigV4, or carrying the API key. */
export async function authenticate(
  url: URL,
  headers: Record<string, string>,
  payload: Buffer,
  secret: string | null,
  region: string | undefined,
  modelId: string,
): Promise<Record<string, string>> {
  if (!secret) throw new UpstreamError(502, 'upstream_not_configured', `The Bedrock credentials for ${modelId} are not configured (api_key_env).`);
  const creds = parseCredentials(secret);
  if (creds.kind === 'api-key') return { ...headers, authorization: `Bearer ${creds.apiKey}` };
  if (!region) throw new UpstreamError(502, 'upstream_not_configured', `The Bedrock deployment of ${modelId} names no region (its host or ?region=).`);
  const { 'user-agent': ua, 'content-length': length, ...signable } = headers;
  const signed = await signerFor(creds, region).sign({
    method: 'POST',
    protocol: url.protocol,
    hostname: url.hostname,
    ...(url.port ? { port: Number(url.port) } : {}),
    path: url.pathname,
    query: {},
    headers: { ...signable, host: url.host },
    body: payload,
  });
  const out: Record<string, string> = { ...(signed.headers as Record<string, string>), 'user-agent': ua!, 'content-length': length! };
  delete out.host; // undici sets it from the origin (the same value)
  return out;
}
