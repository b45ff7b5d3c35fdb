import { expect } from 'vitest';
import type { RawResponse } from './raw-http.ts';

// The documented 4xx answers of the public API (README, "Errors"): code → [status, type].
export const DOCUMENTED_4XX: Record<string, [number, string]> = {
  invalid_json: [400, 'invalid_request_error'],
  json_too_deep: [400, 'invalid_request_error'],
  invalid_request: [400, 'invalid_request_error'],
  unsupported_parameter: [400, 'invalid_request_error'],
  unsupported_content: [400, 'invalid_request_error'],
  missing_api_key: [401, 'authentication_error'],
  invalid_api_key: [401, 'authentication_error'],
  revoked_api_key: [401, 'authentication_error'],
  expired_api_key: [401, 'authentication_error'],
  insufficient_balance: [402, 'insufficient_quota'],
  key_limit_exceeded: [402, 'insufficient_quota'],
  model_not_allowed: [403, 'permission_error'],
  model_not_found: [404, 'not_found_error'],
  route_not_found: [404, 'not_found_error'],
  method_not_allowed: [405, 'invalid_request_error'],
  request_timeout: [408, 'invalid_request_error'],
  request_too_large: [413, 'invalid_request_error'],
  rate_limit_exceeded: [429, 'rate_limit_error'],
};

/** The body is OpenAI's error shape, exactly: {error:{message,type,param,code}}. */
export function expectErrorShape(json: unknown): { message: string; type: string; code: string; param: string | null } {
  expect(json, 'error body is JSON').toBeTypeOf('object');
  const body = json as { error?: Record<string, unknown> };
  expect(Object.keys(body)).toEqual(['error']);
  const e = body.error!;
  expect(Object.keys(e).sort()).toEqual(['code', 'message', 'param', 'type']);
  expect(e.message).toBeTypeOf('string');
  expect((e.message as string).length).toBeGreaterThan(0);
  expect(e.type).toBeTypeOf('string');
  expect(e.code).toBeTypeOf('string');
  expect(e.param === null || typeof e.param === 'string').toBe(true);
  return e as { message: string; type: string; code: string; param: string | null };
}

/**
 * A documented 4xx in the OpenAI error shape, with one of `codes` when given. `allowClosed`: the
 * request was not valid HTTP/1.1 (control bytes in a header), which uWS's parser answers by
 * closing the connection without a status line — no request reached catraca.
 */
export function expectDocumented4xx(r: RawResponse, codes?: string[], opts: { allowClosed?: boolean } = {}): string {
  if (opts.allowClosed && r.status === 0) {
    expect(r.timedOut, 'closed by the server, not left hanging').toBe(false);
    return 'closed';
  }
  const text = r.body.toString('utf8').slice(0, 300);
  expect(r.status, `status (body: ${text})`).toBeGreaterThanOrEqual(400);
  expect(r.status, `status (body: ${text})`).toBeLessThan(500);
  const e = expectErrorShape(r.json);
  const documented = DOCUMENTED_4XX[e.code];
  expect(documented, `code ${e.code} is in the README's errors table`).toBeDefined();
  expect([r.status, e.type]).toEqual(documented);
  if (codes) expect(codes, `code ${e.code} (${e.message})`).toContain(e.code);
  return e.code;
}
