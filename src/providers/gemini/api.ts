import { readFile } from 'node:fs/promises';
import { importPKCS8, SignJWT } from 'jose';
import { z } from 'zod';
import { type UpstreamCall, UpstreamError } from '../types.ts';

// Endpoints and authentication of Google's Gemini API and of Vertex AI. A deployment's base_url:
//   the Gemini API            https://generativelanguage.googleapis.com/v1beta
//     → POST {base}/models/{model}:streamGenerateContent?alt=sse, the key (api_key_env) in x-goog-api-key
//   Vertex AI                 https://{region}-aiplatform.googleapis.com/v1/projects/{project}/locations/{region}/publishers/google
//     (`catraca model set|deployment add --protocol gemini --vertex-project P --region R` writes it)
//     → POST {base}/models/{model}:streamGenerateContent?alt=sse with Authorization: Bearer {token}
// For Vertex, api_key_env names a variable holding the path of a service-account JSON key file
// (client_email, private_key, token_uri). catraca mints the access token itself (OAuth 2.0 JWT
// bearer grant, RS256-signed assertion, scope cloud-platform) and mints a new one 5 minutes before
// it expires.

const VERTEX_PATH = /\/projects\/([^/]+)\/locations\/([^/]+)\/publishers\/google\/*$/;

/** The Vertex project and region of a base URL, when it is a Vertex one. */
export function vertexOf(baseUrl: string): { project: string; region: string } | undefined {
  const m = VERTEX_PATH.exec(new URL(baseUrl).pathname);
  return m ? { project: decodeURIComponent(m[1]!), region: decodeURIComponent(m[2]!) } : undefined;
}

/** Vertex AI's base URL for a project and region (the global endpoint for "global"). */
export function vertexBaseUrl(project: string, region: string): string {
  const host = region === 'global' ? 'aiplatform.googleapis.com' : `${region}-aiplatform.googleapis.com`;
  return `https://${host}/v1/projects/${encodeURIComponent(project)}/locations/${encodeURIComponent(region)}/publishers/google`;
}

export function streamUrl(baseUrl: string, call: UpstreamCall): URL {
  const u = new URL(baseUrl);
  return new URL(`${u.origin}${u.pathname.replace(/\/+$/, '')}/models/${encodeURIComponent(call.model.upstream_model)}:streamGenerateContent?alt=sse`);
}

export function requestHeaders(_key: string | null, bodyBytes: number): Record<string, string> {
  return { 'content-type': 'application/json', accept: 'text/event-stream', 'content-length': String(bodyBytes), 'user-agent': 'catraca-worker/0.1' };
}

const ServiceAccount = z.object({
  client_email: z.string().min(1),
  private_key: z.string().min(1),
  private_key_id: z.string().optional(),
  token_uri: z.string().url().default('https://oauth2.googleapis.com/token'),
});

export const VERTEX_SCOPE = 'https://www.googleapis.com/auth/cloud-platform';
/** A token is replaced this long before Google says it expires. */
const REFRESH_MARGIN_MS = 5 * 60_000;

interface Minted {
  token: string;
  expiresAt: number;
}

/** Access tokens per service-account file, minted once and shared by concurrent calls. */
export class VertexTokens {
  private readonly byFile = new Map<string, Promise<Minted>>();

  constructor(
    private readonly fetchImpl: typeof fetch = fetch,
    private readonly now: () => number = Date.now,
  ) {}

  async token(file: string): Promise<string> {
    const cached = this.byFile.get(file);
    if (cached) {
      const m = await cached.catch(() => undefined);
      if (m && m.expiresAt - REFRESH_MARGIN_MS > this.now()) return m.token;
      if (this.byFile.get(file) !== cached) return this.token(file); // another call is minting already
    }
    const minting = this.mint(file);
    this.byFile.set(file, minting);
    minting.catch(() => this.byFile.get(file) === minting && this.byFile.delete(file));
    return (await minting).token;
  }

  private async mint(file: string): Promise<Minted> {
    let sa: z.infer<typeof ServiceAccount>;
    try {
      sa = ServiceAccount.parse(JSON.parse(await readFile(file, 'utf8')));
    } catch {
      throw new UpstreamError(502, 'upstream_not_configured', 'The Vertex AI service-account file on this worker is missing or not a service-account key.');
    }
    const now = Math.floor(this.now() / 1000);
    const key = await importPKCS8(sa.private_key, 'RS256');
    const assertion = await new SignJWT({ scope: VERTEX_SCOPE })
      .setProtectedHeader({ alg: 'RS256', typ: 'JWT', ...(sa.private_key_id ? { kid: sa.private_key_id } : {}) })
      .setIssuer(sa.client_email)
      .setSubject(sa.client_email)
      .setAudience(sa.token_uri)
      .setIssuedAt(now)
      .setExpirationTime(now + 3600)
      .sign(key);
    let res: Response;
    try {
      res = await this.fetchImpl(sa.token_uri, {
        method: 'POST',
        headers: { 'content-type': 'application/x-www-form-urlencoded' },
        body: new URLSearchParams({ grant_type: 'urn:ietf:params:oauth:grant-type:jwt-bearer', assertion }).toString(),
        signal: AbortSignal.timeout(10_000),
      });
    } catch {
      throw new UpstreamError(502, 'upstream_unreachable', 'The Vertex AI token endpoint could not be reached.');
    }
    const body = (await res.json().catch(() => ({}))) as { access_token?: unknown; expires_in?: unknown };
    if (!res.ok || typeof body.access_token !== 'string')
      throw new UpstreamError(
        502,
        'upstream_auth_failed',
        `The Vertex AI token endpoint refused the service account (HTTP ${res.status}); the operator must fix its configuration.`,
      );
    const seconds = typeof body.expires_in === 'number' && body.expires_in > 0 ? body.expires_in : 3600;
    return { token: body.access_token, expiresAt: this.now() + seconds * 1000 };
  }
}

/** The headers of one request: the API key, or a Vertex access token. */
export async function authenticate(
  headers: Record<string, string>,
  secret: string | null,
  vertex: boolean,
  tokens: VertexTokens,
  modelId: string,
): Promise<Record<string, string>> {
  if (!secret) throw new UpstreamError(502, 'upstream_not_configured', `The Gemini credentials for ${modelId} are not configured (api_key_env).`);
  if (!vertex) return { ...headers, 'x-goog-api-key': secret };
  return { ...headers, authorization: `Bearer ${await tokens.token(secret)}` };
}
