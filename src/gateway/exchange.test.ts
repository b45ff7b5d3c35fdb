import type { NatsConnection } from 'nats';
import { afterEach, describe, expect, it } from 'vitest';
import type { Admission, AdmitInput, Admitted } from '../billing/admission.ts';
import type { AdmitResult } from '../billing/ledger.ts';
import { encodeFrame, type OutFrame } from '../bus/frames.ts';
import { decodeJson, type Job } from '../bus/messages.ts';
import { subjects } from '../bus/subjects.ts';
import { type Catalog, type CatalogEntry, catalogEntry } from '../catalog/catalog.ts';
import type { Config } from '../config.ts';
import type { ApiKeyRecord } from '../db/keys.ts';
import type { Db } from '../db/pool.ts';
import { type CatracaError, errors } from '../errors.ts';
import { chat } from '../protocols/chat/index.ts';
import type { ParsedRequest, Protocol } from '../protocols/types.ts';
import type { JobRunner } from '../runner/runner.ts';
import type { Dispatcher, LateAnswer, LocalOffer, Ticket } from './dispatcher.ts';
import { Exchange } from './exchange.ts';
import type { HoldAdmission } from './hold.ts';
import type { KeyCache } from './key-cache.ts';
import type { ResponseState } from './respond.ts';
import { StreamRouter } from './stream-router.ts';
import type { HttpResponse } from './uws.ts';

// Every way a request can end, through the whole Exchange with its parts replaced by recordings
// (admission, the dispatcher, the door's own lane, the client's socket; the stream router is the
// real one): admission is told of the hold's end exactly once, and in the right way:
//   release       nothing will settle against the hold (no worker has the job, or the worker
//                 publishes no usage for it);
//   finish cost   the worker's terminal frame said what it will be debited (a lease counts it);
//   finish null   the end was never seen (the worst case stays counted);
//   nothing       admission refused the request, or failed: nothing was held.

const PRICES = { input_price: 2_000_000n, output_price: 8_000_000n }; // micro-BRL per 1M tokens: 2 and 8 per token
const USAGE = { prompt_tokens: 10, completion_tokens: 5 }; // 10 × 2 + 5 × 8 = 60 µR$
const DONE: OutFrame = { t: 'done', done: { finish_reason: 'stop', usage: USAGE, estimated: false } };

function model(id: string, pool: string): CatalogEntry {
  return catalogEntry({
    id,
    pool,
    protocol: 'openai',
    upstream_model: id.split('/')[1],
    base_url: null,
    api_key_env: null,
    ...PRICES,
    cached_input_price: null,
    cache_write_price: null,
    cache_write_1h_price: null,
    batch_input_price: null,
    batch_output_price: null,
    batch_cached_input_price: null,
    batch_cache_write_price: null,
    batch_cache_write_1h_price: null,
    batch_mode: 'queue',
    context_length: 8192,
    max_output_tokens: 1000,
    input_modalities: ['text'],
    image_input_tokens: null,
    extra_params: [],
    kind: 'chat',
    legacy_completions: false,
    weight: 1,
    reasoning: false,
    context_length_set: true,
    name: null,
    description: null,
    created_at: new Date(0),
    updated_at: new Date(0),
  });
}

const MODELS = new Map([
  ['acme/small', model('acme/small', 'local')], // served by the door's own lane
  ['acme/backup', model('acme/backup', 'local')],
  ['acme/remote', model('acme/remote', 'remote')], // only by worker processes, over the dispatcher
  ['acme/remote-backup', model('acme/remote-backup', 'remote')],
]);

const KEY: ApiKeyRecord = {
  id: 'key-1',
  tenant_id: 'tenant-1',
  key_hint: 'sk-…abcd',
  label: 'test',
  models: null,
  limit_micros: null,
  limit_reset: null,
  held_micros: 0n,
  usage_micros: 0n,
  window_start: null,
  window_usage_micros: 0n,
  rate_limit_requests: null,
  rate_limit_interval_s: null,
  max_concurrent: null,
  tpm: null,
  end_user_daily_limit: null,
  created_by: null,
  is_demo: false,
  created_at: new Date(0),
  last_used_at: null,
  expires_at: null,
  revoked_at: null,
};

class RecordingAdmission implements HoldAdmission {
  calls: string[] = [];
  answer: Partial<AdmitResult> = {};
  /** admission answers when this resolves (the client may leave meanwhile) */
  gate?: Promise<void>;
  fail?: Error;

  async admit(input: AdmitInput): Promise<Admitted> {
    this.calls.push('admit');
    await this.gate;
    if (this.fail) throw this.fail;
    return {
      status: 'ok',
      held: input.max,
      available: 1_000_000n,
      rl_limit: null,
      rl_remaining: null,
      rl_reset_ms: null,
      hold: input.requestId,
      ...this.answer,
    };
  }

  finish(_requestId: string, cost: bigint | null): void {
    this.calls.push(`finish ${cost}`);
  }

  async release(_requestId: string): Promise<void> {
    this.calls.push('release');
  }
}

class RecordingTicket implements Ticket {
  readonly result: Promise<{ worker: string }>;
  queued = true;
  resolve!: (r: { worker: string }) => void;
  reject!: (e: CatracaError) => void;
  constructor(
    readonly job: Job,
    /** what the dispatcher reports of the job after its ack timed out */
    readonly late?: (late: LateAnswer) => void,
  ) {
    this.result = new Promise((resolve, reject) => {
      this.resolve = resolve;
      this.reject = reject;
    });
  }
  cancel(): void {
    this.reject(errors.cancelled()); // as the dispatcher drops a waiting job
  }
}

/** The client's socket: what was written to it, whole. */
class RecordingResponse {
  status = '';
  headers: Record<string, string> = {};
  body = '';
  ended = false;
  closed = false;
  writable = true;
  cork(cb: () => void) {
    cb();
    return this;
  }
  writeStatus(s: string) {
    this.status = s;
    return this;
  }
  writeHeader(k: string, v: string) {
    this.headers[k] = v;
    return this;
  }
  write(chunk: string | Uint8Array) {
    this.body += typeof chunk === 'string' ? chunk : Buffer.from(chunk).toString();
    return this.writable;
  }
  end(chunk: string | Uint8Array = '') {
    this.write(chunk);
    this.ended = true;
    return this;
  }
  onWritable() {
    return this;
  }
  close() {
    this.closed = true;
    return this;
  }
}

const routers: StreamRouter[] = [];
afterEach(() => {
  for (const r of routers.splice(0)) r.stop();
});

let n = 0;
const tick = () => new Promise((r) => setImmediate(r));

interface Options {
  body?: Record<string, unknown>;
  protocol?: Protocol<ParsedRequest>;
  answer?: Partial<AdmitResult>;
  /** the stream router's idle timeout (ms) */
  idleMs?: number;
  maxPayload?: number;
  bufferLimit?: number;
}

function start(o: Options = {}) {
  const requestId = `gen-test-${++n}`;
  const admission = new RecordingAdmission();
  admission.answer = o.answer ?? {};
  let releaseGate: () => void = () => {};
  const localJobs: Job[] = [];
  const cancels: string[] = [];
  const published: string[] = [];
  const tickets: RecordingTicket[] = [];
  const invalidated: string[] = [];
  const finished: number[] = [];
  const nc = {
    info: { max_payload: o.maxPayload ?? 1024 * 1024 },
    publish: (subject: string) => published.push(subject),
    subscribe: () => ({ unsubscribe() {} }),
  } as unknown as NatsConnection;
  const router = new StreamRouter(nc, 'door-1', o.idleMs ?? 60_000);
  if (o.idleMs) {
    router.start(); // the idle sweep
    routers.push(router);
  }
  const local = {
    id: 'door-1-lane',
    serves: (pool: string) => pool === 'local',
    offer: (job: Job) => {
      localJobs.push(job);
      return { ok: true, worker: 'door-1-lane' };
    },
    cancel: (id: string) => cancels.push(id),
  } as unknown as JobRunner;
  const dispatcher = {
    submit: (_pool: string, _tenant: string, payload: Uint8Array, _headers: unknown, _local?: LocalOffer, onLate?: (late: LateAnswer) => void) => {
      const t = new RecordingTicket(decodeJson(payload) as Job, onLate);
      tickets.push(t);
      return t;
    },
  } as unknown as Dispatcher;
  const catalog = { resolve: async (name: string) => MODELS.get(name), fetch: async () => undefined } as unknown as Catalog;
  const res = new RecordingResponse();
  const s: ResponseState = { res: res as unknown as HttpResponse, requestId, aborted: false, done: false };
  const exchange = new Exchange(
    {
      config: { REQUEST_TIMEOUT_MS: 60_000, HOLD_GRACE_MS: 1_000, MAX_CLIENT_BUFFER_BYTES: o.bufferLimit ?? 1024 * 1024 } as Config,
      db: {} as Db,
      nc,
      keys: { invalidate: (id: string) => invalidated.push(id) } as unknown as KeyCache,
      catalog,
      router,
      admission: admission as unknown as Admission,
      dispatcher,
      local,
      onFinish: (status) => finished.push(status),
    },
    o.protocol ?? (chat as unknown as Protocol<ParsedRequest>),
    s,
  );
  const body = o.body ?? { model: 'acme/small', messages: [{ role: 'user', content: 'hi' }], stream: true, max_tokens: 50 };
  let seq = 0;
  let jobsSeen = 0;
  const h = {
    requestId,
    admission,
    res,
    s,
    exchange,
    router,
    localJobs,
    cancels,
    published,
    tickets,
    invalidated,
    finished,
    /** admission waits for `openGate()` */
    gate() {
      admission.gate = new Promise((r) => (releaseGate = r));
    },
    openGate: () => releaseGate(),
    run: () => exchange.run(Buffer.from(JSON.stringify(body)), Promise.resolve(KEY)),
    /** A frame from the worker that has the job (sequence numbers restart with each job). */
    frame(f: OutFrame) {
      const jobs = localJobs.length + tickets.length;
      if (jobs !== jobsSeen) {
        jobsSeen = jobs;
        seq = 0;
      }
      router.deliverLocal(router.replySubject(requestId), Buffer.from(encodeFrame(seq++, f)));
    },
    /** uWS's onAborted */
    abort() {
      s.aborted = true;
      exchange.aborted();
    },
  };
  return h;
}

/** The SSE events written to the client, parsed (`[DONE]` as the string). */
function events(body: string): unknown[] {
  return body
    .split('\n\n')
    .filter((e) => e.startsWith('data: '))
    .map((e) => (e === 'data: [DONE]' ? '[DONE]' : JSON.parse(e.slice(6))));
}

/** The code of the error event that ended a stream (OpenRouter's shape: an `error` event, then [DONE]). */
function streamError(body: string): string | undefined {
  const ev = events(body);
  expect(ev.at(-1)).toBe('[DONE]');
  return (ev.at(-2) as { error?: { code?: string } }).error?.code;
}

describe('Exchange: the hold ends once, whichever way the request ends', () => {
  it('admission refuses (balance): 402, nothing held, nothing given back', async () => {
    const h = start({ answer: { status: 'insufficient_balance', held: 0n, available: 30n } });
    await h.run();
    expect(h.res.status).toBe('402 Payment Required');
    expect((JSON.parse(h.res.body) as { error: { code: string } }).error.code).toBe('insufficient_balance');
    expect(h.admission.calls).toEqual(['admit']);
    expect(h.localJobs).toEqual([]);
  });

  it('admission refuses (rate limit): 429 with the x-ratelimit-* headers and retry-after, nothing held', async () => {
    const h = start({ answer: { status: 'rate_limited', held: 0n, rl_limit: 10, rl_remaining: 0, rl_reset_ms: 2_500n } });
    await h.run();
    expect(h.res.status).toBe('429 Too Many Requests');
    expect([h.res.headers['retry-after'], h.res.headers['x-ratelimit-limit'], h.res.headers['x-ratelimit-remaining']]).toEqual(['3', '10', '0']);
    expect(h.admission.calls).toEqual(['admit']);
  });

  it('admission finds the key revoked: 401, the key forgotten, nothing held', async () => {
    const h = start({ answer: { status: 'key_revoked', held: 0n } });
    await h.run();
    expect(h.res.status).toBe('401 Unauthorized');
    expect(h.invalidated).toEqual(['key-1']);
    expect(h.admission.calls).toEqual(['admit']);
  });

  it('admission fails (its database call threw): 500, nothing held, nothing given back', async () => {
    const h = start();
    h.admission.fail = new Error('boom');
    await h.run();
    expect(h.res.status).toBe('500 Internal Server Error');
    expect(h.admission.calls).toEqual(['admit']);
  });

  it('the client leaves while admission runs: the hold goes back once, no job is sent', async () => {
    const h = start();
    h.gate();
    const running = h.run();
    await tick();
    h.abort();
    h.openGate();
    await running;
    expect(h.admission.calls).toEqual(['admit', 'release']);
    expect(h.localJobs).toEqual([]);
    expect(h.finished).toEqual([499]);
    expect(h.res.body).toBe('');
  });

  it('a free route: its (zero) hold goes back at admission, once, even when the client leaves meanwhile', async () => {
    const free = { ...chat, free: true } as unknown as Protocol<ParsedRequest>;
    const h = start({ protocol: free });
    h.gate();
    const running = h.run();
    await tick();
    h.abort();
    h.openGate();
    await running;
    expect(h.admission.calls).toEqual(['admit', 'release']);

    const whole = start({ protocol: free, body: { model: 'acme/small', messages: [{ role: 'user', content: 'hi' }] } });
    await whole.run();
    expect(whole.localJobs[0]?.hold).toBe(''); // nothing for metering to settle
    whole.frame(DONE);
    await tick();
    expect(whole.res.status).toBe('200 OK');
    expect(whole.admission.calls).toEqual(['admit', 'release']);
  });

  it('normal end, streamed: the cost from the done frame is counted once; the stream ends with [DONE]', async () => {
    const h = start();
    await h.run();
    expect(h.localJobs.map((j) => [j.hold, j.max_tokens])).toEqual([[h.requestId, 50]]);
    h.frame({ t: 'text', content: 'Hel' });
    h.frame({ t: 'text', content: 'lo' });
    h.frame(DONE);
    h.frame(DONE); // a duplicate is not routed any more
    await tick();
    expect(h.admission.calls).toEqual(['admit', 'finish 60']);
    expect(h.res.status).toBe('200 OK');
    const ev = events(h.res.body);
    expect(ev.at(-1)).toBe('[DONE]');
    expect(ev.map((e) => (e as { choices?: Array<{ delta?: { content?: string } }> }).choices?.[0]?.delta?.content ?? '').join('')).toBe('Hello');
    expect(h.finished).toEqual([200]);
  });

  it('normal end, not streamed: the cost counted once, the answer whole', async () => {
    const h = start({ body: { model: 'acme/small', messages: [{ role: 'user', content: 'hi' }], max_tokens: 50 } });
    await h.run();
    h.frame({ t: 'text', content: 'Hello' });
    h.frame({ t: 'done', done: { ...DONE.done, prices: { input_price: '1000000', output_price: '1000000' }, extra_cost: '4' } }); // 10 + 5 + 4
    await tick();
    expect(h.admission.calls).toEqual(['admit', 'finish 19']);
    expect(h.res.status).toBe('200 OK');
    expect((JSON.parse(h.res.body) as { choices: Array<{ message: { content: string } }> }).choices[0].message.content).toBe('Hello');
  });

  it('the vendor fails before the first frame (no usage): its status and retry-after answer, the end counted as unknown', async () => {
    const h = start();
    await h.run();
    h.frame({ t: 'error', error: { status: 429, code: 'upstream_rate_limited', message: 'slow down', retry_after: 1.5 } });
    await tick();
    expect(h.res.status).toBe('429 Too Many Requests');
    expect(h.res.headers['retry-after']).toBe('2');
    expect(h.admission.calls).toEqual(['admit', 'finish null']);
  });

  it('the vendor fails mid-stream, with usage: an error event ends the stream, the cost counted once', async () => {
    const h = start();
    await h.run();
    h.frame({ t: 'text', content: 'Hel' });
    h.frame({ t: 'error', error: { status: 502, code: 'upstream_error', message: 'cut', usage: { prompt_tokens: 10, completion_tokens: 1 } } });
    await tick();
    expect(h.admission.calls).toEqual(['admit', 'finish 28']);
    expect(h.res.status).toBe('200 OK');
    expect(streamError(h.res.body)).toBe('upstream_error');
  });

  it('the client leaves mid-stream: the worker is told to stop, and its terminal frame is counted once', async () => {
    const h = start();
    await h.run();
    h.frame({ t: 'text', content: 'Hel' });
    await tick();
    h.abort();
    expect(h.cancels).toEqual([h.requestId]);
    expect(h.admission.calls).toEqual(['admit']); // the worker still owes its end
    h.frame({ t: 'error', error: { status: 499, code: 'cancelled', message: 'cancelled', usage: { prompt_tokens: 10, completion_tokens: 2 } } });
    h.frame(DONE);
    await tick();
    expect(h.admission.calls).toEqual(['admit', 'finish 36']);
    expect(h.finished).toEqual([499]);
    expect(h.router.size).toBe(0);
  });

  it('the client leaves mid-stream and the worker never ends: the idle timeout counts the end as unknown, once', async () => {
    const h = start({ idleMs: 30 });
    await h.run();
    h.frame({ t: 'text', content: 'Hel' });
    await tick();
    h.abort();
    await new Promise((r) => setTimeout(r, 120));
    h.frame(DONE); // too late: no route
    expect(h.admission.calls).toEqual(['admit', 'finish null']);
    expect(h.router.size).toBe(0);
  });

  it('the stream goes quiet (idle timeout): 504 as the last event, the end counted as unknown; a late end is not counted again', async () => {
    const h = start({ idleMs: 30 });
    await h.run();
    h.frame({ t: 'text', content: 'Hel' });
    await new Promise((r) => setTimeout(r, 120));
    expect(h.cancels).toEqual([h.requestId]);
    h.frame(DONE);
    await tick();
    expect(h.admission.calls).toEqual(['admit', 'finish null']);
    expect(streamError(h.res.body)).toBe('upstream_timeout');
  });

  it('a malformed frame: 502, the end counted as unknown', async () => {
    const h = start();
    await h.run();
    h.router.deliverLocal(h.router.replySubject(h.requestId), Buffer.from('d0\n{"finish_reason":1}'));
    await tick();
    expect(h.res.status).toBe('502 Bad Gateway');
    expect(h.admission.calls).toEqual(['admit', 'finish null']);
  });

  it('the client reads too slowly: cut off, the worker told to stop, its end counted once', async () => {
    const h = start({ bufferLimit: 64 });
    h.res.writable = false; // the socket takes nothing more after the first write
    await h.run();
    h.frame({ t: 'text', content: 'Hel' });
    await tick();
    for (let i = 0; i < 10; i++) h.frame({ t: 'text', content: 'lo lo lo lo lo' });
    await tick();
    expect(h.res.closed).toBe(true);
    expect(h.cancels).toEqual([h.requestId]);
    h.frame(DONE);
    await tick();
    expect(h.admission.calls).toEqual(['admit', 'finish 60']);
  });

  describe('dispatch to worker processes', () => {
    const remote = { model: 'acme/remote', messages: [{ role: 'user', content: 'hi' }], stream: true, max_tokens: 50 };

    it('a worker takes the job and ends it: the cost counted once', async () => {
      const h = start({ body: remote });
      const running = h.run();
      await tick();
      h.tickets[0].resolve({ worker: 'w-1' });
      await running;
      h.frame({ t: 'text', content: 'Hi' });
      h.frame(DONE);
      await tick();
      expect(h.admission.calls).toEqual(['admit', 'finish 60']);
    });

    for (const [name, err, status] of [
      ['no worker serves the pool', errors.noWorker('remote'), '503 Service Unavailable'],
      ['every worker stays busy', errors.overloaded(2), '503 Service Unavailable'],
      ['the worker refuses the job (its catalog differs)', errors.workerRefused('fingerprint mismatch'), '503 Service Unavailable'],
      ['the door shuts down while it waits', errors.shuttingDown(), '503 Service Unavailable'],
    ] as const) {
      it(`${name}: the hold goes back once, before the answer`, async () => {
        const h = start({ body: remote });
        const running = h.run();
        await tick();
        h.tickets[0].reject(err);
        await running;
        expect(h.admission.calls).toEqual(['admit', 'release']);
        expect(h.res.status).toBe(status);
      });
    }

    it('no worker acknowledges in time: 504, and the hold waits for what becomes of the job', async () => {
      const h = start({ body: remote });
      const running = h.run();
      await tick();
      h.tickets[0].reject(errors.timeout('No worker acknowledged the request in time.'));
      await running;
      expect(h.admission.calls).toEqual(['admit']);
      expect(h.res.status).toBe('504 Gateway Timeout');
    });

    it('after a 504 for a late ack, the worker refuses the job it read too late: the hold goes back once', async () => {
      const h = start({ body: remote });
      const running = h.run();
      await tick();
      h.tickets[0].reject(errors.timeout('No worker acknowledged the request in time.'));
      await running;
      h.tickets[0].late!({ taken: false, refused: true });
      h.tickets[0].late!({ taken: false, refused: false });
      await tick();
      expect(h.admission.calls).toEqual(['admit', 'release']);
      expect(h.published).toEqual([]);
    });

    it('after a 504 for a late ack, a worker took the job all the same: it is cancelled there, its end counted as unknown', async () => {
      const h = start({ body: remote });
      const running = h.run();
      await tick();
      h.tickets[0].reject(errors.timeout('No worker acknowledged the request in time.'));
      await running;
      h.tickets[0].late!({ taken: true, worker: 'w-late' });
      expect(h.admission.calls).toEqual(['admit', 'finish null']);
      expect(h.published).toEqual([`catraca.cancel.w-late.${h.requestId}`]);
    });

    it('after a 504 for a late ack, nothing heard of the job: its worst case stays counted', async () => {
      const h = start({ body: remote });
      const running = h.run();
      await tick();
      h.tickets[0].reject(errors.timeout('No worker acknowledged the request in time.'));
      await running;
      h.tickets[0].late!({ taken: false, refused: false });
      expect(h.admission.calls).toEqual(['admit', 'finish null']);
    });

    it('the client leaves while the job waits for a worker: the job is dropped, the hold goes back once', async () => {
      const h = start({ body: remote });
      const running = h.run();
      await tick();
      h.abort();
      await running;
      expect(h.admission.calls).toEqual(['admit', 'release']);
      expect(h.finished).toEqual([499]);
    });

    it('the client leaves while the job is on its way and a worker takes it: stopped there, its end counted once', async () => {
      const h = start({ body: remote });
      const running = h.run();
      await tick();
      h.s.aborted = true; // the dispatcher's attempt was already sent: its answer decides
      h.tickets[0].resolve({ worker: 'w-1' });
      await running;
      expect(h.published).toEqual([subjects.cancel('w-1', h.requestId)]);
      h.frame({ t: 'error', error: { status: 499, code: 'cancelled', message: 'c', usage: { prompt_tokens: 10, completion_tokens: 0 } } });
      await tick();
      expect(h.admission.calls).toEqual(['admit', 'finish 20']);
    });

    it('the job is larger than NATS takes: 413, the hold goes back once, nothing sent', async () => {
      const h = start({ body: remote, maxPayload: 200 });
      await h.run();
      expect(h.res.status).toBe('413 Payload Too Large');
      expect(h.admission.calls).toEqual(['admit', 'release']);
      expect(h.tickets).toEqual([]);
    });
  });

  it('the job cannot be built (the protocol throws): the hold goes back once, 500', async () => {
    const broken = {
      ...chat,
      job: () => {
        throw new Error('translation failed');
      },
    } as unknown as Protocol<ParsedRequest>;
    const h = start({ protocol: broken });
    await h.run();
    expect(h.res.status).toBe('500 Internal Server Error');
    expect(h.admission.calls).toEqual(['admit', 'release']);
  });

  describe('fallback models', () => {
    it('the first model has no worker: the next keeps the hold, its end counted once', async () => {
      const h = start({ body: { models: ['acme/remote', 'acme/remote-backup'], messages: [{ role: 'user', content: 'hi' }], stream: true, max_tokens: 50 } });
      const running = h.run();
      await tick();
      h.tickets[0].reject(errors.noWorker('remote'));
      await running;
      await tick();
      expect(h.tickets.map((t) => t.job.model.id)).toEqual(['acme/remote', 'acme/remote-backup']);
      h.tickets[1].resolve({ worker: 'w-2' });
      await tick();
      h.frame(DONE);
      await tick();
      expect(h.admission.calls).toEqual(['admit', 'finish 60']);
    });

    it('the first model fails as retryable before its first byte: the next carries its cost, the end counted once', async () => {
      const h = start({ body: { models: ['acme/small', 'acme/backup'], messages: [{ role: 'user', content: 'hi' }], stream: true, max_tokens: 50 } });
      await h.run();
      h.frame({ t: 'error', error: { status: 503, code: 'upstream_unavailable', message: 'down', retryable: true, extra_cost: '20' } });
      await tick();
      expect(h.localJobs.map((j) => [j.model.id, j.carry_cost, j.fallback])).toEqual([
        ['acme/small', undefined, true],
        ['acme/backup', '20', undefined],
      ]);
      h.frame({ t: 'done', done: { ...DONE.done, extra_cost: '20' } });
      await tick();
      expect(h.admission.calls).toEqual(['admit', 'finish 80']);
      expect(h.res.status).toBe('200 OK');
    });

    it('a retryable failure after bytes reached the client: answered as the error, not retried, the hold goes back once (not charged)', async () => {
      const h = start({ body: { models: ['acme/small', 'acme/backup'], messages: [{ role: 'user', content: 'hi' }], stream: true, max_tokens: 50 } });
      await h.run();
      h.frame({ t: 'text', content: 'Hel' });
      h.frame({ t: 'error', error: { status: 502, code: 'upstream_error', message: 'cut', retryable: true, extra_cost: '20' } });
      await tick();
      expect(h.localJobs).toHaveLength(1);
      expect(h.admission.calls).toEqual(['admit', 'release']);
      expect(streamError(h.res.body)).toBe('upstream_error');
    });

    it('the client leaves during a fallback: the retryable end gives the hold back once', async () => {
      const h = start({ body: { models: ['acme/small', 'acme/backup'], messages: [{ role: 'user', content: 'hi' }], stream: true, max_tokens: 50 } });
      await h.run();
      h.abort();
      h.frame({ t: 'error', error: { status: 499, code: 'cancelled', message: 'c', retryable: true, extra_cost: '20' } });
      await tick();
      expect(h.localJobs).toHaveLength(1);
      expect(h.admission.calls).toEqual(['admit', 'release']);
    });
  });
});
