import type { Db } from '../db/pool.ts';
import type { ApiKeyRecord } from '../db/keys.ts';
import { keyUsageWindows } from '../db/keys.ts';
import { tenantTotals } from '../db/tenants.ts';
import type { ModelRecord } from '../db/models.ts';
import { brlNumber } from '../billing/money.ts';
import { CatracaError, errors } from '../errors.ts';
import { TENANT_TIME_ZONE } from '../billing/tenant-days.ts';

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
      // catraca has no bring-your-own-key usage: every amount above is the tenant's own balance
      byok_usage: 0,
      byok_usage_daily: 0,
      byok_usage_weekly: 0,
      byok_usage_monthly: 0,
      include_byok_in_limit: false,
      is_free_tier: false,
      is_management_key: false,
      is_provisioning_key: false,
      // who created the key: a portal user, or the tenant itself for keys made by an operator's CLI
      creator_user_id: k.created_by ?? k.tenant_id,
      // fields @openrouter/sdk's GetCurrentKeyData requires: no region restriction, no free models, the tenant as organisation
      allowed_data_regions: ['global'],
      free_model_daily_requests: { limit: 0, remaining: 0, used: 0 },
      organization_id: k.tenant_id,
      workspace_id: null,
      rate_limit:
        k.rate_limit_requests !== null && k.rate_limit_interval_s !== null
          ? {
              requests: k.rate_limit_requests,
              interval: intervalText(k.rate_limit_interval_s),
              note: 'Requests per interval, counted across every front door.',
            }
          : { requests: -1, interval: '10s', note: 'This key has no request rate limit.' },
      expires_at: k.expires_at ? new Date(k.expires_at).toISOString() : null,
      created_at: new Date(k.created_at).toISOString(),
      allowed_models: k.models ?? '*',
      max_concurrent: k.max_concurrent ?? null,
      tpm: k.tpm ?? null,
      end_user_limit: k.end_user_daily_limit === null || k.end_user_daily_limit === undefined ? null : brlNumber(k.end_user_daily_limit),
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

/** The routes that serve a model of this kind. */
export function endpointsOf(m: Pick<ModelRecord, 'kind'>): string[] {
  return m.kind === 'embedding' ? ['/v1/embeddings'] : ['/v1/chat/completions', '/v1/messages', '/v1/responses', '/v1/completions'];
}

const CHAT_PARAMETERS = [
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
];

function modelEntry(m: ModelRecord, id = m.id) {
  return {
    id,
    canonical_slug: m.id,
    name: m.name ?? m.id,
    created: Math.floor(new Date(m.created_at).getTime() / 1000),
    description: m.description ?? '',
    context_length: m.context_length,
    architecture: {
      modality: m.kind === 'embedding' ? 'text->embeddings' : 'text->text',
      input_modalities: m.input_modalities,
      output_modalities: [m.kind === 'embedding' ? 'embeddings' : 'text'],
      tokenizer: 'Other',
      instruct_type: null,
    },
    pricing: {
      prompt: pricePerToken(m.input_price),
      completion: pricePerToken(m.output_price),
      request: '0',
      image: '0',
      input_cache_read: pricePerToken(m.cached_input_price ?? m.input_price),
      input_cache_write: pricePerToken(m.cache_write_price ?? m.input_price),
      internal_reasoning: pricePerToken(m.output_price),
      currency: 'BRL',
    },
    pricing_per_million_tokens: {
      prompt: pricePerToken(m.input_price * 1_000_000n),
      completion: pricePerToken(m.output_price * 1_000_000n),
      currency: 'BRL',
    },
    top_provider: { context_length: m.context_length, max_completion_tokens: m.max_output_tokens, is_moderated: false },
    per_request_limits: null,
    supported_parameters: m.kind === 'embedding' ? ['encoding_format', 'dimensions', 'user'] : CHAT_PARAMETERS,
    kind: m.kind,
    endpoints: endpointsOf(m),
  };
}

/** The catalog in OpenRouter's shape; each alias is listed too, as an entry of its own naming its model (`alias_of`). */
export function modelsBody(models: ModelRecord[], aliases: Map<string, string> = new Map()) {
  const byId = new Map(models.map((m) => [m.id, m]));
  const data: Array<ReturnType<typeof modelEntry> & { alias_of?: string }> = models.map((m) => modelEntry(m));
  for (const [alias, target] of aliases) {
    const m = byId.get(target);
    if (m) data.push({ ...modelEntry(m, alias), alias_of: m.id });
  }
  return { data };
}

/**
 * GET /v1/generation?id=… (OpenRouter's generation stats): what a request was billed, from the
 * ledger, for requests of the caller's tenant only. Not found until metering has settled it.
 */
export async function generationBody(db: Db, key: ApiKeyRecord, id: string) {
  if (!id) throw errors.badRequest("Missing query parameter 'id'.", 'id');
  const { rows } = await db.query(
    `select request_id, model, input_tokens, output_tokens, amount_micros, cost_micros, estimated, outcome, key_id, created_at,
            cached_tokens, cache_write_tokens, cache_write_1h_tokens, reasoning_tokens, route, end_user,
            deployment, region, country, batch_id
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
      native_tokens_cached: g.cached_tokens ?? 0,
      native_tokens_cache_write: (g.cache_write_tokens ?? 0) + (g.cache_write_1h_tokens ?? 0),
      native_tokens_reasoning: g.reasoning_tokens ?? 0,
      api_type: g.route ?? 'chat',
      user: g.end_user ?? null,
      // where it ran (catraca's own): the deployment that answered, and the region and country it declared
      deployment: g.deployment ?? null,
      region: g.region ?? null,
      country: g.country ?? null,
      // a line of a batch (docs/batch.md): billed at the batch prices
      batch: g.batch_id !== null,
      batch_id: g.batch_id ?? null,
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

const DAY = /^\d{4}-\d{2}-\d{2}$/;

/**
 * GET /v1/activity (OpenRouter's activity shape): the tenant's usage by day and model over the
 * last 30 days, days in São Paulo time (the tenant's), amounts in BRL. `date=YYYY-MM-DD` keeps one
 * day. Any key of the tenant may read it. Usage is what requests were debited (source 'request'):
 * a Pix refund or an operator's adjustment, debits too, is no usage. `batch_usage`/`batch_requests`:
 * the part of each row that were batch lines.
 */
export async function activityBody(db: Db, key: ApiKeyRecord, date: string | null) {
  if (date !== null && (!DAY.test(date) || Number.isNaN(Date.parse(`${date}T00:00:00Z`)))) {
    throw errors.badRequest("Invalid value for 'date': a day in the last 30 days, YYYY-MM-DD.", 'date');
  }
  const { rows } = await db.query(
    `select to_char((created_at at time zone $2)::date, 'YYYY-MM-DD') as day, model,
            count(*)::int as requests, sum(amount_micros)::bigint as amount,
            sum(input_tokens)::bigint as prompt, sum(output_tokens)::bigint as completion,
            coalesce(sum(reasoning_tokens), 0)::bigint as reasoning,
            count(batch_id)::int as batch_requests, coalesce(sum(amount_micros) filter (where batch_id is not null), 0)::bigint as batch_amount
       from ledger
      where tenant_id = $1 and kind = 'debit' and source = 'request'
        and created_at >= ((now() at time zone $2)::date - 29) at time zone $2
        and ($3::date is null or (created_at at time zone $2)::date = $3::date)
      group by 1, 2 order by 1 desc, 2`,
    [key.tenant_id, TENANT_TIME_ZONE, date],
  );
  return {
    data: rows.map((r) => ({
      date: r.day as string,
      model: r.model as string,
      model_permaslug: r.model as string,
      endpoint_id: r.model as string,
      provider_name: 'catraca',
      usage: brlNumber(BigInt(r.amount)),
      byok_usage_inference: 0,
      requests: r.requests as number,
      prompt_tokens: Number(r.prompt),
      completion_tokens: Number(r.completion),
      reasoning_tokens: Number(r.reasoning),
      // catraca's own: the part of `usage` and `requests` that were lines of batches (docs/batch.md)
      batch_usage: brlNumber(BigInt(r.batch_amount)),
      batch_requests: r.batch_requests as number,
    })),
    currency: 'BRL',
    time_zone: TENANT_TIME_ZONE,
  };
}
