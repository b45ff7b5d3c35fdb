// Every NATS subject catraca uses, in one place.
export const subjects = {
  /** Jobs for a pool; workers of the pool subscribe in the queue group `queueGroup(pool)`. */
  job: (pool: string) => `${JOBS_PREFIX}${pool}`,
  queueGroup: (pool: string) => `workers.${pool}`,
  /** A job for one worker of a pool (after it announced free slots); each worker subscribes to its own. */
  jobDirect: (pool: string, workerId: string) => `catraca.jobs.${pool}.${workerId}`,
  /** A worker that refused work has free slots again: front doors with waiting jobs send them. */
  capacity: (pool: string) => `${CAPACITY_PREFIX}${pool}`,
  capacityWildcard: 'catraca.capacity.>',
  /**
   * Frames of one request. The front door subscribes once to `catraca.stream.<doorId>.>` and routes
   * by request id, so a request costs no SUB/UNSUB round trip with the server.
   */
  stream: (doorId: string, requestId: string) => `catraca.stream.${doorId}.${requestId}`,
  streamWildcard: (doorId: string) => `catraca.stream.${doorId}.>`,
  /** Cancel of one request, addressed to the worker that accepted it. */
  cancel: (workerId: string, requestId: string) => `catraca.cancel.${workerId}.${requestId}`,
  cancelWildcard: (workerId: string) => `catraca.cancel.${workerId}.>`,
  /** Usage, captured by the JetStream stream USAGE. */
  usage: (pool: string) => `catraca.usage.${pool}`,
  usageWildcard: 'catraca.usage.>',
  /** Usage metering has settled, copied by metering after its ledger commit into the stream USAGE_LOG (restores replay it). */
  usageLog: (pool: string) => `catraca.usagelog.${pool}`,
  usageLogWildcard: 'catraca.usagelog.>',
  /** Broadcast: a key was revoked or changed; every front door drops its cached record. */
  keyInvalidated: 'catraca.keys.invalidated',
  /** Broadcast: a tenant was suspended or reactivated; front doors stop admitting it from leases. */
  tenantChanged: 'catraca.tenants.changed',
  /** Broadcast: a catalog entry was added or changed; front doors and workers reload. */
  catalogChanged: 'catraca.catalog.changed',
  /** `catraca pix recurring run`: a request the portal (which holds the PSP session) answers with the pass it ran. */
  pixRecurringRun: 'catraca.pix.recurring.run',
  /** A batch's lines (`queue` mode), captured by the JetStream work queue BATCH; front doors' runners take them (src/batch/runner.ts). */
  batchLines: 'catraca.batch.lines',
  /**
   * `vendor` batch mode (src/batch/vendor.ts): a front door's requests to a worker of the pool (which
   * holds the deployment's key) to submit, poll or cancel a vendor batch; queue group `vbatch.<pool>`.
   */
  vendorBatch: (pool: string) => `catraca.vbatch.${pool}`,
  vendorBatchGroup: (pool: string) => `vbatch.${pool}`,
  /** Notification events (src/notify), captured by the JetStream stream NOTIFY; the portal's notifier delivers them. */
  notify: (type: string) => `catraca.notify.${type}`,
  notifyWildcard: 'catraca.notify.>',
  /** Notas fiscais to issue or cancel (src/nfse), captured by the JetStream stream NFSE; the portal's issuer takes them. */
  nfse: (op: 'issue' | 'cancel') => `catraca.nfse.${op}`,
  nfseWildcard: 'catraca.nfse.>',

  // Readers of the subjects above: the one place their layout is taken apart.
  /** A job subject's pool, and its worker when the job was sent to one worker alone. */
  parseJob(subject: string): { pool: string; worker?: string } {
    const rest = subject.slice(JOBS_PREFIX.length);
    const dot = rest.indexOf('.');
    return dot < 0 ? { pool: rest } : { pool: rest.slice(0, dot), worker: rest.slice(dot + 1) };
  },
  /** The pool of a capacity subject (`catraca.capacity.<pool>`). */
  parseCapacity(subject: string): string {
    return subject.slice(CAPACITY_PREFIX.length);
  },
  /** The request id of a cancel subject (`catraca.cancel.<worker>.<request>`), or null. */
  parseCancel(subject: string): string | null {
    if (!subject.startsWith(CANCEL_PREFIX)) return null;
    const dot = subject.indexOf('.', CANCEL_PREFIX.length);
    return dot < 0 ? null : subject.slice(dot + 1);
  },
  /** A reader of the request id in this door's stream subjects (made once: it runs per frame). */
  streamRequestId(doorId: string): (subject: string) => string {
    const prefixLength = `catraca.stream.${doorId}.`.length;
    return (subject) => subject.slice(prefixLength);
  },
} as const;

const JOBS_PREFIX = 'catraca.jobs.';
const CANCEL_PREFIX = 'catraca.cancel.';
const CAPACITY_PREFIX = 'catraca.capacity.';

export const USAGE_STREAM = 'USAGE';
/** Every settled usage message, kept USAGE_LOG_RETENTION_DAYS: what a restored ledger settles again (src/bus/usage-log.ts). */
export const USAGE_LOG_STREAM = 'USAGE_LOG';
export const METERING_DURABLE = 'metering';
export const NOTIFY_STREAM = 'NOTIFY';
export const NOTIFY_DURABLE = 'notifier';
/** The JetStream stream of notas fiscais to issue or cancel, and the portal issuers' durable consumer (src/nfse/issuer.ts). */
export const NFSE_STREAM = 'NFSE';
export const NFSE_DURABLE = 'nfse-issuer';
