// The admin commands. Each returns after printing exactly one result (one JSON object with --json).
import { connect as natsConnect } from 'nats';
import { credit } from '../billing/ledger.ts';
import { encode } from '../bus/messages.ts';
import { natsOptions } from '../bus/connect.ts';
import { subjects } from '../bus/subjects.ts';
import { formatRateLimit } from '../auth/key-options.ts';
import { createApiKey, getKey, listKeys, revokeKey, type ApiKeyRecord, type LimitReset } from '../db/keys.ts';
import {
  defaultProtocol,
  getModel,
  listModels,
  MODALITIES,
  MODEL_ID_RE,
  PROTOCOLS,
  upsertModel,
  type Modality,
  type ModelRecord,
  type Protocol,
} from '../db/models.ts';
import { createPool, type Db } from '../db/pool.ts';
import { createTenant, getTenant } from '../db/tenants.ts';
import { brlFlag, brlString, expiryFlag, intFlag, parseFlags, parseRateLimit, str } from './args.ts';
import { CliError, UsageError, type CliContext } from './context.ts';
import { ledgerCheck } from './ledger-check.ts';

async function withDb<T>(ctx: CliContext, fn: (db: Db) => Promise<T>): Promise<T> {
  const db = createPool(ctx.databaseUrl(), 1);
  try {
    return await fn(db);
  } catch (err) {
    const e = err as { code?: string; message: string };
    if (e.code === 'ECONNREFUSED') throw new CliError(`cannot reach PostgreSQL (${e.message}); is the stack running?`);
    if (e.code === '42P01') throw new CliError('the database has no catraca schema yet; run the stack once (npm start) or the migrations');
    throw err;
  } finally {
    await db.end().catch(() => {});
  }
}

async function requireTenant(db: Db, id: string) {
  const tenant = await getTenant(db, id);
  if (!tenant) throw new CliError(`no tenant with id ${JSON.stringify(id)}`);
  return tenant;
}

// ----------------------------------------------------------------------------------- tenant

export async function tenantCreate(ctx: CliContext, args: string[]): Promise<void> {
  const flags = parseFlags(args, { values: ['name'], required: ['name'] }, 'tenant create');
  const name = str(flags, 'name')!.trim();
  if (!name || name.length > 200) throw new UsageError('tenant create: --name must be 1 to 200 characters');
  const tenant = await withDb(ctx, (db) => createTenant(db, name));
  ctx.out({ id: tenant.id, name: tenant.name }, `created tenant ${tenant.id} (${tenant.name})`);
}

export async function tenantList(ctx: CliContext, args: string[]): Promise<void> {
  parseFlags(args, { values: [] }, 'tenant list');
  const rows = await withDb(
    ctx,
    async (db) =>
      (
        await db.query(
          `select t.id, t.name, t.balance_micros, t.held_micros, t.created_at,
                (select count(*) from api_keys k where k.tenant_id = t.id and k.revoked_at is null)::int as active_keys
           from tenants t order by t.created_at, t.id`,
        )
      ).rows,
  );
  const tenants = rows.map((t) => ({
    id: t.id as string,
    name: t.name as string,
    balance: brlString(t.balance_micros),
    held: brlString(t.held_micros),
    active_keys: t.active_keys as number,
    created_at: (t.created_at as Date).toISOString(),
  }));
  ctx.out(
    { tenants },
    table(
      ['ID', 'NAME', 'BALANCE', 'HELD', 'KEYS', 'CREATED'],
      tenants.map((t) => [t.id, t.name, t.balance, t.held, String(t.active_keys), t.created_at.slice(0, 19) + 'Z']),
      [2, 3, 4],
      '(no tenants)',
    ),
  );
}

/** A plain text table: columns padded to their widest cell; `numeric` columns right-aligned. */
function table(head: string[], rows: string[][], numeric: number[], empty: string): string {
  if (!rows.length) return empty;
  const all = [head, ...rows];
  const w = head.map((_, i) => Math.max(...all.map((r) => r[i].length)));
  return all
    .map((r) =>
      r
        .map((c, i) => (numeric.includes(i) ? c.padStart(w[i]) : c.padEnd(w[i])))
        .join('  ')
        .trimEnd(),
    )
    .join('\n');
}

// -------------------------------------------------------------------------------------- key

export async function keyCreate(ctx: CliContext, args: string[]): Promise<void> {
  const cmd = 'key create';
  const flags = parseFlags(args, { values: ['tenant', 'label', 'models', 'limit', 'limit-reset', 'rate-limit', 'expires'], required: ['tenant'] }, cmd);
  const tenantId = str(flags, 'tenant')!;
  const label = str(flags, 'label') ?? '';
  if (label.length > 200) throw new UsageError(`${cmd}: --label is longer than 200 characters`);

  const modelsText = (str(flags, 'models') ?? '*').trim();
  let models: string[] | null = null;
  if (modelsText !== '*') {
    models = [
      ...new Set(
        modelsText
          .split(',')
          .map((m) => m.trim())
          .filter(Boolean),
      ),
    ];
    if (!models.length) throw new UsageError(`${cmd}: --models must be '*' or a comma-separated list like vendor/a,vendor/b`);
    const bad = models.filter((m) => !MODEL_ID_RE.test(m));
    if (bad.length) throw new UsageError(`${cmd}: not model ids (vendor/name): ${bad.join(', ')}`);
  }

  const limitMicros = brlFlag(flags, 'limit', cmd) ?? null;
  const resetText = str(flags, 'limit-reset');
  if (resetText !== undefined && !['daily', 'weekly', 'monthly'].includes(resetText)) {
    throw new UsageError(`${cmd}: --limit-reset must be daily, weekly or monthly`);
  }
  if (resetText !== undefined && limitMicros === null) throw new UsageError(`${cmd}: --limit-reset needs --limit`);

  let rate: { requests: number; intervalS: number } | null = null;
  const rateText = str(flags, 'rate-limit');
  if (rateText !== undefined) {
    rate = parseRateLimit(rateText);
    if (!rate) throw new UsageError(`${cmd}: --rate-limit must look like 60/60s, 100/1m, 1000/1h (requests/interval)`);
  }

  const expiresAt = expiryFlag(flags, 'expires', cmd) ?? null;

  const result = await withDb(ctx, async (db) => {
    await requireTenant(db, tenantId);
    if (models) {
      const { rows } = await db.query('select id from models where id = any($1)', [models]);
      const known = new Set(rows.map((r) => r.id));
      const unknown = models.filter((m) => !known.has(m));
      if (unknown.length) throw new CliError(`${cmd}: unknown model(s): ${unknown.join(', ')} (see the catalog; add with catraca model set)`);
    }
    return createApiKey(db, {
      tenantId,
      label,
      models,
      limitMicros,
      limitReset: (resetText as LimitReset | undefined) ?? null,
      rateLimitRequests: rate?.requests ?? null,
      rateLimitIntervalS: rate?.intervalS ?? null,
      expiresAt,
    });
  });
  const { record, key } = result;
  const expires = record.expires_at ? new Date(record.expires_at).toISOString() : null;
  ctx.out(
    { id: record.id, key, label: record.label, models: record.models ?? '*', expires_at: expires },
    [
      `created key ${record.id}${record.label ? ` (${record.label})` : ''} for tenant ${tenantId}`,
      `  models:  ${record.models ? record.models.join(', ') : '*'}`,
      ...(expires ? [`  expires: ${expires}`] : []),
      `  key:     ${key}`,
      '  This is the only time the key is shown; only its hash is stored.',
    ].join('\n'),
  );
}

/** What `key list` shows of a key: never its value or hash, only the hint (its last characters). */
export function keyView(k: ApiKeyRecord, now = Date.now()) {
  const expiresAt = k.expires_at ? new Date(k.expires_at) : null;
  return {
    id: k.id,
    label: k.label,
    hint: k.key_hint,
    models: k.models ?? '*',
    limit: k.limit_micros === null ? null : brlString(k.limit_micros),
    limit_reset: k.limit_reset,
    rate_limit: k.rate_limit_requests !== null && k.rate_limit_interval_s !== null ? formatRateLimit(k.rate_limit_requests, k.rate_limit_interval_s) : null,
    expires_at: expiresAt ? expiresAt.toISOString() : null,
    expired: expiresAt !== null && expiresAt.getTime() <= now,
    revoked: k.revoked_at !== null,
    revoked_at: k.revoked_at ? new Date(k.revoked_at).toISOString() : null,
    usage: brlString(k.usage_micros),
    created_at: new Date(k.created_at).toISOString(),
    last_used_at: k.last_used_at ? new Date(k.last_used_at).toISOString() : null,
  };
}

export async function keyList(ctx: CliContext, args: string[]): Promise<void> {
  const flags = parseFlags(args, { values: ['tenant'], required: ['tenant'] }, 'key list');
  const tenantId = str(flags, 'tenant')!;
  const records = await withDb(ctx, async (db) => {
    await requireTenant(db, tenantId);
    return listKeys(db, tenantId);
  });
  const keys = records.map((k) => keyView(k));
  ctx.out(
    { tenant: tenantId, keys },
    table(
      ['ID', 'LABEL', 'HINT', 'MODELS', 'LIMIT', 'RATE', 'EXPIRES', 'STATUS'],
      keys.map((k) => [
        k.id,
        k.label,
        k.hint,
        Array.isArray(k.models) ? k.models.join(',') : k.models,
        k.limit === null ? '-' : `${k.limit}${k.limit_reset ? `/${k.limit_reset}` : ''}`,
        k.rate_limit ?? '-',
        k.expires_at ? k.expires_at.slice(0, 19) + 'Z' : '-',
        k.revoked ? 'revoked' : k.expired ? 'expired' : 'active',
      ]),
      [],
      `(no keys for tenant ${tenantId})`,
    ),
  );
}

export async function keyRevoke(ctx: CliContext, args: string[]): Promise<void> {
  const flags = parseFlags(args, { values: ['id'], required: ['id'] }, 'key revoke');
  const id = str(flags, 'id')!;
  await withDb(ctx, async (db) => {
    if (!(await getKey(db, id))) throw new CliError(`no key with id ${JSON.stringify(id)}`);
    await revokeKey(db, id);
  });
  // Broadcast so every front door drops its cached record now. The database row is what counts
  // (admission re-checks it), so a failed broadcast is a warning, not a failure.
  await broadcast(
    ctx,
    subjects.keyInvalidated,
    { key_id: id },
    'revoked in the database',
    'front doors drop the key when their cache expires (KEY_CACHE_TTL_MS)',
  );
  ctx.out({ id, revoked: true }, `revoked key ${id}`);
}

/** Publishes one notice on NATS; without NATS (or when it fails) says what the notice would have done. */
async function broadcast(ctx: CliContext, subject: string, body: unknown, done: string, fallback: string): Promise<void> {
  const natsUrl = ctx.natsUrl();
  if (!natsUrl) {
    ctx.warn(`${done}; NATS_URL is not set and no stack is running, so nothing was notified: ${fallback}`);
    return;
  }
  try {
    const nc = await natsConnect({ ...natsOptions(natsUrl), timeout: 3000, reconnect: false, name: 'catraca-cli' });
    try {
      nc.publish(subject, encode(body));
      await nc.flush();
    } finally {
      await nc.close();
    }
  } catch (err) {
    ctx.warn(`${done}, but the NATS broadcast failed (${(err as Error).message}): ${fallback}`);
  }
}

// ---------------------------------------------------------------------------------- credits

export async function creditsGrant(ctx: CliContext, args: string[]): Promise<void> {
  const cmd = 'credits grant';
  const flags = parseFlags(args, { values: ['tenant', 'amount', 'note', 'external-id'], required: ['tenant', 'amount'] }, cmd);
  const amount = brlFlag(flags, 'amount', cmd)!;
  if (amount <= 0n) throw new UsageError(`${cmd}: --amount must be greater than zero`);
  const tenantId = str(flags, 'tenant')!;
  const externalId = str(flags, 'external-id');
  const res = await withDb(ctx, async (db) => {
    await requireTenant(db, tenantId);
    return credit(db, { tenantId, amountMicros: amount, source: 'grant', externalId: externalId ?? null, note: str(flags, 'note') ?? null });
  });
  if (res.status === 'unknown_tenant') throw new CliError(`no tenant with id ${JSON.stringify(tenantId)}`);
  const value: Record<string, unknown> = { tenant: tenantId, balance: brlString(res.balance) };
  if (res.status === 'duplicate') value.duplicate = true;
  ctx.out(
    value,
    res.status === 'duplicate'
      ? `already granted (external id ${externalId}); balance of ${tenantId}: R$ ${brlString(res.balance)}`
      : `granted R$ ${brlString(amount)} to ${tenantId}; balance: R$ ${brlString(res.balance)}`,
  );
}

// ------------------------------------------------------------------------------------ model

export async function modelSet(ctx: CliContext, args: string[]): Promise<void> {
  const cmd = 'model set';
  const flags = parseFlags(
    args,
    {
      values: [
        'id',
        'pool',
        'protocol',
        'upstream-model',
        'base-url',
        'api-key-env',
        'input-price',
        'output-price',
        'max-output-tokens',
        'context-length',
        'modalities',
        'image-tokens',
        'extra-params',
        'name',
        'description',
      ],
      required: ['id', 'pool', 'input-price', 'output-price'],
    },
    cmd,
  );
  const id = str(flags, 'id')!;
  if (!MODEL_ID_RE.test(id)) throw new UsageError(`${cmd}: --id must look like vendor/name, got ${JSON.stringify(id)}`);
  const pool = str(flags, 'pool')!;
  if (!/^[a-z0-9_-]+$/.test(pool)) throw new UsageError(`${cmd}: --pool must be lower-case letters, digits, _ or -`);
  const inputPrice = brlFlag(flags, 'input-price', cmd)!;
  const outputPrice = brlFlag(flags, 'output-price', cmd)!;
  const baseUrl = str(flags, 'base-url');
  if (baseUrl) {
    try {
      const u = new URL(baseUrl);
      if (u.protocol !== 'http:' && u.protocol !== 'https:') throw new Error();
    } catch {
      throw new UsageError(`${cmd}: --base-url must be an http(s) URL`);
    }
  }
  const apiKeyEnv = str(flags, 'api-key-env');
  if (apiKeyEnv && !/^[A-Z_][A-Z0-9_]*$/.test(apiKeyEnv)) {
    throw new UsageError(`${cmd}: --api-key-env is the NAME of an environment variable holding the upstream key (like OPENAI_API_KEY), never the key itself`);
  }
  const maxOut = intFlag(flags, 'max-output-tokens', cmd);
  const ctxLen = intFlag(flags, 'context-length', cmd);
  const protocol = str(flags, 'protocol');
  if (protocol !== undefined && !(PROTOCOLS as readonly string[]).includes(protocol))
    throw new UsageError(`${cmd}: --protocol must be one of ${PROTOCOLS.join(', ')}`);
  const list = (name: string) => {
    const v = str(flags, name);
    return v === undefined
      ? undefined
      : v
          .split(',')
          .map((x) => x.trim())
          .filter(Boolean);
  };
  const modalities = list('modalities');
  if (modalities && (!modalities.includes('text') || modalities.some((m) => !(MODALITIES as readonly string[]).includes(m)))) {
    throw new UsageError(`${cmd}: --modalities is a list of ${MODALITIES.join(', ')} that includes text`);
  }
  const extraParams = list('extra-params');
  if (extraParams?.some((p) => !/^[a-z_][a-z0-9_]*$/.test(p))) throw new UsageError(`${cmd}: --extra-params is a list of request field names like top_k,min_p`);
  const imageTokensText = str(flags, 'image-tokens');
  const imageTokens =
    imageTokensText === undefined ? undefined : imageTokensText === '' || imageTokensText === 'none' ? null : intFlag(flags, 'image-tokens', cmd)!;

  const m = await withDb(ctx, async (db) => {
    // Options not given keep their current values; an empty string clears base-url/api-key-env.
    const prev = await getModel(db, id);
    return upsertModel(db, {
      id,
      pool,
      protocol: (protocol as Protocol | undefined) ?? (prev && prev.pool === pool ? prev.protocol : defaultProtocol(pool)),
      upstream_model: str(flags, 'upstream-model') || prev?.upstream_model || id.slice(id.indexOf('/') + 1),
      base_url: baseUrl === undefined ? (prev?.base_url ?? null) : baseUrl || null,
      api_key_env: apiKeyEnv === undefined ? (prev?.api_key_env ?? null) : apiKeyEnv || null,
      input_price: inputPrice,
      output_price: outputPrice,
      max_output_tokens: maxOut ?? prev?.max_output_tokens ?? 4096,
      context_length: ctxLen ?? prev?.context_length ?? 128000,
      input_modalities: (modalities as Modality[] | undefined) ?? prev?.input_modalities ?? ['text'],
      image_input_tokens: imageTokens === undefined ? (prev?.image_input_tokens ?? null) : imageTokens,
      extra_params: extraParams ?? prev?.extra_params ?? [],
      name: str(flags, 'name') ?? prev?.name ?? null,
      description: str(flags, 'description') ?? prev?.description ?? null,
    });
  });
  ctx.out(
    modelView(m),
    `model ${m.id}: pool ${m.pool} (${m.protocol}), upstream ${m.upstream_model}, R$ ${brlString(m.input_price)} in / R$ ${brlString(m.output_price)} out per 1M tokens`,
  );
  // front doors and workers reload their catalogs now (otherwise within 5 s)
  await broadcast(ctx, subjects.catalogChanged, { model: m.id }, 'saved in the catalog', 'front doors and workers reload their catalogs within 5 s');
}

export function modelView(m: ModelRecord) {
  return {
    id: m.id,
    pool: m.pool,
    protocol: m.protocol,
    upstream_model: m.upstream_model,
    base_url: m.base_url,
    api_key_env: m.api_key_env,
    input_price: brlString(m.input_price),
    output_price: brlString(m.output_price),
    max_output_tokens: m.max_output_tokens,
    context_length: m.context_length,
    input_modalities: m.input_modalities,
    image_input_tokens: m.image_input_tokens,
    extra_params: m.extra_params,
  };
}

export async function modelList(ctx: CliContext, args: string[]): Promise<void> {
  parseFlags(args, { values: [] }, 'model list');
  const models = (await withDb(ctx, (db) => listModels(db))).map(modelView);
  ctx.out(
    { models },
    table(
      ['ID', 'POOL', 'PROTOCOL', 'UPSTREAM', 'IN BRL/1M', 'OUT BRL/1M', 'MAX OUT', 'CONTEXT'],
      models.map((m) => [m.id, m.pool, m.protocol, m.upstream_model, m.input_price, m.output_price, String(m.max_output_tokens), String(m.context_length)]),
      [4, 5, 6, 7],
      '(no models in the catalog; add one with catraca model set)',
    ),
  );
}

// ----------------------------------------------------------------------------------- ledger

export async function ledgerCheckCommand(ctx: CliContext, args: string[]): Promise<number> {
  const flags = parseFlags(args, { values: ['tenant'] }, 'ledger check');
  const result = await withDb(ctx, (db) => ledgerCheck(db, { tenantId: str(flags, 'tenant') }));
  const human = result.ok
    ? `ledger OK: ${result.tenants_checked} tenant(s) checked, balances match the ledger`
    : [
        `ledger MISMATCH: ${result.mismatches.length} problem(s) in ${result.tenants_checked} tenant(s) checked`,
        ...result.mismatches.map(
          (m) =>
            `  ${m.tenant} ${m.check}${m.key_id ? ` key ${m.key_id}` : ''}${m.request_id ? ` request ${m.request_id} ×${m.count}` : ''}${m.expected !== undefined ? ` expected ${m.expected}` : ''}${m.actual !== undefined ? ` actual ${m.actual}` : ''}`,
        ),
      ].join('\n');
  ctx.out({ ...result }, human);
  return result.ok ? 0 : 1;
}
