// Every NATS subject catraca uses, in one place.
export const subjects = {
  /** Jobs for a pool; workers of the pool subscribe in the queue group `queueGroup(pool)`. */
  job: (pool: string) => `catraca.jobs.${pool}`,
  queueGroup: (pool: string) => `workers.${pool}`,
  /** A job for one worker of a pool (after it announced free slots); each worker subscribes to its own. */
  jobDirect: (pool: string, workerId: string) => `catraca.jobs.${pool}.${workerId}`,
  /** A worker that refused work has free slots again: front doors with waiting jobs send them. */
  capacity: (pool: string) => `catraca.capacity.${pool}`,
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
  /** Broadcast: a key was revoked or changed; every front door drops its cached record. */
  keyInvalidated: 'catraca.keys.invalidated',
  /** Broadcast: a catalog entry was added or changed; front doors and workers reload. */
  catalogChanged: 'catraca.catalog.changed',
} as const;

export const USAGE_STREAM = 'USAGE';
export const METERING_DURABLE = 'metering';
