// The one error class of the public API. Its JSON is OpenAI's error body:
//   {"error":{"message","type","code","param"}}
export type ErrorType =
  | 'invalid_request_error'
  | 'authentication_error'
  | 'permission_error'
  | 'not_found_error'
  | 'insufficient_quota'
  | 'rate_limit_error'
  | 'upstream_error'
  | 'timeout_error'
  | 'service_unavailable'
  | 'server_error';

export class CatracaError extends Error {
  constructor(
    readonly status: number,
    readonly type: ErrorType,
    readonly code: string,
    message: string,
    readonly param: string | null = null,
    readonly headers: Record<string, string> = {},
  ) {
    super(message);
    this.name = 'CatracaError';
  }

  /** A refusal that the same request, asked again, meets again (one request over a per-minute limit). */
  permanent = false;

  toJSON() {
    return { error: { message: this.message, type: this.type, code: this.code, param: this.param } };
  }
}

export const errors = {
  badRequest: (message: string, param: string | null = null, code = 'invalid_request') => new CatracaError(400, 'invalid_request_error', code, message, param),
  invalidJson: () => new CatracaError(400, 'invalid_request_error', 'invalid_json', 'Request body is not valid JSON.'),
  invalidUtf8: () => new CatracaError(400, 'invalid_request_error', 'invalid_json', 'Request body is not valid UTF-8.'),
  numberOutOfRange: (literal: string) =>
    new CatracaError(400, 'invalid_request_error', 'invalid_json', `Request body has a number out of range (${literal}): numbers must fit an IEEE 754 double.`),
  jsonTooDeep: (max: number) =>
    new CatracaError(400, 'invalid_request_error', 'json_too_deep', `Request body nests arrays and objects deeper than ${max} levels.`),
  missingKey: () => new CatracaError(401, 'authentication_error', 'missing_api_key', 'Missing API key. Send it as "Authorization: Bearer <API_KEY>".'),
  invalidKey: () => new CatracaError(401, 'authentication_error', 'invalid_api_key', 'Invalid API key.'),
  revokedKey: () => new CatracaError(401, 'authentication_error', 'revoked_api_key', 'This API key has been revoked.'),
  expiredKey: () => new CatracaError(401, 'authentication_error', 'expired_api_key', 'This API key has expired.'),
  insufficientBalance: (message: string) => new CatracaError(402, 'insufficient_quota', 'insufficient_balance', message),
  keyLimit: (message: string) => new CatracaError(402, 'insufficient_quota', 'key_limit_exceeded', message),
  modelNotAllowed: (model: string) =>
    new CatracaError(403, 'permission_error', 'model_not_allowed', `This API key is not allowed to use model "${model}".`, 'model'),
  dataResidencyUnavailable: (model: string, country: string) =>
    new CatracaError(
      403,
      'permission_error',
      'data_residency_unavailable',
      `This key's requests must stay in ${country}, and ${model} has no deployment there.`,
      'model',
    ),
  tenantSuspended: () =>
    new CatracaError(
      403,
      'permission_error',
      'tenant_suspended',
      "This account's requests are suspended; its owner must contact the operator (the balance and keys are kept).",
    ),
  modelNotFound: (model: string) => new CatracaError(404, 'not_found_error', 'model_not_found', `The model "${model}" does not exist.`, 'model'),
  wrongModelKind: (model: string, kind: string, path: string) =>
    new CatracaError(
      400,
      'invalid_request_error',
      'wrong_model_kind',
      kind === 'embedding'
        ? `The model "${model}" is an embedding model: use it with /v1/embeddings, not ${path}.`
        : `The model "${model}" is a chat model: ${path} needs an embedding model.`,
      'model',
    ),
  noDeploymentMatches: (model: string) =>
    new CatracaError(
      400,
      'invalid_request_error',
      'no_deployment_matches',
      `No deployment of model "${model}" matches the request's provider preferences (only, ignore).`,
      'provider',
    ),
  routeNotFound: (method: string, path: string) => new CatracaError(404, 'not_found_error', 'route_not_found', `No route for ${method} ${path}.`),
  methodNotAllowed: (method: string, path: string) =>
    new CatracaError(405, 'invalid_request_error', 'method_not_allowed', `Method ${method} is not allowed on ${path}.`),
  bodyTooLarge: (limit: number) => new CatracaError(413, 'invalid_request_error', 'request_too_large', `Request body exceeds the limit of ${limit} bytes.`),
  /** The request passed MAX_BODY_BYTES but its job would exceed the bus's largest message. */
  jobTooLarge: (maxPayload: number) =>
    new CatracaError(413, 'invalid_request_error', 'request_too_large', `Request is too large: it must fit in ${maxPayload} bytes once forwarded to a worker.`),
  bodyTimeout: (ms: number) => new CatracaError(408, 'invalid_request_error', 'request_timeout', `The request body did not arrive within ${ms} ms.`),
  unsupportedMediaType: () => new CatracaError(415, 'invalid_request_error', 'unsupported_media_type', 'Content-Type must be application/json.'),
  rateLimited: (retryAfterS: number, headers: Record<string, string> = {}) =>
    new CatracaError(429, 'rate_limit_error', 'rate_limit_exceeded', `Rate limit exceeded. Retry after ${retryAfterS} s.`, null, {
      'retry-after': String(retryAfterS),
      ...headers,
    }),
  /** Too many lookups of keys this front door does not know, from one client address (before any database read). */
  unknownKeysLimited: (retryAfterS: number) =>
    new CatracaError(
      429,
      'rate_limit_error',
      'rate_limit_exceeded',
      `Too many requests with unknown API keys from this address. Retry after ${retryAfterS} s.`,
      null,
      { 'retry-after': String(retryAfterS) },
    ),
  /** Every key lookup of this front door is busy (a flood of unknown keys): nothing was read or charged. */
  keyLookupBusy: () =>
    new CatracaError(
      503,
      'service_unavailable',
      'key_lookup_busy',
      'Too many API keys are being checked right now; nothing was charged. Retry shortly.',
      null,
      {
        'retry-after': '1',
      },
    ),
  concurrencyLimited: (max: number) =>
    new CatracaError(
      429,
      'rate_limit_error',
      'concurrency_limit_exceeded',
      `This key already has ${max} requests in flight, its limit; retry when one ends.`,
      null,
      {
        'retry-after': '1',
      },
    ),
  tpmLimited: (tokens: number, limit: number, remaining: number, retryAfterS: number) =>
    Object.assign(
      new CatracaError(
        429,
        'rate_limit_error',
        'tpm_limit_exceeded',
        `This request counts ${tokens} tokens (its prompt estimate and max_tokens) against this key's limit of ${limit} tokens per minute, of which ${remaining} remain; retry after ${retryAfterS} s, or ask for fewer max_tokens.`,
        null,
        { 'retry-after': String(retryAfterS) },
      ),
      { permanent: tokens > limit },
    ),
  endUserLimit: (endUser: string, availableMicros: bigint) =>
    new CatracaError(
      402,
      'insufficient_quota',
      'end_user_limit_exceeded',
      `End user "${endUser}" has reached this key's daily limit per end user (R$ ${availableMicros / 1_000_000n}.${(availableMicros % 1_000_000n).toString().padStart(6, '0')} left today, UTC), not enough for this request.`,
      'user',
    ),
  upstream: (status: number, code: string, message: string) => new CatracaError(status, 'upstream_error', code, message),
  noWorker: (pool: string) => new CatracaError(503, 'service_unavailable', 'no_worker_available', `No worker is serving the "${pool}" pool right now.`),
  modelChanged: (model: string) =>
    new CatracaError(
      503,
      'service_unavailable',
      'model_changed',
      `The configuration of model "${model}" changed while this request was admitted; retry.`,
      null,
      { 'retry-after': '1' },
    ),
  overloaded: (retryAfterS = 1) =>
    new CatracaError(503, 'service_unavailable', 'overloaded', 'Every worker of this model is busy and the wait for one ran out; retry shortly.', null, {
      'retry-after': String(retryAfterS),
    }),
  /** internal: a worker refused a job as invalid (the front door maps it) */
  workerRefused: (reason: string) => new CatracaError(503, 'service_unavailable', 'worker_refused', reason),
  /** internal: the client left while its job waited (never answered) */
  cancelled: () => new CatracaError(499, 'invalid_request_error', 'request_cancelled', 'The request was cancelled by the client.'),
  shuttingDown: () => new CatracaError(503, 'service_unavailable', 'shutting_down', 'This instance is shutting down; retry.'),
  timeout: (message = 'The upstream did not answer in time.') => new CatracaError(504, 'timeout_error', 'upstream_timeout', message),
  /** PostgreSQL is unreachable or saturated: nothing was admitted or charged; retry. */
  databaseUnavailable: () =>
    new CatracaError(503, 'service_unavailable', 'database_unavailable', 'The billing database is unavailable; nothing was charged. Retry shortly.', null, {
      'retry-after': '2',
    }),
  /** A database statement ran past its timeout: nothing was admitted or charged; retry. */
  databaseTimeout: () =>
    new CatracaError(503, 'service_unavailable', 'database_timeout', 'The billing database did not answer in time; nothing was charged. Retry shortly.', null, {
      'retry-after': '2',
    }),
  internal: () => new CatracaError(500, 'server_error', 'internal_error', 'Internal error.'),
};
