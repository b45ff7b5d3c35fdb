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
  set_by: string | null;
}

export type VendorCostInput = Omit<VendorCost, 'id' | 'model_id' | 'valid_from' | 'set_by'>;

/** The vendor cost in force for each model (the newest row of each). */
export async function currentVendorCosts(db: DbClient): Promise<Map<string, VendorCost>> {
  const { rows } = await db.query(
    'select distinct on (model_id) id::text as id, model_id, valid_from, currency, input_price, cached_input_price, cache_write_price, cache_write_1h_price, output_price, usd_brl_micros, set_by from model_vendor_costs order by model_id, valid_from desc, id desc',
  );
  return new Map(rows.map((r) => [r.model_id, r as VendorCost]));
}

export async function setVendorCost(db: DbClient, modelId: string, c: VendorCostInput, operatorId: string): Promise<VendorCost> {
  const { rows } = await db.query(
    `insert into model_vendor_costs (model_id, currency, input_price, cached_input_price, cache_write_price, cache_write_1h_price, output_price, usd_brl_micros, set_by)
     values ($1, $2, $3, $4, $5, $6, $7, $8, $9)
     returning id::text as id, model_id, valid_from, currency, input_price, cached_input_price, cache_write_price, cache_write_1h_price, output_price, usd_brl_micros, set_by`,
    [modelId, c.currency, c.input_price, c.cached_input_price, c.cache_write_price, c.cache_write_1h_price, c.output_price, c.usd_brl_micros, operatorId],
  );
  return rows[0];
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
