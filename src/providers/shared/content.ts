// The text of a chat message's content, for token counting (the sim's and the tiktoken estimate):
// a string as is; an array of content parts → the `text` of its text parts joined with "\n";
// anything else (null, tool-call-only messages) → "".
export function contentText(content: unknown): string {
  if (typeof content === 'string') return content;
  if (Array.isArray(content)) {
    return content
      .filter((p): p is { type: 'text'; text: string } => !!p && typeof p === 'object' && p.type === 'text' && typeof p.text === 'string')
      .map((p) => p.text)
      .join('\n');
  }
  return '';
}
