import type { JobApi } from '../bus/messages.ts';
import type { ModelRecord } from '../db/models.ts';

// Which job APIs a model's vendor adapter takes natively (src/providers/<protocol>/). The front
// door sends a request in its own API where the model's adapter speaks it, and translates it into
// chat completions (the API every adapter speaks) where it does not.
const NATIVE: Record<ModelRecord['protocol'], readonly JobApi[]> = {
  sim: ['chat', 'embeddings'],
  openai: ['chat', 'embeddings'],
  anthropic: ['chat', 'messages', 'count_tokens'],
  azure: ['chat'],
  bedrock: ['chat'],
  gemini: ['chat'],
};

export function speaksNatively(model: Pick<ModelRecord, 'protocol' | 'legacy_completions'>, api: JobApi): boolean {
  if (api === 'completions') return model.protocol === 'openai' && model.legacy_completions;
  return NATIVE[model.protocol].includes(api);
}
