import { formatRateLimit } from '../../auth/key-options.ts';
import { checkNewKey, type KeyField, type KeyInput } from '../../billing/key-rules.ts';
import { subjects } from '../../bus/subjects.ts';
import { createApiKey, getKey, listKeys, revokeKey, type ApiKeyRecord } from '../../db/keys.ts';
import { keyRevokedEvent } from '../../notify/events.ts';
import { brlString, parseFlags, str } from '../args.ts';
import { CliError, UsageError, type CliContext } from '../context.ts';
import { broadcast, plainTable, requireTenant, withDb } from './shared.ts';

/** The flag of each field of a new key (src/billing/key-rules.ts). */
const KEY_FLAGS: Record<KeyField, string> = {
  label: 'label',
  models: 'models',
  limit: 'limit',
  limit_reset: 'limit-reset',
  rate_limit: 'rate-limit',
  expires: 'expires',
  max_concurrent: 'max-concurrent',
  tpm: 'tpm',
  end_user_limit: 'end-user-limit',
};

export async function keyCreate(ctx: CliContext, args: string[]): Promise<void> {
  const cmd = 'key create';
  const flags = parseFlags(
    args,
    {
      values: ['tenant', 'label', 'models', 'limit', 'limit-reset', 'rate-limit', 'expires', 'max-concurrent', 'tpm', 'end-user-limit', 'data-country'],
      required: ['tenant'],
    },
    cmd,
  );
  const tenantId = str(flags, 'tenant')!;
  const modelsText = (str(flags, 'models') ?? '*').trim();
  const input: KeyInput = {
    label: str(flags, 'label') ?? '',
    models: modelsText === '*' ? '*' : modelsText.split(','),
    limit: str(flags, 'limit'),
    limitReset: str(flags, 'limit-reset'),
    rateLimit: str(flags, 'rate-limit'),
    expires: str(flags, 'expires'),
    maxConcurrent: str(flags, 'max-concurrent'),
    tpm: str(flags, 'tpm'),
    endUserLimit: str(flags, 'end-user-limit'),
  };
  const check = (known: ReadonlySet<string> | null) => {
    const checked = checkNewKey(input, known);
    if (checked.ok) return checked.key;
    const { field, code, message } = checked.error;
    if (code === 'unknown_model') throw new CliError(`${cmd}: ${message} (see the catalog; add with catraca model set)`);
    throw new UsageError(`${cmd}: --${KEY_FLAGS[field]} ${message}`);
  };
  check(null); // usage errors before any database access
  const dataCountry = str(flags, 'data-country');
  if (dataCountry !== undefined && !/^[A-Z]{2}$/.test(dataCountry))
    throw new UsageError(`${cmd}: --data-country is a country code of two capital letters (ISO 3166-1 alpha-2, like BR)`);
  const result = await withDb(ctx, async (db) => {
    await requireTenant(db, tenantId);
    const known = new Set((await db.query<{ id: string }>('select id from models')).rows.map((r) => r.id));
    return createApiKey(db, { tenantId, ...check(known), dataCountry: dataCountry ?? null });
  });
  const { record, key } = result;
  const expires = record.expires_at ? new Date(record.expires_at).toISOString() : null;
  ctx.out(
    { id: record.id, key, label: record.label, models: record.models ?? '*', expires_at: expires, data_country: record.data_country ?? null },
    [
      `created key ${record.id}${record.label ? ` (${record.label})` : ''} for tenant ${tenantId}`,
      `  models:  ${record.models ? record.models.join(', ') : '*'}`,
      ...(expires ? [`  expires: ${expires}`] : []),
      ...(record.data_country ? [`  data country: ${record.data_country} (served only by deployments there)`] : []),
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
    plainTable(
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
    // key.revoked for the tenant's webhooks and e-mails (src/notify): the portal's notifier publishes it
    await keyRevokedEvent(db, id);
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
