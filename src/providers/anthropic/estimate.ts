import { estimateTokens } from '../shared/estimate.ts';
import type { UpstreamCall } from '../types.ts';

// What an Anthropic vendor most likely billed for a Messages job's prompt when it reported nothing
// (the call was cut before message_start): OpenAI's tokenizer over every text the prompt renders
// (system, text blocks, tool inputs and results, thinking, the tools' JSON), 3 tokens a message,
// each image at the catalog's per-image bound; at most the context window.

type Block = { type?: unknown; text?: unknown; input?: unknown; content?: unknown; thinking?: unknown };

function blockText(b: Block, images: { n: number }): string {
  switch (b?.type) {
    case 'text':
      return typeof b.text === 'string' ? b.text : '';
    case 'tool_use':
      return JSON.stringify(b.input ?? {});
    case 'tool_result':
      return contentText(b.content, images);
    case 'thinking':
      return typeof b.thinking === 'string' ? b.thinking : '';
    case 'image':
      images.n++;
      return '';
    default:
      return '';
  }
}

function contentText(content: unknown, images: { n: number }): string {
  if (typeof content === 'string') return content;
  if (!Array.isArray(content)) return '';
  return (content as Block[]).map((b) => blockText(b, images)).join('\n');
}

export async function estimateMessagesPrompt(call: UpstreamCall): Promise<number> {
  const body = call.job.body as { system?: unknown; messages?: unknown; tools?: unknown };
  const images = { n: 0 };
  const messages = Array.isArray(body.messages) ? (body.messages as Array<{ content?: unknown }>) : [];
  let text = contentText(body.system, images);
  for (const m of messages) text += `\n${contentText(m?.content, images)}`;
  if (body.tools != null) text += JSON.stringify(body.tools);
  const n = 3 + 3 * messages.length + (await estimateTokens(text)) + images.n * (call.model.image_input_tokens ?? 0);
  return Math.min(n, call.model.context_length);
}
