// OpenAI chat-completion wire objects, built as strings on the streaming hot path.

export interface UsageOut {
  prompt_tokens: number;
  completion_tokens: number;
  total_tokens: number;
  /** BRL, as OpenRouter reports `cost` */
  cost: number;
  estimated?: boolean;
}

export class ChunkEncoder {
  private head: string;
  private contentPrefix: string;
  private static contentSuffix = '},"logprobs":null,"finish_reason":null}]}\n\n';

  constructor(readonly id: string, readonly model: string, readonly created: number) {
    this.head = `data: {"id":${JSON.stringify(id)},"object":"chat.completion.chunk","created":${created},"model":${JSON.stringify(model)},"system_fingerprint":null,`;
    this.contentPrefix = `${this.head}"choices":[{"index":0,"delta":{"content":`;
  }

  role(): string {
    return `${this.head}"choices":[{"index":0,"delta":{"role":"assistant","content":""},"logprobs":null,"finish_reason":null}]}\n\n`;
  }

  content(text: string): string {
    return `${this.contentPrefix}${JSON.stringify(text)}${ChunkEncoder.contentSuffix}`;
  }

  finish(reason: string): string {
    return `${this.head}"choices":[{"index":0,"delta":{},"logprobs":null,"finish_reason":${JSON.stringify(reason)}}]}\n\n`;
  }

  usage(usage: UsageOut): string {
    return `${this.head}"choices":[],"usage":${JSON.stringify(usage)}}\n\n`;
  }

  /** Mid-stream failure, as OpenRouter sends it: an `error` object and finish_reason "error". */
  error(code: string, message: string, status: number): string {
    return `${this.head}"error":${JSON.stringify({ code, message, status })},"choices":[{"index":0,"delta":{"content":""},"logprobs":null,"finish_reason":"error"}]}\n\n`;
  }

  static readonly done = 'data: [DONE]\n\n';
  static readonly keepalive = ': processing\n\n';
}

export function completionBody(id: string, model: string, created: number, content: string, finishReason: string, usage: UsageOut) {
  return {
    id,
    object: 'chat.completion',
    created,
    model,
    system_fingerprint: null,
    choices: [{ index: 0, message: { role: 'assistant', content, refusal: null }, logprobs: null, finish_reason: finishReason }],
    usage,
  };
}
