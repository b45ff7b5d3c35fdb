import { createId } from '@paralleldrive/cuid2';
import { connect as natsConnect } from 'nats';
import { natsOptions } from '../../bus/connect.ts';
import { subjects } from '../../bus/subjects.ts';
import { checkUpstreamKeyOn, type WorkerKeys, workerUpstreamKeys } from '../../catalog/upstream-keys.ts';
import {
  addDeployment,
  BATCH_MODES,
  type BatchMode,
  DEPLOYMENT_NAME_RE,
  type DeploymentRecord,
  getModel,
  listDeployments,
  PROTOCOLS,
  removeDeployment,
} from '../../db/models.ts';
import { brlFlag, brlString, intFlag, parseFlags, str } from '../args.ts';
import { CliError, type CliContext, UsageError } from '../context.ts';
import { BATCH_PRICE_FLAGS, batchPriceFlags, batchPriceView } from './model.ts';
import { saveUsdPrices, USD_FLAGS, usdFlags, usdToBrl } from './usd.ts';
import { vertexBaseUrlFlag } from './vertex.ts';
import { broadcast, plainTable, withDb } from './shared.ts';

// `catraca model deployment add|list|remove`: the places a catalog model is served from besides its
// own row (the `primary` deployment `model set` defines), and the check that the workers of its
// pool can read the key variable a deployment names.

const announce = (ctx: CliContext, model: string) =>
  broadcast(ctx, subjects.catalogChanged, { model }, 'saved in the catalog', 'front doors and workers reload their catalogs within 5 s');

export async function deploymentAdd(ctx: CliContext, args: string[]): Promise<void> {
  const cmd = 'model deployment add';
  const flags = parseFlags(
    args,
    {
      values: [
        'model',
        'name',
        'base-url',
        'api-key-env',
        'upstream-model',
        'protocol',
        'weight',
        'vertex-project',
        'region',
        'country',
        'input-price',
        'output-price',
        'cached-input-price',
        'cache-write-price',
        'cache-write-1h-price',
        ...BATCH_PRICE_FLAGS,
        'batch',
        ...USD_FLAGS,
      ],
      required: ['model'],
    },
    cmd,
  );
  const modelId = str(flags, 'model')!;
  const protocol = str(flags, 'protocol');
  if (protocol !== undefined && !(PROTOCOLS as readonly string[]).includes(protocol))
    throw new UsageError(`${cmd}: --protocol must be one of ${PROTOCOLS.join(', ')}`);
  const given = str(flags, 'base-url');
  if (given !== undefined && !/^https?:\/\//.test(given)) throw new UsageError(`${cmd}: --base-url must be an http(s) URL`);
  const baseUrl = (str(flags, 'vertex-project') !== undefined ? vertexBaseUrlFlag(flags, cmd, protocol) : undefined) ?? given;
  const region = str(flags, 'region');
  if (region !== undefined && !/^[a-z0-9][a-z0-9-]{0,39}$/.test(region)) throw new UsageError(`${cmd}: --region is the vendor's region name, like sa-east-1`);
  const country = str(flags, 'country');
  if (country !== undefined && !/^[A-Z]{2}$/.test(country)) throw new UsageError(`${cmd}: --country is two capital letters (ISO 3166-1 alpha-2, like BR)`);
  if (!baseUrl) throw new UsageError(`${cmd}: --base-url is required (or --vertex-project and --region with --protocol gemini)`);
  const apiKeyEnv = str(flags, 'api-key-env');
  if (apiKeyEnv !== undefined && !/^[A-Z_][A-Z0-9_]*$/.test(apiKeyEnv)) {
    throw new UsageError(`${cmd}: --api-key-env is the NAME of an environment variable holding the upstream key (like OPENAI_API_KEY), never the key itself`);
  }
  const name = str(flags, 'name') ?? new URL(baseUrl).hostname.toLowerCase();
  if (!DEPLOYMENT_NAME_RE.test(name) || name === 'primary') throw new UsageError(`${cmd}: --name is lower-case letters, digits, . _ - (not "primary")`);
  const weight = intFlag(flags, 'weight', cmd);
  if (weight !== undefined && weight > 1000) throw new UsageError(`${cmd}: --weight is 1 to 1000`);
  const brlGiven = ['input-price', 'output-price', 'cached-input-price', 'cache-write-price', 'cache-write-1h-price'].some((f) => str(flags, f) !== undefined);
  const usd = usdFlags(flags, cmd, brlGiven);
  const batchGiven = batchPriceFlags(flags, cmd);
  const batchMode = str(flags, 'batch');
  if (batchMode !== undefined && !(BATCH_MODES as readonly string[]).includes(batchMode))
    throw new UsageError(`${cmd}: --batch must be one of ${BATCH_MODES.join(', ')}`);
  const batchPrices = {
    batch_input_price: batchGiven.batch_input_price ?? null,
    batch_output_price: batchGiven.batch_output_price ?? null,
    batch_cached_input_price: batchGiven.batch_cached_input_price ?? null,
    batch_cache_write_price: batchGiven.batch_cache_write_price ?? null,
    batch_cache_write_1h_price: batchGiven.batch_cache_write_1h_price ?? null,
  };
  const d = await withDb(ctx, async (db) => {
    const fromUsd = usd ? await usdToBrl(db, usd, cmd) : null;
    const model = await getModel(db, modelId);
    if (!model) throw new CliError(`${cmd}: unknown model ${modelId} (add it with catraca model set)`);
    if ((await listDeployments(db, modelId)).some((x) => x.name === name)) throw new CliError(`${cmd}: ${modelId} already has a deployment named ${name}`);
    return {
      record: await addDeployment(db, `dep_${createId()}`, {
        model_id: modelId,
        name,
        protocol: (protocol as DeploymentRecord['protocol'] | undefined) ?? model.protocol,
        base_url: baseUrl,
        api_key_env: apiKeyEnv ?? null,
        upstream_model: str(flags, 'upstream-model') ?? model.upstream_model,
        weight: weight ?? 1,
        region: region ?? null,
        country: country ?? null,
        input_price: fromUsd?.prices.input_price ?? brlFlag(flags, 'input-price', cmd) ?? null,
        output_price: fromUsd?.prices.output_price ?? brlFlag(flags, 'output-price', cmd) ?? null,
        // the cache prices of this deployment's vendor (null: the model's, as for the other prices)
        cached_input_price: fromUsd ? fromUsd.prices.cached_input_price : (brlFlag(flags, 'cached-input-price', cmd) ?? null),
        cache_write_price: fromUsd ? fromUsd.prices.cache_write_price : (brlFlag(flags, 'cache-write-price', cmd) ?? null),
        cache_write_1h_price: fromUsd ? fromUsd.prices.cache_write_1h_price : (brlFlag(flags, 'cache-write-1h-price', cmd) ?? null),
        // its batch prices (null: the model's batch price, else this deployment's online price)
        ...batchPrices,
        batch_mode: (batchMode as BatchMode | undefined) ?? 'queue',
      }),
      pool: model.pool,
      fromUsd,
    };
  });
  if (usd && d.fromUsd) {
    await withDb(ctx, (db) => saveUsdPrices(db, modelId, d.record.name, usd, d.fromUsd!.rate));
    ctx.warn(`priced from USD at R$ ${brlString(d.fromUsd.rate.micros)} per dollar (${d.fromUsd.rate.date}); recomputed at each new PTAX`);
  }
  ctx.out(deploymentView(d.record), `deployment ${d.record.id} (${d.record.name}) of ${modelId}: ${d.record.base_url}, weight ${d.record.weight}`);
  await announce(ctx, modelId);
  if (d.record.api_key_env) await checkUpstreamKey(ctx, d.pool, d.record.api_key_env);
}

export function deploymentView(d: DeploymentRecord) {
  return {
    id: d.id,
    model: d.model_id,
    name: d.name,
    protocol: d.protocol,
    base_url: d.base_url,
    api_key_env: d.api_key_env,
    upstream_model: d.upstream_model,
    weight: d.weight,
    region: d.region ?? null,
    country: d.country ?? null,
    input_price: d.input_price === null ? null : brlString(d.input_price),
    output_price: d.output_price === null ? null : brlString(d.output_price),
    cached_input_price: d.cached_input_price === null ? null : brlString(d.cached_input_price),
    cache_write_price: d.cache_write_price === null ? null : brlString(d.cache_write_price),
    cache_write_1h_price: d.cache_write_1h_price === null ? null : brlString(d.cache_write_1h_price),
    ...batchPriceView(d),
    batch_mode: d.batch_mode,
  };
}

export async function deploymentList(ctx: CliContext, args: string[]): Promise<void> {
  const flags = parseFlags(args, { values: ['model'], required: ['model'] }, 'model deployment list');
  const modelId = str(flags, 'model')!;
  const rows = await withDb(ctx, async (db) => {
    const model = await getModel(db, modelId);
    if (!model) throw new CliError(`model deployment list: unknown model ${modelId}`);
    const primary = {
      id: 'primary',
      model: model.id,
      name: 'primary',
      protocol: model.protocol,
      base_url: model.base_url,
      api_key_env: model.api_key_env,
      upstream_model: model.upstream_model,
      weight: model.weight,
      input_price: brlString(model.input_price),
      output_price: brlString(model.output_price),
      cached_input_price: model.cached_input_price === null ? null : brlString(model.cached_input_price),
      cache_write_price: model.cache_write_price === null ? null : brlString(model.cache_write_price),
      cache_write_1h_price: model.cache_write_1h_price === null ? null : brlString(model.cache_write_1h_price),
      ...batchPriceView(model),
      batch_mode: model.batch_mode,
    };
    return [primary, ...(await listDeployments(db, modelId)).map(deploymentView)];
  });
  ctx.out(
    { model: modelId, deployments: rows },
    plainTable(
      ['ID', 'NAME', 'PROTOCOL', 'BASE URL', 'KEY VARIABLE', 'UPSTREAM', 'WEIGHT', 'IN BRL/1M', 'OUT BRL/1M', 'BATCH'],
      rows.map((d) => [
        d.id,
        d.name,
        d.protocol,
        d.base_url ?? '-',
        d.api_key_env ?? '-',
        d.upstream_model,
        String(d.weight),
        d.input_price ?? 'model',
        d.output_price ?? 'model',
        d.batch_mode,
      ]),
      [6],
      '(no deployments)',
    ),
  );
}

export async function deploymentRemove(ctx: CliContext, args: string[]): Promise<void> {
  const flags = parseFlags(args, { values: ['id'], required: ['id'] }, 'model deployment remove');
  const id = str(flags, 'id')!;
  if (id === 'primary') throw new UsageError("model deployment remove: the primary deployment is the model's own row (catraca model set)");
  const removed = await withDb(ctx, (db) => removeDeployment(db, id));
  if (!removed) throw new CliError(`model deployment remove: no deployment ${JSON.stringify(id)}`);
  ctx.out({ id, model: removed.model_id, removed: true }, `removed deployment ${id} (${removed.name}) of ${removed.model_id}`);
  await announce(ctx, removed.model_id);
}

/**
 * Warns when the workers of `pool` cannot use the key variable a model or deployment names: not in
 * their WORKER_UPSTREAM_KEYS, or empty there (asked over NATS; workers report names, never values).
 * Requests to it would otherwise fail with 502 upstream_not_configured, found only in production.
 */
export async function checkUpstreamKey(ctx: CliContext, pool: string, variable: string): Promise<void> {
  const natsUrl = ctx.natsUrl();
  if (!natsUrl) {
    ctx.warn(`could not check that the workers of pool ${pool} can read ${variable}: no NATS_URL and no running stack`);
    return;
  }
  let workers: WorkerKeys[];
  try {
    const nc = await natsConnect({ ...natsOptions(natsUrl), timeout: 3000, reconnect: false, name: 'catraca-cli' });
    try {
      workers = await workerUpstreamKeys(nc);
    } finally {
      await nc.close();
    }
  } catch (err) {
    ctx.warn(`could not check that the workers of pool ${pool} can read ${variable}: ${(err as Error).message}`);
    return;
  }
  const { noWorker, unlisted, empty } = checkUpstreamKeyOn(workers, pool, variable);
  if (noWorker) {
    ctx.warn(`no worker of pool ${pool} is running: start one that has ${variable} in WORKER_UPSTREAM_KEYS`);
    return;
  }
  if (unlisted.length)
    ctx.warn(`${variable} is not in WORKER_UPSTREAM_KEYS of ${unlisted.join(', ')} (pool ${pool}): requests they take will fail with upstream_not_configured`);
  if (empty.length) ctx.warn(`${variable} is empty on ${empty.join(', ')} (pool ${pool}): requests they take will fail with upstream_not_configured`);
}
