// A response's ids are derived from its request id (gen-<time><random>): the response is
// resp_<time><random>, so /v1/generation finds it by either, and nothing maps one to the other.
// Its items are <prefix>_<time><random>_<n> (output) and <prefix>_<time><random>_i<n> (input
// items the client sent without an id): the same in the stream, the answer and the stored copy.

const REQUEST_PREFIX = 'gen-';
const RESPONSE_PREFIX = 'resp_';

/** The part of a request id both ids share. */
export function idBase(requestId: string): string {
  return requestId.startsWith(REQUEST_PREFIX) ? requestId.slice(REQUEST_PREFIX.length) : requestId;
}

export function responseIdOf(requestId: string): string {
  return RESPONSE_PREFIX + idBase(requestId);
}

/** The request id of a response id; any other id as it is (GET /v1/generation takes both). */
export function requestIdOf(id: string): string {
  return id.startsWith(RESPONSE_PREFIX) ? REQUEST_PREFIX + id.slice(RESPONSE_PREFIX.length) : id;
}

/** Id prefixes by item type, as OpenAI's. */
export const ITEM_PREFIX: Record<string, string> = {
  message: 'msg',
  reasoning: 'rs',
  function_call: 'fc',
  function_call_output: 'fco',
  custom_tool_call: 'ctc',
  custom_tool_call_output: 'ctco',
};

export const outputItemId = (base: string, type: string, index: number) => `${ITEM_PREFIX[type] ?? 'item'}_${base}_${index}`;
export const inputItemId = (base: string, type: string, index: number) => `${ITEM_PREFIX[type] ?? 'item'}_${base}_i${index}`;
