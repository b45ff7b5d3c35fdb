// Upper bound of a chat request's input tokens, used only to size the hold. Byte-level BPE
// tokenizers (OpenAI's, Llama's, the sim's word count) never emit more tokens than UTF-8 bytes,
// so bytes of every string in the messages plus a per-message framing allowance is safe: the
// debit itself always uses the upstream's reported usage.
const PER_MESSAGE = 8;
const PER_REQUEST = 8;

function stringBytes(value: unknown): number {
  if (typeof value === 'string') return Buffer.byteLength(value, 'utf8');
  if (Array.isArray(value)) return value.reduce((n: number, v) => n + stringBytes(v), 0);
  if (value && typeof value === 'object') return Object.values(value).reduce((n: number, v) => n + stringBytes(v), 0);
  return 0;
}

export function inputTokensUpperBound(body: { messages: unknown[]; tools?: unknown }): number {
  let n = PER_REQUEST + stringBytes(body.tools);
  for (const m of body.messages) n += PER_MESSAGE + stringBytes(m);
  return n;
}
