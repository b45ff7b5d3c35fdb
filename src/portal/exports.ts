import { formatBrl } from '../billing/money.ts';
import { safeText } from '../web/csv.ts';
import { type CsvQuery, count } from './csv.ts';
import { type Period, periodFilter, saoPauloDay, TENANT_TIME_ZONE } from './period.ts';

// The two CSV files of a period (São Paulo days): the statement, every ledger entry, and usage by
// day × model × deployment × key × end user; a request's row says where it ran (the deployment
// that answered, and the region and country it declares, blank where it declares none). Amounts are exact BRL decimals with 6 places, from the integer
// micro-reais (never a float); a text cell anyone could have typed goes through safeText.

export type ExportName = 'statement' | 'usage';

export const STATEMENT_COLUMNS = [
  'entry_id',
  'time_sao_paulo',
  'time_utc',
  'kind',
  'source',
  'request_id',
  'external_id',
  'model',
  'deployment',
  'region',
  'country',
  'key_id',
  'key_label',
  'end_user',
  'api',
  'batch_id',
  'input_tokens',
  'output_tokens',
  'cached_tokens',
  'cache_write_tokens',
  'cache_write_1h_tokens',
  'reasoning_tokens',
  'amount_brl',
  'balance_after_brl',
  'estimated',
  'outcome',
  'note',
] as const;

interface StatementRow {
  id: bigint;
  time_local: string;
  time_utc: string;
  kind: 'credit' | 'debit';
  source: string;
  request_id: string | null;
  external_id: string | null;
  model: string | null;
  deployment: string | null;
  region: string | null;
  country: string | null;
  key_id: string | null;
  key_label: string | null;
  end_user: string | null;
  route: string | null;
  batch_id: string | null;
  input_tokens: number | null;
  output_tokens: number | null;
  cached_tokens: number | null;
  cache_write_tokens: number | null;
  cache_write_1h_tokens: number | null;
  reasoning_tokens: number | null;
  amount_micros: bigint;
  balance_after_micros: bigint;
  estimated: boolean;
  outcome: string | null;
  note: string | null;
}

const ARGS = (tenantId: string, p: Period) => [tenantId, TENANT_TIME_ZONE, p.from, p.to];

/** Every ledger entry of the period, oldest first; amounts signed (a credit adds, a debit takes away). */
export function statementQuery(tenantId: string, p: Period): CsvQuery<StatementRow> {
  return {
    sql: `/* catraca export: statement */
      select l.id, to_char(l.created_at at time zone $2, 'YYYY-MM-DD HH24:MI:SS') as time_local,
             to_char(l.created_at at time zone 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.US"Z"') as time_utc,
             l.kind, l.source, l.request_id, l.external_id, l.model, l.deployment, l.region, l.country, l.key_id, k.label as key_label, l.end_user, l.route, l.batch_id,
             l.input_tokens, l.output_tokens, l.cached_tokens, l.cache_write_tokens, l.cache_write_1h_tokens, l.reasoning_tokens,
             l.amount_micros, l.balance_after_micros, l.estimated, l.outcome, l.note
        from ledger l left join api_keys k on k.id = l.key_id and k.tenant_id = l.tenant_id
       where l.tenant_id = $1 and ${periodFilter('l', 2, 3, 4)}
       order by l.created_at, l.id`,
    params: ARGS(tenantId, p),
    header: STATEMENT_COLUMNS,
    record: (r) => [
      String(r.id),
      r.time_local,
      r.time_utc,
      r.kind,
      safeText(r.source),
      safeText(r.request_id),
      safeText(r.external_id),
      safeText(r.model),
      safeText(r.deployment),
      safeText(r.region),
      safeText(r.country),
      safeText(r.key_id),
      safeText(r.key_label),
      safeText(r.end_user),
      safeText(r.route),
      safeText(r.batch_id),
      count(r.input_tokens),
      count(r.output_tokens),
      count(r.cached_tokens),
      count(r.cache_write_tokens),
      count(r.cache_write_1h_tokens),
      count(r.reasoning_tokens),
      formatBrl(r.kind === 'credit' ? r.amount_micros : -r.amount_micros),
      formatBrl(r.balance_after_micros),
      r.source === 'request' ? String(r.estimated) : '',
      safeText(r.outcome),
      safeText(r.note),
    ],
  };
}

export const USAGE_COLUMNS = [
  'date',
  'model',
  'deployment',
  'region',
  'country',
  'key_id',
  'key_label',
  'end_user',
  'requests',
  'input_tokens',
  'output_tokens',
  'cached_tokens',
  'cache_write_tokens',
  'cache_write_1h_tokens',
  'reasoning_tokens',
  'batch_requests',
  'batch_amount_brl',
  'amount_brl',
] as const;

interface UsageRow {
  day: string;
  model: string | null;
  deployment: string | null;
  region: string | null;
  country: string | null;
  key_id: string | null;
  key_label: string | null;
  end_user: string | null;
  requests: bigint;
  input_tokens: bigint;
  output_tokens: bigint;
  cached_tokens: bigint;
  cache_write_tokens: bigint;
  cache_write_1h_tokens: bigint;
  reasoning_tokens: bigint;
  batch_requests: bigint;
  batch_micros: bigint;
  micros: bigint;
}

/** What requests cost (debits of source 'request'), summed by São Paulo day, model, deployment (and its place), key and end user. */
export function usageQuery(tenantId: string, p: Period): CsvQuery<UsageRow> {
  return {
    sql: `/* catraca export: usage */
      select to_char(u.day, 'YYYY-MM-DD') as day, u.model, u.deployment, u.region, u.country, u.key_id, k.label as key_label, u.end_user, u.requests,
             u.input_tokens, u.output_tokens, u.cached_tokens, u.cache_write_tokens, u.cache_write_1h_tokens, u.reasoning_tokens, u.batch_requests, u.batch_micros, u.micros
        from (select ${saoPauloDay('l', 2)} as day, l.model, l.deployment, l.region, l.country, l.key_id, l.end_user, count(*)::bigint as requests,
                     coalesce(sum(l.input_tokens), 0)::bigint as input_tokens, coalesce(sum(l.output_tokens), 0)::bigint as output_tokens,
                     coalesce(sum(l.cached_tokens), 0)::bigint as cached_tokens, coalesce(sum(l.cache_write_tokens), 0)::bigint as cache_write_tokens,
                     coalesce(sum(l.cache_write_1h_tokens), 0)::bigint as cache_write_1h_tokens,
                     coalesce(sum(l.reasoning_tokens), 0)::bigint as reasoning_tokens, count(l.batch_id)::bigint as batch_requests,
                     coalesce(sum(l.amount_micros) filter (where l.batch_id is not null), 0)::bigint as batch_micros, sum(l.amount_micros)::bigint as micros
                from ledger l
               where l.tenant_id = $1 and l.kind = 'debit' and l.source = 'request' and ${periodFilter('l', 2, 3, 4)}
               group by 1, 2, 3, 4, 5, 6, 7) u
        left join api_keys k on k.id = u.key_id and k.tenant_id = $1
       order by u.day, u.model, u.deployment nulls first, u.region nulls first, u.country nulls first, u.key_id nulls first,
                u.end_user nulls first`,
    params: ARGS(tenantId, p),
    header: USAGE_COLUMNS,
    record: (r) => [
      r.day,
      safeText(r.model),
      safeText(r.deployment),
      safeText(r.region),
      safeText(r.country),
      safeText(r.key_id),
      safeText(r.key_label),
      safeText(r.end_user),
      count(r.requests),
      count(r.input_tokens),
      count(r.output_tokens),
      count(r.cached_tokens),
      count(r.cache_write_tokens),
      count(r.cache_write_1h_tokens),
      count(r.reasoning_tokens),
      count(r.batch_requests),
      formatBrl(r.batch_micros),
      formatBrl(r.micros),
    ],
  };
}

export const exportQuery = (name: ExportName, tenantId: string, p: Period): CsvQuery<unknown> =>
  name === 'statement' ? statementQuery(tenantId, p) : usageQuery(tenantId, p);

/** The download's file name: catraca-statement_2025-01-01_2025-01-31.csv */
export const exportFileName = (name: ExportName, p: Period) => `catraca-${name}_${p.from}_${p.to}.csv`;
