import { z } from 'zod';
import { parseCidrList } from './auth/client-address.ts';

// Every process reads its settings from the environment through this one schema, so the
// defaults documented in docs/operations.md ("Configuration") live in exactly one place.
const int = (def: number) => z.coerce.number().int().nonnegative().default(def);
const dbPassword = z
  .string()
  .regex(/^[A-Za-z0-9._~-]+$/, 'URL-safe characters only (letters, digits, . _ ~ -)')
  .optional();

// Portal and Pix settings (documented in docs/operations.md and .env.example). Nothing defaults
// to the simulator: PIX_PROVIDER must be given (bcb with a complete configuration), unless
// CATRACA_DEV=1 (what `npm start` sets) asks for the development setup — the built-in PSP
// simulator and its "pay" button, on a loopback address only (src/portal/config.ts decides).
const bool = (def: boolean) =>
  z.preprocess((v) => (v === undefined || v === '' ? def : ['1', 'true', 'yes', 'on'].includes(String(v).toLowerCase())), z.boolean());

/** A byte count, or `auto` (sized for the machine where it is used). */
// NOTIFY_RETRY_SCHEDULE: the delays between a notification's attempts, e.g. `5s,30s,2m,10m,1h,3h,6h,12h`.
const UNIT_MS: Record<string, number> = { ms: 1, s: 1000, m: 60_000, h: 3_600_000, d: 86_400_000 };

/** `5s,30s,2m` → [5000, 30000, 120000]; null when any item is not a whole number with a unit (ms, s, m, h, d) or the list is empty. */
export function parseSchedule(text: string): number[] | null {
  const items = text.split(',').map((x) => x.trim());
  const out: number[] = [];
  for (const item of items) {
    const m = /^(\d{1,9})(ms|s|m|h|d)$/.exec(item);
    if (!m) return null;
    out.push(Number(m[1]) * UNIT_MS[m[2]]);
  }
  return out.length > 0 && out.length <= 30 ? out : null;
}

/** A trusted-proxy list: comma-separated addresses, CIDRs and named ranges (loopback, linklocal, uniquelocal). */
const proxyList = z.string().superRefine((v, ctx) => {
  try {
    parseCidrList(v);
  } catch (err) {
    ctx.addIssue({
      code: 'custom',
      message: `a comma list of IP addresses, CIDRs or named ranges (loopback, linklocal, uniquelocal), e.g. 10.0.0.0/8, fd00::/8 (${(err as Error).message})`,
    });
  }
});
const autoBytes = z.preprocess((v) => (v === '' ? undefined : v), z.union([z.literal('auto'), z.coerce.number().int().positive()]).default('auto'));

export const PortalEnvSchema = z.object({
  PORTAL_PUBLIC_URL: z.string().url().optional(),
  GATEWAY_PUBLIC_URL: z.string().default('http://127.0.0.1:8080/v1'),
  /**
   * The reverse proxies in front of the portal, as a comma list of addresses or CIDRs (`10.0.0.0/8, fd00::/8`):
   * only a request whose peer is one of them has its X-Forwarded-For (walked from the right, skipping these
   * addresses) and X-Forwarded-Proto believed. Empty: nobody's (src/web/proxy.ts).
   */
  PORTAL_TRUSTED_PROXIES: proxyList.optional(),
  /** Deprecated: `1` means PORTAL_TRUSTED_PROXIES=127.0.0.0/8,::1 (a proxy on this host); added to PORTAL_TRUSTED_PROXIES. */
  PORTAL_TRUST_PROXY: bool(false),
  /** Sign-up attempts accepted per client address per hour (well-formed forms; a taken e-mail counts). */
  PORTAL_SIGNUP_LIMIT_PER_HOUR: z.coerce.number().int().positive().default(10),
  /** Days a sign-up whose address was never verified is kept, then deleted with its unused company (src/portal/cleanup.ts); 0 = forever. */
  PORTAL_UNVERIFIED_SIGNUP_DAYS: int(7),
  /** auto: Secure cookies when the request came over TLS (directly or via a trusted proxy). */
  PORTAL_SECURE_COOKIES: z.enum(['auto', 'true', 'false']).default('auto'),
  /** Local development (set by `npm start`): PIX_PROVIDER defaults to the simulator, the portal to 127.0.0.1. */
  CATRACA_DEV: bool(false),
  /** Dev mode shows the "pay with the simulator" button. Defaults to on with the simulator; needs it. */
  PORTAL_DEV_MODE: z.enum(['1', '0', 'true', 'false']).optional(),
  /** No default: bcb in production; simulator only on loopback (CATRACA_DEV=1 implies it). */
  PIX_PROVIDER: z.enum(['simulator', 'bcb']).optional(),
  /** BCB API Pix of the PSP, e.g. https://api.psp.example/v2 */
  PIX_API_URL: z.string().url().optional(),
  PIX_OAUTH_URL: z.string().url().optional(),
  PIX_CLIENT_ID: z.string().optional(),
  PIX_CLIENT_SECRET: z.string().optional(),
  /** Our Pix key (chave) that receives the charges. Required with bcb; the simulator uses SIMULATOR_PIX_KEY. */
  PIX_KEY: z.string().optional(),
  /** mTLS with the PSP: PEM files of the certificate it issued us. */
  PIX_CERT_FILE: z.string().optional(),
  PIX_CERT_KEY_FILE: z.string().optional(),
  PIX_CA_FILE: z.string().optional(),
  /** Our account the Pix Automático charges pay into (cobr.recebedor): agency (up to 4 digits), number, type. All three, or none (recurring top-ups off; the simulator has its own). */
  PIX_ACCOUNT_AGENCY: z
    .string()
    .regex(/^\d{1,4}$/)
    .optional(),
  PIX_ACCOUNT_NUMBER: z
    .string()
    .regex(/^[0-9A-Za-z-]{1,20}$/)
    .optional(),
  PIX_ACCOUNT_TYPE: z.enum(['CORRENTE', 'POUPANCA', 'PAGAMENTO']).optional(),
  PIX_MERCHANT_NAME: z.string().default('CATRACA'),
  PIX_MERCHANT_CITY: z.string().default('SAO PAULO'),
  /** Secret in the webhook URL; generated once per installation and kept in portal_settings when unset. */
  PIX_WEBHOOK_SECRET: z.string().min(16).optional(),
  /** Public base URL the PSP calls back (…/webhooks/pix/<secret>/pix); defaults to PORTAL_PUBLIC_URL or the portal's own URL. */
  PIX_WEBHOOK_BASE_URL: z.string().url().optional(),
  PIX_SIM_HOST: z.string().default('127.0.0.1'),
  PIX_SIM_PORT: z.coerce.number().int().nonnegative().default(0),
  PIX_CHARGE_EXPIRY_S: z.coerce.number().int().positive().default(3600),
  PIX_RECONCILE_INTERVAL_MS: z.coerce.number().int().nonnegative().default(30000),
  /** The BCB's PTAX OData service (src/fx/): the dollar's rate for USD-priced models. `npm start` points it at its simulator. */
  PTAX_URL: z.string().url().default('https://olinda.bcb.gov.br/olinda/servico/PTAX/versao/v1/odata'),
  /** Hour (São Paulo, 0–23) after which the console takes the day's PTAX and recomputes USD-priced models, business days. */
  PTAX_HOUR: z.coerce.number().int().min(0).max(23).default(14),
  /** Days the portal keeps rows of pix_webhook_events (the audit of authenticated webhook deliveries); 0 = forever. */
  PIX_WEBHOOK_RETENTION_DAYS: int(90),
  /**
   * Where the portal sends e-mail (address verification, notices): `smtp://user:pass@host:587` (STARTTLS when the
   * server offers it) or `smtps://…:465`. Unset: sign-up is closed, with a page saying e-mail is not configured.
   */
  SMTP_URL: z.string().url().optional(),
  /** The From of the portal's e-mails. */
  SMTP_FROM: z.string().default('catraca <no-reply@localhost>'),
  /** Development (`npm start`): the directory where the embedded SMTP sink keeps what it received, shown at /dev/mail (CATRACA_DEV=1 only). */
  DEV_MAIL_DIR: z.string().optional(),
  /** One webhook attempt at most (connection, response headers, the part of the body read); longer is a failed attempt (docs/notifications.md). */
  NOTIFY_WEBHOOK_TIMEOUT_MS: z.coerce.number().int().positive().default(15000),
  /** Bytes of a webhook response read at most; the rest is dropped with the connection. */
  NOTIFY_WEBHOOK_MAX_RESPONSE_BYTES: z.coerce.number().int().positive().default(65536),
  /** Delays between a notification's attempts after the first (webhooks and e-mails): whole numbers with ms, s, m, h or d; delivery fails once they are spent. */
  NOTIFY_RETRY_SCHEDULE: z
    .string()
    .default('5s,30s,2m,10m,1h,3h,6h,12h')
    .refine((v) => parseSchedule(v) !== null, 'a comma list of delays such as 5s,30s,2m,10m,1h,3h,6h,12h (at most 30)'),
  /**
   * Days the notification events, deliveries and delivery log are kept (0 = forever). At least 32:
   * an event's record is what keeps a key's limit_reached from being announced twice in one monthly window.
   */
  NOTIFY_RETENTION_DAYS: z.coerce
    .number()
    .int()
    .nonnegative()
    .default(35)
    .refine((v) => v === 0 || v >= 32, '0 (forever) or at least 32'),
  /**
   * Notas fiscais (NFS-e Nacional, src/nfse/, docs/nfse.md): `nacional` posts each DPS to Sefin
   * Nacional at NFSE_URL over mTLS with the A1 certificate; `simulator` runs the built-in Sefin
   * simulator (loopback; what `npm start` sets); `off` (the default) issues nothing.
   */
  NFSE_PROVIDER: z.enum(['nacional', 'simulator', 'off']).optional(),
  /** Sefin Nacional's base URL, under which catraca posts /nfse: https://sefin.nfse.gov.br/SefinNacional (production) or https://sefin.producaorestrita.nfse.gov.br/SefinNacional (restricted production). */
  NFSE_URL: z.string().url().optional(),
  /** The DPS's tpAmb: 1 production, 2 restricted production (homologação); must match NFSE_URL's environment. */
  NFSE_AMBIENTE: z.enum(['1', '2']).default('2'),
  /** PEM file of extra CA certificates trusted for Sefin's TLS (besides the system's). */
  NFSE_CA_FILE: z.string().optional(),
  /** The operator's ICP-Brasil A1 certificate (PKCS#12 file) and its password: the mTLS client certificate and the signing key. */
  NFSE_CERT_PFX: z.string().optional(),
  NFSE_CERT_PASSWORD: z.string().optional(),
  /** The operator's CNPJ (the prestador), as in the certificate. */
  NFSE_CNPJ: z.string().optional(),
  /** IBGE code (7 digits) of the operator's municipality: cLocEmi and the place of the service. */
  NFSE_MUNICIPIO: z
    .string()
    .regex(/^\d{7}$/, 'the 7-digit IBGE code')
    .optional(),
  /** The operator's inscrição municipal (IM), when its municipality has one for it. */
  NFSE_INSCRICAO_MUNICIPAL: z.string().min(1).max(15).optional(),
  /** The national service code (cTribNac, 6 digits: item, subitem, desdobro) and its description (xDescServ). */
  NFSE_SERVICE_CODE: z
    .string()
    .regex(/^\d{6}$/, 'the 6-digit cTribNac')
    .optional(),
  NFSE_SERVICE_DESCRIPTION: z.string().min(1).max(2000).default('Créditos pré-pagos de uso de API de modelos de linguagem'),
  /** The NBS code of the service (cNBS, 9 digits), required with the IBS/CBS group by the 2026 technical notes. */
  NFSE_NBS: z
    .string()
    .regex(/^\d{9}$/, 'the 9-digit NBS code')
    .optional(),
  /** The DPS series (1–5 digits); give catraca a series of its own if the CNPJ also issues elsewhere. */
  NFSE_SERIE: z
    .string()
    .regex(/^\d{1,5}$/)
    .default('1'),
  /** Simples Nacional (opSimpNac): 1 not opting, 2 MEI, 3 ME/EPP; NFSE_SN_REGIME (regApTribSN 1–3) with 3. */
  NFSE_SIMPLES_NACIONAL: z.enum(['1', '2', '3']).default('1'),
  NFSE_SN_REGIME: z.enum(['1', '2', '3']).optional(),
  /** Regime especial de tributação (regEspTrib): 0 none, 1–6, 9. */
  NFSE_REGIME_ESPECIAL: z.enum(['0', '1', '2', '3', '4', '5', '6', '9']).default('0'),
  /** The ISS rate in percent (pAliq, e.g. 2.00); unset: Sefin applies the municipality's. */
  NFSE_ISS_RATE: z
    .string()
    .regex(/^\d(?:[.,]\d{1,2})?$/, 'a percentage such as 2.00')
    .optional(),
  /** The IBS/CBS group (2026 tax reform, NT 004/2025): CST (3 digits), cClassTrib (6) and cIndOp (6); the group is sent when all three are set. */
  NFSE_IBSCBS_CST: z
    .string()
    .regex(/^\d{3}$/)
    .optional(),
  NFSE_IBSCBS_CLASS: z
    .string()
    .regex(/^\d{6}$/)
    .optional(),
  NFSE_IBSCBS_IND_OP: z
    .string()
    .regex(/^\d{6}$/)
    .optional(),
  /** topup: one note per credited top-up; monthly: one note per tenant and month of its top-ups (issued after the month ends, Brasília time). */
  NFSE_EMIT_ON: z.enum(['topup', 'monthly']).default('topup'),
  /** Days after issue within which a refunded top-up's note is cancelled (the municipality's parameter, E0835); later the console says what to do. */
  NFSE_CANCEL_DAYS: z.coerce.number().int().positive().default(30),
});

export const ConfigSchema = PortalEnvSchema.extend({
  /** One server or a comma-separated list (a cluster); credentials in the URL: nats://user:pass@host:4222 (src/bus/connect.ts). */
  NATS_URL: z.string().default('nats://127.0.0.1:4222'),
  /** Copies of the USAGE stream: `auto` = min(3, servers in the cluster), never fewer than it has; or 1–5 exactly. */
  USAGE_REPLICAS: z.preprocess((v) => (v === '' ? undefined : v), z.union([z.literal('auto'), z.coerce.number().int().min(1).max(5)]).default('auto')),
  /** Byte limit of the USAGE stream (work-queue retention, discard new): beyond it publishes are refused and retried by the workers, never older usage dropped. */
  USAGE_MAX_BYTES: z.coerce
    .number()
    .int()
    .positive()
    .default(1024 ** 3),
  /** Days the USAGE_LOG stream keeps each settled usage message: how far back a restored ledger can settle usage again (docs/operations.md, "Backup and restore"). */
  USAGE_LOG_RETENTION_DAYS: z.coerce.number().int().min(1).max(3650).default(8),
  /** Byte limit of the USAGE_LOG stream (limits retention, discard old): beyond it the oldest copies go first. */
  USAGE_LOG_MAX_BYTES: z.coerce
    .number()
    .int()
    .positive()
    .default(4 * 1024 ** 3),
  /**
   * A worker (or a door's in-process pools) gathers the usage of requests ending within this many
   * ms into one JetStream message; 0 = one message per event-loop turn. A process killed in that
   * window loses that usage (as it loses usage not yet acknowledged by JetStream).
   */
  USAGE_LINGER_MS: int(5),
  /** Metering logs at error level and sets catraca_usage_backlog_alarm while more usage messages than this wait (a message carries one request, or a worker's batch) to be settled; 0 = no alarm. */
  USAGE_BACKLOG_ALARM: int(10000),
  /** How often metering checks the USAGE backlog. */
  USAGE_BACKLOG_INTERVAL_MS: z.coerce.number().int().positive().default(5000),
  DATABASE_URL: z.string().default('postgres://postgres@127.0.0.1:5432/catraca'),
  GATEWAY_HOST: z.string().default('0.0.0.0'),
  GATEWAY_PORT: int(8080),
  /** Unset: 127.0.0.1 in development (CATRACA_DEV=1 or PIX_PROVIDER=simulator), else 0.0.0.0 (src/portal/config.ts). */
  PORTAL_HOST: z.string().optional(),
  PORTAL_PORT: int(8081),
  /**
   * The operator's console (src/console/): loopback by default, reached through a VPN or an SSH tunnel
   * (docs/console.md). Never on the front door's or the portal's port: it refuses to start there.
   */
  CONSOLE_HOST: z.string().default('127.0.0.1'),
  CONSOLE_PORT: int(8082),
  /** The console's URL as operators open it; https: Secure cookies and HSTS (e.g. behind a TLS proxy on the VPN). */
  CONSOLE_PUBLIC_URL: z.string().url().optional(),
  /** Reverse proxies in front of the console whose X-Forwarded-For counts (as PORTAL_TRUSTED_PROXIES); empty: nobody's. */
  CONSOLE_TRUSTED_PROXIES: proxyList.optional(),
  /** Largest accepted request body; larger gets 413. */
  MAX_BODY_BYTES: int(4 * 1024 * 1024),
  /** A request body still arriving this long after its headers gets 408 and its connection closed
   * (uWS's own 10 s idle timeout restarts with every chunk, so a trickling sender needs this bound). */
  BODY_TIMEOUT_MS: int(30000),
  /** Interval of `: processing` SSE comments (and keepalive frames) while no token has arrived. */
  KEEPALIVE_MS: int(2000),
  /** No frame from the worker for this long → the request fails with 504. Workers send a keepalive
   * frame whenever a stream is quiet for KEEPALIVE_MS, so this detects a dead worker. */
  STREAM_IDLE_TIMEOUT_MS: int(15000),
  /** Per-request SSE bytes buffered for a slow client before the request is cancelled. */
  MAX_CLIENT_BUFFER_BYTES: int(1024 * 1024),
  /** Whole-request ceiling; the hold expires after this plus HOLD_GRACE_MS. */
  REQUEST_TIMEOUT_MS: int(10 * 60 * 1000),
  HOLD_GRACE_MS: int(5 * 60 * 1000),
  HOLD_SWEEP_INTERVAL_MS: int(10000),
  /** SIGTERM: how long the front door waits for in-flight streams before exiting. */
  DRAIN_TIMEOUT_MS: int(30000),
  /** How long a front door admits a busy key's requests from one balance lease (0: every request is its own hold in PostgreSQL). */
  ADMISSION_LEASE_MS: int(2000),
  /** A lease is granted only while the tenant's (and key's) available balance is at least this many times the lease. */
  ADMISSION_LEASE_RICHNESS: int(16),
  /** A key gets a lease once it sends this many requests within one lease window; slower keys hold per request (a lease would cost more PostgreSQL calls than it saves). */
  ADMISSION_LEASE_AFTER: int(4),
  /** How long a job may wait in a front door for a worker slot when every worker of its pool is busy (then 503 overloaded). */
  DISPATCH_WAIT_MS: int(30000),
  /** Jobs waiting for a worker slot in one front door, at most (more: 503 at once). */
  DISPATCH_MAX_WAITING: int(20000),
  /** … of which at most this many from one tenant (its burst waits behind its own backlog). */
  DISPATCH_MAX_WAITING_PER_TENANT: int(5000),
  /**
   * Bytes of job payload (up to NATS max_payload each) waiting in one front door for a worker slot,
   * at most (more: 503 at once). `auto`: an eighth of the memory the process may use (its cgroup
   * limit, else the machine's), leaving the rest to streams, buffers and the heap.
   */
  DISPATCH_MAX_WAITING_BYTES: autoBytes,
  /** … of which at most this many from one tenant. `auto`: a quarter of DISPATCH_MAX_WAITING_BYTES (as 5 000 of 20 000 jobs). */
  DISPATCH_MAX_WAITING_BYTES_PER_TENANT: autoBytes,
  /** How long a query waits for a PostgreSQL connection (pool exhausted or database gone) before 503. */
  DB_CONNECT_TIMEOUT_MS: int(3000),
  /** PostgreSQL cancels a statement running longer than this (front door, metering); 0 = no limit. */
  DB_STATEMENT_TIMEOUT_MS: int(10000),
  /** PostgreSQL connections of a front door's (and of metering's) main pool; size max_connections for all processes. */
  DB_POOL_SIZE: z.coerce.number().int().positive().default(20),
  /**
   * Passwords of the PostgreSQL roles of the front door, workers, metering, portal and admin CLI
   * (catraca_gateway, catraca_worker, catraca_metering, catraca_portal, catraca_admin; see
   * docs/operations.md, "Least privilege"). The migration runner, connected as a superuser, gives
   * each role given here that password (compose passes them to its `migrate` service); each
   * process connects with its own DATABASE_URL. `npm start` uses them instead of the ones it
   * derives. URL-safe characters only: they go into URLs.
   */
  DB_GATEWAY_PASSWORD: dbPassword,
  DB_WORKER_PASSWORD: dbPassword,
  DB_METERING_PASSWORD: dbPassword,
  DB_PORTAL_PASSWORD: dbPassword,
  DB_ADMIN_PASSWORD: dbPassword,
  /** The password of catraca_console, the operator's console's role (set like the others above). */
  DB_CONSOLE_PASSWORD: dbPassword,
  /**
   * How long POST /v1/responses keeps a response it stores (`store`, default true) for
   * `previous_response_id` and GET /v1/responses/{id}; metering's sweeper deletes expired ones.
   * 0 turns storing off: `store: true` is accepted and nothing is stored.
   */
  RESPONSES_RETENTION_DAYS: int(30),
  /** Days a file of the Files API (POST /v1/files, a batch's output and error files) is kept; metering's sweeper deletes expired ones. */
  BATCH_RETENTION_DAYS: z.coerce.number().int().min(1).max(3650).default(30),
  /** Largest file POST /v1/files takes (the multipart body may be 64 KiB more); larger gets 413. */
  FILES_MAX_BYTES: int(64 * 1024 * 1024),
  /** Most request lines in one batch file; more gets 400 `too_many_lines`. */
  BATCH_MAX_LINES: z.coerce.number().int().positive().default(50000),
  /** Lines of batches (`queue` mode) each front door runs at once, at most. */
  BATCH_CONCURRENCY: z.coerce.number().int().positive().default(4),
  /**
   * How long a batch line's queue message waits for its runner's ack before another front door takes
   * it (and, finding it claimed, ends it `line_interrupted`). 0: DISPATCH_WAIT_MS + REQUEST_TIMEOUT_MS
   * + 60 s, longer than any line can run. A shorter wait may end a line still running elsewhere as
   * interrupted (its answer then is not recorded; it is billed all the same): tests only.
   */
  BATCH_ACK_WAIT_MS: int(0),
  /** Unfinished batches (OpenAI's and Anthropic's) a tenant may have at once; one more is a 429 `batch_limit_exceeded`. */
  BATCH_MAX_IN_FLIGHT: z.coerce.number().int().positive().default(100),
  /** Request lines not ended yet of a tenant's unfinished batches, all together, at most; a batch that would pass it is a 429 `batch_limit_exceeded`. */
  BATCH_MAX_LINES_IN_FLIGHT: z.coerce.number().int().positive().default(500000),
  /** `vendor` batch mode: how often a vendor's batch is polled (ms), and the most lines submitted in one vendor batch (a chunk). */
  BATCH_VENDOR_POLL_MS: int(10000),
  BATCH_VENDOR_CHUNK_LINES: z.coerce.number().int().positive().max(5000).default(1000),
  /** A front door takes no batch line while this many interactive requests are in flight there. */
  BATCH_PAUSE_IN_FLIGHT: z.coerce.number().int().positive().default(16),
  /** Key records cached in each front door; revocation is pushed over NATS, this bounds staleness otherwise. */
  KEY_CACHE_TTL_MS: int(30000),
  /**
   * PostgreSQL lookups of API keys a front door runs at once, on a pool of this many connections of
   * their own (never admission's): keys known to the door are refreshed first; unknown ones wait at
   * most 1 s in a queue of 256, then 503 `key_lookup_busy`.
   */
  KEY_LOOKUP_CONCURRENCY: z.coerce.number().int().positive().default(4),
  /**
   * Lookups of API keys a front door does not know, per client address (IPv6: per /64) and minute;
   * also the burst. A lookup that finds a key gives its token back, so this counts failed
   * authentications; past it 429 `rate_limit_exceeded` before any database read. 0 = no limit.
   */
  GATEWAY_UNKNOWN_KEYS_PER_MINUTE: int(60),
  /**
   * Reverse proxies in front of the front door (comma-separated CIDRs or addresses, e.g.
   * `10.0.0.0/8,fd00::/8`): from these peers only, the client address is the right-most
   * X-Forwarded-For entry that is not a trusted proxy. Empty: the TCP peer is the client.
   */
  GATEWAY_TRUSTED_PROXIES: proxyList.default(''),
  /**
   * Pools a front door serves in its own process (comma list, e.g. `openai,anthropic`): no NATS hop
   * per token; the door then needs the vendors' keys (WORKER_UPSTREAM_KEYS). Empty: every job goes
   * to worker processes over NATS. See docs/design.md, "In-process pools".
   */
  GATEWAY_LOCAL_POOLS: z.string().default(''),
  /** Jobs the door's in-process pools run at once before the rest go to worker processes; 0 = WORKER_CONCURRENCY, or sized like a worker's with two sockets per stream. */
  GATEWAY_LOCAL_CONCURRENCY: int(0),
  WORKER_POOLS: z.string().default('sim'),
  /** Jobs one worker runs at once; 0 = sized from WORKER_STREAM_MEMORY_MB and the open-file limit (src/runner/capacity.ts). */
  WORKER_CONCURRENCY: int(0),
  /** Memory a worker may spend on in-flight streams (~32 KiB each), when WORKER_CONCURRENCY is 0. */
  WORKER_STREAM_MEMORY_MB: int(1024),
  /** The only environment variables a worker reads upstream keys from; a catalog entry naming any other is refused. */
  WORKER_UPSTREAM_KEYS: z.string().default('OPENAI_API_KEY,ANTHROPIC_API_KEY,OPENROUTER_API_KEY'),
  UPSTREAM_TIMEOUT_MS: int(120000),
  UPSTREAM_CONNECT_TIMEOUT_MS: int(10000),
  /**
   * An attempt that has another deployment (or another model of the request's `models`) to go to
   * gives up on a vendor that sends nothing for this long, and the next one is tried. The last
   * attempt waits up to UPSTREAM_TIMEOUT_MS.
   */
  UPSTREAM_FIRST_BYTE_TIMEOUT_MS: int(60000),
  SIM_FIRST_TOKEN_MS: int(0),
  SIM_TOKENS_PER_SECOND: int(0),
  /** Usage messages settled per PostgreSQL transaction, at most (batches form under load). */
  METERING_BATCH: int(128),
  /** How long a usage message waits for others to share its settlement transaction. */
  METERING_LINGER_MS: int(20),
  /** Unacked usage (its metering process died) is redelivered after this long. */
  METERING_ACK_WAIT_MS: int(10000),
  /** Prometheus /metrics on an internal address; unset = not served. `0` = any free port. */
  METRICS_HOST: z.string().default('127.0.0.1'),
  METRICS_PORT: z.coerce.number().int().nonnegative().optional(),
  LOG_LEVEL: z.enum(['debug', 'info', 'warn', 'error', 'silent']).default('info'),
  /** json: one JSON object per line on stderr (default); pretty: readable lines (what `npm start` shows). See src/log.ts. */
  LOG_FORMAT: z.enum(['json', 'pretty']).default('json'),
  CATRACA_INSTANCE: z.string().optional(),
});

export type Config = z.infer<typeof ConfigSchema>;

/** An empty variable is an unset one (compose passes `${PIX_WEBHOOK_SECRET:-}` as ""). */
export function unsetEmpty(env: Record<string, string | undefined>): Record<string, string | undefined> {
  return Object.fromEntries(Object.entries(env).filter(([, v]) => v !== ''));
}

/** Every process's settings, parsed once in its main.ts and passed down. */
export function loadConfig(env: Record<string, string | undefined> = process.env): Config {
  const parsed = ConfigSchema.safeParse(unsetEmpty(env));
  if (!parsed.success) {
    const issues = parsed.error.issues.map((i) => `${i.path.join('.')}: ${i.message}`).join('; ');
    throw new Error(`invalid configuration: ${issues}`);
  }
  return parsed.data;
}
