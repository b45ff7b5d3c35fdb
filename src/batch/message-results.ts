// The results file of an Anthropic message batch (GET /v1/messages/batches/{id}/results, and the
// portal's download of it): one JSONL line a request, in the order given, from its batch_results
// rows. Pure: it imports nothing, so the portal can build the same bytes the API answers.

/** A batch_results row, as far as its result line needs it. */
export interface MessageResultRow {
  custom_id: string;
  body: unknown;
  error: { code: string; message: string } | null;
  ok: boolean | null;
}

/** An answer or error of a request as Anthropic's error object. */
function anthropicError(r: MessageResultRow): { type: 'error'; error: { type: string; message: string } } {
  const body = r.body as { type?: string; error?: { type?: string; message?: string } } | null;
  if (body?.type === 'error' && body.error) return { type: 'error', error: { type: body.error.type ?? 'api_error', message: body.error.message ?? '' } };
  if (body?.error) return { type: 'error', error: { type: body.error.type ?? 'api_error', message: body.error.message ?? '' } };
  return { type: 'error', error: { type: 'api_error', message: r.error?.message ?? 'The request failed.' } };
}

/** One line of the results: `succeeded`, `canceled`, `expired` or `errored`. */
export function messageResultLine(r: MessageResultRow): string {
  const code = r.error?.code;
  const result = r.ok
    ? { type: 'succeeded', message: r.body }
    : code === 'batch_cancelled'
      ? { type: 'canceled' }
      : code === 'batch_expired'
        ? { type: 'expired' }
        : { type: 'errored', error: anthropicError(r) };
  return JSON.stringify({ custom_id: r.custom_id, result });
}

/** The whole file, rows in line order (empty when there are none). */
export function messageResultsFile(rows: MessageResultRow[]): Buffer {
  const lines = rows.map(messageResultLine);
  return Buffer.from(lines.length ? `${lines.join('\n')}\n` : '');
}
