import { PER_MESSAGE, PER_REQUEST, PER_TOOL, promptCap, TOOLS_OVERHEAD, unboundedPart } from '../../billing/estimate.ts';
import type { ModelRecord } from '../../db/models.ts';
import type { AnthropicBody, Block } from './schema.ts';

// Upper bound of the prompt tokens an Anthropic vendor can bill for a Messages request, sized the
// way src/billing/estimate.ts bounds a chat request (a byte-level BPE never makes more tokens than
// bytes; JSON bytes are more than the vendor's rendering of a value):
//   text                 UTF-8 bytes of every text: system (string or blocks), `system` turns,
//                        text blocks, tool_use ids, names and input JSON, tool_result content,
//                        thinking text and its signature (the vendor may bill the thinking the
//                        signature carries), redacted thinking data, search results
//   images               the catalog's per-image bound (`image_input_tokens`), else as documents
//   documents (PDFs…)    the whole context window; for a model whose context length was never
//                        given, the default context or the block's JSON bytes, whichever is more
//                        (unboundedPart in src/billing/estimate.ts)
//   tools                their JSON, PER_TOOL each and TOOLS_OVERHEAD once (Anthropic's tool-use
//                        system prompt); an Anthropic-defined tool (bash, text editor, computer)
//                        TOOLS_OVERHEAD more (its own system prompt)
//   other fields         the JSON of tool_choice, stop_sequences, thinking, output_config,
//                        output_format, context_management
//   total                at most the model's context window (a longer prompt is refused, not billed),
//                        and no cap for a model whose context length was never given (promptCap)

type BoundModel = Pick<ModelRecord, 'context_length' | 'image_input_tokens'> & { context_length_set?: boolean };

const PROMPT_FIELDS = ['tool_choice', 'stop_sequences', 'thinking', 'output_config', 'output_format', 'context_management'] as const;

function bytes(value: unknown): number {
  if (value === undefined || value === null) return 0;
  if (typeof value === 'string') return Buffer.byteLength(value, 'utf8') + 2;
  return Buffer.byteLength(JSON.stringify(value), 'utf8');
}

function blockBound(b: Block, model: BoundModel): number {
  switch (b.type) {
    case 'text':
      return PER_MESSAGE + bytes(b.text);
    case 'image':
      return PER_MESSAGE + (model.image_input_tokens ?? unboundedPart(b, model));
    case 'tool_use':
      return PER_MESSAGE + bytes(b.id) + bytes(b.name) + bytes(b.input);
    case 'tool_result':
      return PER_MESSAGE + bytes(b.tool_use_id) + contentBound(b.content, model);
    case 'thinking':
      return PER_MESSAGE + bytes(b.thinking) + bytes(b.signature);
    case 'redacted_thinking':
      return PER_MESSAGE + bytes(b.data);
    case 'search_result':
      return PER_MESSAGE + bytes(b.source) + bytes(b.title) + contentBound(b.content, model);
    default: // documents and anything a vendor tokenizes its own way
      return unboundedPart(b, model);
  }
}

function contentBound(content: unknown, model: BoundModel): number {
  if (typeof content === 'string') return bytes(content);
  if (!Array.isArray(content)) return bytes(content);
  let n = 0;
  for (const b of content as Block[]) {
    n += blockBound(b, model);
    if (n >= promptCap(model)) return n;
  }
  return n;
}

export function anthropicInputBound(body: AnthropicBody, model: BoundModel): number {
  const cap = promptCap(model);
  let n = PER_REQUEST + contentBound(body.system, model);
  for (const m of body.messages) {
    n += PER_MESSAGE + contentBound(m.content, model);
    if (n >= cap) return cap;
  }
  for (const f of PROMPT_FIELDS) n += bytes(body[f]);
  const tools = body.tools ?? [];
  if (tools.length) {
    n += bytes(tools) + TOOLS_OVERHEAD + PER_TOOL * tools.length;
    for (const t of tools) if (t.type !== undefined && t.type !== 'custom') n += TOOLS_OVERHEAD;
  }
  return Math.min(n, cap);
}
