import type http from 'node:http';

// What the mock's OpenAI endpoints share: reading a JSON body, OpenAI's error bodies.

export function sendJson(res: http.ServerResponse, status: number, body: string, headers: Record<string, string> = {}): void {
  res.writeHead(status, { 'content-type': 'application/json', 'content-length': Buffer.byteLength(body), ...headers });
  res.end(body);
}

/** OpenAI's error body: {"error":{"message","type","param","code"}}. */
export function sendOpenAIError(
  res: http.ServerResponse,
  status: number,
  message: string,
  extra: { type?: string; param?: string | null; code?: string | null; headers?: Record<string, string> } = {},
): void {
  const error = { message, type: extra.type ?? 'invalid_request_error', param: extra.param ?? null, code: extra.code ?? null };
  sendJson(res, status, JSON.stringify({ error }), extra.headers);
}

/** Reads the request body as a JSON object, or answers OpenAI's 400 and calls nothing. */
export function readJsonBody(req: http.IncomingMessage, res: http.ServerResponse, onBody: (body: Record<string, unknown>) => void): void {
  const chunks: Buffer[] = [];
  req.on('data', (c: Buffer) => chunks.push(c));
  req.on('end', () => {
    let body: unknown;
    try {
      body = JSON.parse(Buffer.concat(chunks).toString('utf8'));
    } catch {
      body = undefined;
    }
    if (!body || typeof body !== 'object' || Array.isArray(body)) return sendOpenAIError(res, 400, 'We could not parse the JSON body of your request.');
    onBody(body as Record<string, unknown>);
  });
}

/** The first field OpenAI does not document for this endpoint, answered as OpenAI answers it; true when refused. */
export function refuseUnknown(res: http.ServerResponse, body: Record<string, unknown>, known: Set<string>): boolean {
  const unknown = Object.keys(body).find((k) => !known.has(k));
  if (unknown === undefined) return false;
  sendOpenAIError(res, 400, `Unrecognized request argument supplied: ${unknown}`);
  return true;
}

/** OpenAI's rate-limit and server-error answers, for the mock's failure models. */
export function sendVendorFailure(res: http.ServerResponse, kind: '429' | '500'): void {
  if (kind === '429') {
    return sendOpenAIError(
      res,
      429,
      'Rate limit reached for requests in organization org-MockOrg123456 on requests per min (RPM): Limit 3, Used 3, Requested 1.',
      {
        type: 'requests',
        code: 'rate_limit_exceeded',
        headers: { 'retry-after': '1' },
      },
    );
  }
  sendOpenAIError(res, 500, 'The server had an error while processing your request. Sorry about that!', { type: 'server_error' });
}
