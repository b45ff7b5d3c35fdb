import type { NatsConnection } from 'nats';
import { checkUpstreamKeyOn, type UpstreamKeyCheck, type WorkerKeys, workerKeysOf } from '../catalog/upstream-keys.ts';
import { collectInstances, type DeploymentRow, deploymentRows } from '../bus/instances.ts';
import { type DeploymentRecord, listDeployments, listModels, type ModelRecord } from '../db/models.ts';
import type { DbClient } from '../db/pool.ts';
import { createLogger } from '../log.ts';

// The catalog as the console shows it: each model with its deployments, its vendor cost, the
// health of each deployment and whether the workers of its pool can read its key variable (both
// from the workers' $SRV.STATS, as `catraca status` and `catraca model set` read them).

const log = createLogger('console');

export interface VendorCost {
  id: string;
  model_id: string;
  valid_from: Date;
  currency: 'USD' | 'BRL';
  input_price: bigint;
  cached_input_price: bigint | null;
  cache_write_price: bigint | null;
  cache_write_1h_price: bigint | null;
  output_price: bigint;
  usd_brl_micros: bigint | null;
  /** what the vendor bills for a line of its own batch API (vendor mode); null: the online price above (migration 091) */
  batch_input_price: bigint | null;
  batch_cached_input_price: bigint | null;
  batch_cache_write_price: bigint | null;
  batch_cache_write_1h_price: bigint | null;
  batch_output_price: bigint | null;
  set_by: string | null;
}

type BatchPrices = 'batch_input_price' | 'batch_cached_input_price' | 'batch_cache_write_price' | 'batch_cache_write_1h_price' | 'batch_output_price';
/** The batch prices may be left out (null: the online prices). */
export type VendorCostInput = Omit<VendorCost, 'id' | 'model_id' | 'valid_from' | 'set_by' | BatchPrices> & Partial<Pick<VendorCost, BatchPrices>>;

const COLUMNS =
  'id::text as id, model_id, valid_from, currency, input_price, cached_input_price, cache_write_price, cache_write_1h_price, output_price, usd_brl_micros, batch_input_price, batch_cached_input_price, batch_cache_write_price, batch_cache_write_1h_price, batch_output_price, set_by';

/** The vendor cost in force for each model (the newest row of each). */
export async function currentVendorCosts(db: DbClient): Promise<Map<string, VendorCost>> {
  const { rows } = await db.query(`select distinct on (model_id) ${COLUMNS} from model_vendor_costs order by model_id, valid_from desc, id desc`);
  return new Map(rows.map((r) => [r.model_id, r as VendorCost]));
}

export async function setVendorCost(db: DbClient, modelId: string, c: VendorCostInput, operatorId: string): Promise<VendorCost> {
  const { rows } = await db.query(
    `insert into model_vendor_costs (model_id, currency, input_price, cached_input_price, cache_write_price, cache_write_1h_price, output_price, usd_brl_micros,
                                     batch_input_price, batch_cached_input_price, batch_cache_write_price, batch_cache_write_1h_price, batch_output_price, set_by)
     values ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14)
     returning ${COLUMNS}`,
    [
      modelId,
      c.currency,
      c.input_price,
      c.cached_input_price,
      c.cache_write_price,
      c.cache_write_1h_price,
      c.output_price,
      c.usd_brl_micros,
      c.batch_input_price ?? null,
      c.batch_cached_input_price ?? null,
      c.batch_cache_write_price ?? null,
      c.batch_cache_write_1h_price ?? null,
      c.batch_output_price ?? null,
      operatorId,
    ],
  );
  return rows[0];
}

/** A model's vendor costs over time, newest first (each row in force from its valid_from until the next), with who set each. */
export async function vendorCostHistory(db: DbClient, modelId: string, limit = 50): Promise<Array<VendorCost & { set_by_email: string | null }>> {
  const { rows } = await db.query(
    `select ${COLUMNS}, (select o.email from operators o where o.id = set_by) as set_by_email
       from model_vendor_costs where model_id = $1 order by valid_from desc, model_vendor_costs.id desc limit $2`,
    [modelId, limit],
  );
  return rows;
}

export interface CatalogModel {
  model: ModelRecord;
  deployments: DeploymentRecord[];
  vendorCost: VendorCost | null;
}

export async function loadCatalog(db: DbClient): Promise<CatalogModel[]> {
  const [models, deployments, costs] = await Promise.all([listModels(db), listDeployments(db), currentVendorCosts(db)]);
  return models.map((model) => ({
    model,
    deployments: deployments.filter((d) => d.model_id === model.id),
    vendorCost: costs.get(model.id) ?? null,
  }));
}

export interface WorkerState {
  /** Whether NATS answered at all (false: no NATS, or it failed). */
  reached: boolean;
  deployments: DeploymentRow[];
  workers: WorkerKeys[];
}

/** The workers' view of deployments and key variables, waiting at most `waitMs` for their answers. */
export async function workerState(nc: NatsConnection | null, waitMs = 500): Promise<WorkerState> {
  if (!nc) return { reached: false, deployments: [], workers: [] };
  try {
    const rows = await collectInstances(nc, { service: 'catraca-worker', waitMs });
    return { reached: true, deployments: deploymentRows(rows), workers: workerKeysOf(rows) };
  } catch (err) {
    log.warn('console: $SRV.STATS of the workers failed', { err });
    return { reached: false, deployments: [], workers: [] };
  }
}

export const keyCheck = (s: WorkerState, pool: string, variable: string | null): UpstreamKeyCheck | null =>
  variable && s.reached ? checkUpstreamKeyOn(s.workers, pool, variable) : null;
