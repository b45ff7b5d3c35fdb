// SSE body parsing for the k6 script (plain JS, no k6 imports, so vitest can test it too).

/** Splits an SSE body into data events: content chunks, [DONE], error events. */
export function parseStream(text) {
  const out = { content: 0, done: false, error: false };
  const events = text.split(/\r\n\r\n|\n\n|\r\r/);
  for (const ev of events) {
    const data = ev
      .split(/\r\n|\n|\r/)
      .filter((l) => l.startsWith('data:'))
      .map((l) => l.slice(5).replace(/^ /, ''))
      .join('\n');
    if (!data) continue;
    if (data === '[DONE]') {
      out.done = true;
      continue;
    }
    try {
      const j = JSON.parse(data);
      if (j.error) out.error = true;
      const c = j.choices && j.choices[0] && j.choices[0].delta && j.choices[0].delta.content;
      if (typeof c === 'string' && c.length > 0) out.content++;
    } catch (e) {
      out.error = true;
    }
  }
  return out;
}
