// What the mock vendors answer, shared by their OpenAI and Anthropic wire formats.

export const MOCK_WORDS = ['Hello', 'world', 'foo', 'bar', 'baz', 'qux', 'quux', 'corge', 'grault', 'garply', 'waldo', 'fred', 'plugh', 'xyzzy', 'thud'];

/** The mock's i-th output token. */
export function mockToken(i: number): string {
  return (i === 0 ? '' : ' ') + MOCK_WORDS[i % MOCK_WORDS.length];
}
/** The mock's first n output tokens, concatenated. */
export function mockText(n: number): string {
  let s = '';
  for (let i = 0; i < n; i++) s += mockToken(i);
  return s;
}

/** What `mock-reasoning` streams as reasoning before its answer. */
export const MOCK_REASONING = ['Let', ' me', ' think'];

/** What `mock-tools` answers: one call of a weather function, streamed in three argument pieces. */
export const MOCK_TOOL_CALL = { id: 'call_mock_weather_1', name: 'get_weather', arguments: '{"city":"São Paulo","unit":"celsius"}' };
export const MOCK_TOOL_COMPLETION_TOKENS = 12;
