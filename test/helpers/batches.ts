import type OpenAI from 'openai';

/** Polls a batch (the `openai` SDK) until it has ended: completed, cancelled, failed or expired. */
export async function batchEnded(client: OpenAI, id: string, timeoutMs = 30_000) {
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    const b = await client.batches.retrieve(id);
    if (['completed', 'cancelled', 'failed', 'expired'].includes(b.status)) return b;
    if (Date.now() > deadline) throw new Error(`batch ${id} still ${b.status}`);
    await new Promise((r) => setTimeout(r, 100));
  }
}

/** A batch's output or error file, one parsed JSON object a line (none when the file is null). */
export async function fileLines<T>(client: OpenAI, fileId: string | null | undefined): Promise<T[]> {
  if (!fileId) return [];
  const text = await (await client.files.content(fileId)).text();
  return text
    .split('\n')
    .filter(Boolean)
    .map((l) => JSON.parse(l) as T);
}
