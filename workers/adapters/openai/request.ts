import type { Job } from '../../../src/bus/messages.ts';

// Request transform: the client's body passes through (unknown parameters preserved) with
//   model          = the catalog entry's upstream_model
//   stream         = true, stream_options.include_usage = true (usage is the source of truth)
//   max_tokens     = job.max_tokens (the cap the hold paid for). If the client used the newer
//                    max_completion_tokens (required by OpenAI's reasoning models), that name is
//                    kept with the capped value and max_tokens is dropped: never both.
//   our extensions (`sim`) are removed.
export const EXTENSION_FIELDS = ['sim'] as const;

export function buildUpstreamBody(job: Job): Record<string, unknown> {
  const body: Record<string, unknown> = { ...job.body };
  for (const f of EXTENSION_FIELDS) delete body[f];
  body.model = job.model.upstream_model;
  body.stream = true;
  const so = body.stream_options && typeof body.stream_options === 'object' ? (body.stream_options as Record<string, unknown>) : {};
  body.stream_options = { ...so, include_usage: true };
  if (body.max_completion_tokens !== undefined && body.max_completion_tokens !== null) {
    body.max_completion_tokens = job.max_tokens;
    delete body.max_tokens;
  } else {
    delete body.max_completion_tokens;
    body.max_tokens = job.max_tokens;
  }
  return body;
}
