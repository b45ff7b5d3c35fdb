import type { Db } from '../db/pool.ts';
import type { ApiKeyRecord } from '../db/keys.ts';
import { keyUsageWindows } from '../db/keys.ts';
import { tenantTotals } from '../db/tenants.ts';
import type { ModelRecord } from '../db/models.ts';
import { brlNumber } from '../billing/money.ts';
import { CatracaError, errors } from '../errors.ts';

// GET /v1/credits, /v1/key and /v1/models in OpenRouter's shapes, amounts in BRL.

export async function creditsBody(db: Db, key: ApiKeyRecord) {
  const totals = await tenantTotals(db, key.tenant_id);
  if (!totals) throw errors.invalidKey();
  return {
    data: {
      total_credits: brlNumber(totals.credits),
      total_usage: brlNumber(totals.debits),
      balance: brlNumber(totals.balance),
      held: brlNumber(totals.held),
      available: brlNumber(totals.balance - totals.held),
      currency: 'BRL',
    },
  };
}

function intervalText(seconds: number): string {
  if (seconds % 3600 === 0) return `${seconds / 3600}h`;
  if (seconds % 60 === 0) return `${seconds / 60}m`;
  return `${seconds}s`;
}

export async function keyBody(db: Db, key: ApiKeyRecord) {
  // Fresh from the database: the cached record's counters may be a few seconds old.
  const { rows } = await db.query('select * from api_keys where id = $1', [key.id]);
  const k = rows[0] ?? key;
  const usage = await keyUsageWindows(db, key.id);
  const windowUsage = k.limit_reset === null ? usage.total : usage[k.limit_reset as 'daily' | 'weekly' | 'monthly'];
  const remaining = k.limit_micros === null ? null : k.limit_micros - windowUsage - k.held_micros;
  return {
    data: {
      label: k.label,
      key_hint: k.key_hint,
      limit: k.limit_micros === null ? null : brlNumber(k.limit_micros),
      limit_remaining: remaining === null ? null : brlNumber(remaining < 0n ? 0n : remaining),
      limit_reset: k.limit_reset,
      usage: brlNumber(usage.total),
      usage_daily: brlNumber(usage.daily),
      usage_weekly: brlNumber(usage.weekly),
      usage_monthly: brlNumber(usage.monthly),
      byok_usage: 0,
      byok_usage_daily: 0,
      byok_usage_weekly: 0,
      byok_usage_monthly: 0,
      is_free_tier: false,
      is_provisioning_key: false,
      rate_limit:
        k.rate_limit_requests !== null && k.rate_limit_interval_s !== null
          ? { requests: k.rate_limit_requests, interval: intervalText(k.rate_limit_interval_s) }
          : { requests: -1, interval: '10s' },
      expires_at: k.expires_at ? new Date(k.expires_at).toISOString() : null,
      created_at: new Date(k.created_at).toISOString(),
      allowed_models: k.models ?? '*',
      currency: 'BRL',
    },
  };
}

/** micro-BRL per 1M tokens → BRL per token as an exact decimal string (OpenRouter's pricing unit). */
export function pricePerToken(microsPerMillion: bigint): string {
  if (microsPerMillion === 0n) return '0';
  const s = microsPerMillion.toString().padStart(13, '0');
  const text = `${s.slice(0, -12)}.${s.slice(-12)}`.replace(/0+$/, '').replace(/\.$/, '');
  return text.replace(/^0+(?=\d)/, '');
}

export function modelsBody(models: ModelRecord[]) {
  return {
    data: models.map((m) => ({
      id: m.id,
      canonical_slug: m.id,
      name: m.name ?? m.id,
      created: Math.floor(new Date(m.created_at).getTime() / 1000),
      description: m.description ?? '',
      context_length: m.context_length,
      architecture: { modality: 'text->text', input_modalities: ['text'], output_modalities: ['text'], tokenizer: 'Other', instruct_type: null },
      pricing: { prompt: pricePerToken(m.input_price), completion: pricePerToken(m.output_price), request: '0', image: '0', currency: 'BRL' },
      pricing_per_million_tokens: {
        prompt: pricePerToken(m.input_price * 1_000_000n),
        completion: pricePerToken(m.output_price * 1_000_000n),
        currency: 'BRL',
      },
      top_provider: { context_length: m.context_length, max_completion_tokens: m.max_output_tokens, is_moderated: false },
      per_request_limits: null,
      supported_parameters: [
        'max_tokens',
        'max_completion_tokens',
        'temperature',
        'top_p',
        'stop',
        'stream',
        'stream_options',
        'seed',
        'presence_penalty',
        'frequency_penalty',
        'tools',
        'tool_choice',
        'response_format',
      ],
    })),
  };
}

/**
 * GET /v1/generation?id=… (OpenRouter's generation stats): what a request was billed, from the
 * ledger, for requests of the caller's tenant only. Not found until metering has settled it.
 */
export async function generationBody(db: Db, key: ApiKeyRecord, id: string) {
  if (!id) throw errors.badRequest("Missing query parameter 'id'.", 'id');
  const { rows } = await db.query(
    `select request_id, model, input_tokens, output_tokens, amount_micros, cost_micros, estimated, outcome, key_id, created_at
       from ledger where request_id = $1 and tenant_id = $2 and kind = 'debit'`,
    [id, key.tenant_id],
  );
  const g = rows[0];
  if (!g)
    throw new CatracaError(
      404,
      'not_found_error',
      'generation_not_found',
      `Generation "${id}" not found (it appears once metering has settled it, usually within milliseconds).`,
      'id',
    );
  return {
    data: {
      id: g.request_id,
      model: g.model,
      total_cost: brlNumber(g.amount_micros),
      usage: brlNumber(g.amount_micros),
      cost_before_shortfall: brlNumber(g.cost_micros ?? g.amount_micros),
      tokens_prompt: g.input_tokens,
      tokens_completion: g.output_tokens,
      native_tokens_prompt: g.input_tokens,
      native_tokens_completion: g.output_tokens,
      estimated: g.estimated,
      cancelled: g.outcome === 'cancelled',
      outcome: g.outcome,
      key_id: g.key_id,
      is_byok: false,
      created_at: new Date(g.created_at).toISOString(),
      currency: 'BRL',
    },
  };
}
