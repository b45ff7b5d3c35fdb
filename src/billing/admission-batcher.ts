import type { DbClient } from '../db/pool.ts';
import { admit, admitBatch, type AdmitRequest, type AdmitResult } from './ledger.ts';

interface Pending {
  request: AdmitRequest;
  resolve: (r: AdmitResult) => void;
  reject: (err: unknown) => void;
}

/**
 * A per-tenant queue in front of the admission functions: at most one admission call per tenant
 * is in flight from this process; requests of that tenant that arrive meanwhile go together in
 * the next call. A quiet tenant pays one plain round trip; a hot tenant takes its row lock once per
 * batch instead of once per request, which removes the lock convoy that otherwise caps it.
 */
export class AdmissionBatcher {
  private tenants = new Map<string, { busy: boolean; queue: Pending[] }>();
  /** calls made to the database (for tests and stats) */
  calls = 0;

  constructor(
    private db: DbClient,
    private maxBatch = 128,
  ) {}

  admit(request: AdmitRequest): Promise<AdmitResult> {
    return new Promise((resolve, reject) => {
      let t = this.tenants.get(request.tenantId);
      if (!t) this.tenants.set(request.tenantId, (t = { busy: false, queue: [] }));
      t.queue.push({ request, resolve, reject });
      if (!t.busy) this.flush(request.tenantId, t);
    });
  }

  private flush(tenantId: string, t: { busy: boolean; queue: Pending[] }): void {
    const batch = t.queue.splice(0, this.maxBatch);
    if (batch.length === 0) {
      this.tenants.delete(tenantId);
      return;
    }
    t.busy = true;
    this.calls++;
    const call =
      batch.length === 1
        ? admit(this.db, batch[0].request).then((r) => [r])
        : admitBatch(
            this.db,
            batch.map((p) => p.request),
          );
    call
      .then(
        (results) => {
          for (let i = 0; i < batch.length; i++) batch[i].resolve(results[i]);
        },
        (err) => {
          for (const p of batch) p.reject(err);
        },
      )
      .finally(() => {
        t.busy = false;
        this.flush(tenantId, t);
      });
  }
}
