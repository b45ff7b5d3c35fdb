// The portal's "Lotes" page (issue 30): a tenant's batches, OpenAI's and Anthropic's, newest first
// with paging, their counts, the spend of their lines (the ledger's debits naming the batch, to the
// centavo) and their result files. Every member sees the page; the files (prompts and answers)
// only owners, admins and developers download — billing gets 403 — and another tenant's batch is
// a 404 to everyone. The same roles cancel a batch still running ("Cancelar": the API's cancel); the
// front door's runners and vendor loop then end it, run here on the batch as the door runs them. Fixture rows of known content (batches-fixture.ts) as the API and its runner
// leave them; the portal reads them as catraca_portal (migration 089's grants).
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { ROLES, type Role } from '../../src/db/members.ts';
import { createPool } from '../../src/db/pool.ts';
import { derivedRoleUrl } from '../../src/db/roles.ts';
import { type Portal, startPortal } from '../../src/portal/server.ts';
import { hashPassword } from '../../src/web/sign-in.ts';
import { finalizeIfDone, NOT_RUN } from '../../src/batch/runner.ts';
import type { VendorBatchRequest } from '../../src/batch/vendor-wire.ts';
import { VendorBatches } from '../../src/batch/vendor.ts';
import type { RunnerDoor } from '../../src/batch/runner.ts';
import { decodeJson, encode } from '../../src/bus/messages.ts';
import {
  type BatchWorld,
  batchWorld,
  brDay,
  ERRORS_JSONL,
  enDay,
  MESSAGE_INPUT,
  manyBatches,
  OUTPUT_JSONL,
  QUEUED_INPUT,
  type RunningBatches,
  runningBatches,
} from './batches-fixture.ts';
import { PortalClient } from './client.ts';

const db = createPool(process.env.DATABASE_URL!, 4);
const portalDb = createPool(derivedRoleUrl(process.env.DATABASE_URL!, 'portal'), 4);
let portal: Portal;
let w: BatchWorld;
let other: BatchWorld;

beforeAll(async () => {
  portal = await startPortal({ db: portalDb, nc: null, reconcileIntervalMs: 0, env: { PIX_PROVIDER: 'simulator' } });
  const hash = await hashPassword('correct horse battery');
  w = await batchWorld(db, hash);
  other = await batchWorld(db, hash);
});
afterAll(async () => {
  await portal?.close();
  await db.end();
  await portalDb.end();
});

const as = (x: BatchWorld, role: Role) => {
  const c = new PortalClient(portal.url);
  c.cookies.set('catraca_session', x.sessions[role]);
  return c;
};

/** The rows of a table of the page as arrays of cell texts (tags dropped). */
function tableRows(page: string, testid: string): string[][] {
  const table = new RegExp(`<table[^>]* data-testid="${testid}">([\\s\\S]*?)</table>`).exec(page)?.[1];
  if (!table) throw new Error(`no table ${testid}`);
  return [...table.matchAll(/<tr[^>]*>([\s\S]*?)<\/tr>/g)].map((tr) =>
    [...tr[1].matchAll(/<t[hd][^>]*>([\s\S]*?)<\/t[hd]>/g)].map((td) =>
      td[1]
        .replace(/<br>/g, ' ')
        .replace(/<[^>]+>/g, '')
        .replace(/\s+/g, ' ')
        .trim(),
    ),
  );
}

describe('the Lotes page', () => {
  it('an owner: the batches newest first, counts, ended time, spend to the centavo, and the files there are', async () => {
    const page = await as(w, 'owner').get('/batches');
    expect(page.status).toBe(200);
    expect(tableRows(page.text, 'batches')).toEqual([
      ['Lote', 'API · endpoint', 'Situação', 'Criado em Encerrado em', 'Linhas', 'Concluídas', 'Com erro', 'Gasto', 'Arquivos', 'Ações'],
      // 4 999 µBRL: R$ 0,00 to the centavo; still running, no files (its input file is gone), and it may be cancelled
      [w.running, 'OpenAI /v1/embeddings', 'Em andamento', `${brDay(4)}, 09:00`, '1.000', '10', '0', 'R$ 0,00', '', 'Cancelar'],
      // 15 005 µBRL rounds half up to R$ 0,02
      [w.messages, 'Anthropic /v1/messages', 'Concluído', `${brDay(3)}, 11:30 ${brDay(3)}, 11:31`, '2', '1', '1', 'R$ 0,02', 'Resultados', ''],
      // 1 234 567 + 2 345 678 = 3 580 245 µBRL; the online debit of 7 R$ is no batch's
      [w.chat, 'OpenAI /v1/chat/completions', 'Concluído', `${brDay(2)}, 10:00 ${brDay(2)}, 10:07`, '3', '2', '1', 'R$ 3,58', 'Saída · Erros', ''],
    ]);
    expect(page.text).toContain(`href="/batches/${w.running}/cancel"`);
    expect(page.text).toContain(`href="/batches/${w.chat}/output"`);
    expect(page.text).toContain(`href="/batches/${w.chat}/errors"`);
    expect(page.text).toContain(`href="/batches/${w.messages}/results"`);
    // the nav links the page
    expect(page.text).toContain('<a href="/batches">Lotes</a>');
    // another tenant's batches are not listed
    expect(page.text).not.toContain(other.chat);
  });

  it('in English: R$ 3.58', async () => {
    const page = await as(w, 'owner').get('/batches?lang=en');
    const rows = tableRows(page.text, 'batches');
    expect(rows[0]).toEqual(['Batch', 'API · endpoint', 'Status', 'Created Ended', 'Lines', 'Completed', 'Failed', 'Spend', 'Files', 'Actions']);
    expect(rows[3].slice(2)).toEqual(['Completed', `${enDay(2)}, 10:00 AM ${enDay(2)}, 10:07 AM`, '3', '2', '1', 'R$ 3.58', 'Output · Errors', '']);
    expect(rows[1].at(-1)).toBe('Cancel');
  });

  it('every role sees the page; billing sees no Files nor Actions column (it may neither download nor cancel)', async () => {
    const got: Record<string, [number, number]> = {};
    for (const role of ROLES) {
      const page = await as(w, role).get('/batches');
      got[role] = [page.status, tableRows(page.text, 'batches')[0].length];
    }
    expect(got).toEqual({ owner: [200, 10], admin: [200, 10], billing: [200, 8], developer: [200, 10] });
    expect((await as(w, 'billing').get('/batches')).text).not.toContain('/cancel');
  });

  it('an output file expired: no link, and its download is a 404', async () => {
    await db.query("update batch_files set expires_at = now() - interval '1 second' where id = $1", [other.output]);
    const page = await as(other, 'owner').get('/batches');
    expect(tableRows(page.text, 'batches')[3].at(-2)).toBe('Erros');
    expect((await as(other, 'owner').get(`/batches/${other.chat}/output`)).status).toBe(404);
    expect((await as(other, 'owner').get(`/batches/${other.chat}/errors`)).text).toBe(ERRORS_JSONL);
  });

  it('a tenant without batches', async () => {
    const x = await batchWorld(db, await hashPassword('x y z w'));
    await db.query('delete from batches where tenant_id = $1', [x.tenantId]);
    const page = await as(x, 'developer').get('/batches');
    expect(tableRows(page.text, 'batches')[1]).toEqual(['Nada por aqui ainda.']);
  });

  it('pages of 20, newest first', async () => {
    const x = await batchWorld(db, await hashPassword('x y z w'));
    await db.query('delete from batches where tenant_id = $1', [x.tenantId]);
    const ids = await manyBatches(db, x.tenantId, 25);
    const c = as(x, 'billing');
    const p1 = await c.get('/batches');
    expect(
      tableRows(p1.text, 'batches')
        .slice(1)
        .map((r) => r[0]),
    ).toEqual(ids.slice(5).reverse());
    expect(p1.text).toContain('href="/batches?page=2" data-testid="next"');
    expect(p1.text).not.toContain('data-testid="prev"');
    const p2 = await c.get('/batches?page=2');
    expect(
      tableRows(p2.text, 'batches')
        .slice(1)
        .map((r) => r[0]),
    ).toEqual(ids.slice(0, 5).reverse());
    expect(p2.text).toContain('href="/batches?page=1" data-testid="prev"');
    expect(p2.text).not.toContain('data-testid="next"');
  });
});

describe('downloads', () => {
  it('the output and error files byte for byte, and an Anthropic batch’s results as the API answers them', async () => {
    const out = await as(w, 'developer').get(`/batches/${w.chat}/output`);
    expect([out.status, out.headers.get('content-type'), out.headers.get('content-disposition'), out.headers.get('cache-control'), out.text]).toEqual([
      200,
      'application/jsonl',
      `attachment; filename="${w.chat}_output.jsonl"`,
      'private, no-store',
      OUTPUT_JSONL,
    ]);
    expect((await as(w, 'admin').get(`/batches/${w.chat}/errors`)).text).toBe(ERRORS_JSONL);
    const results = await as(w, 'owner').get(`/batches/${w.messages}/results`);
    expect(results.status).toBe(200);
    expect(results.text).toBe(
      '{"custom_id":"m-1","result":{"type":"succeeded","message":{"type":"message","content":[{"text":"oi","type":"text"}]}}}\n' +
        '{"custom_id":"m-2","result":{"type":"errored","error":{"type":"error","error":{"type":"not_found_error","message":"no such model"}}}}\n',
    );
  });

  it('who may: owner, admin and developer 200; billing 403; another tenant’s batch 404 to every role', async () => {
    const got: Record<string, number[]> = {};
    for (const role of ROLES) {
      got[role] = [
        (await as(w, role).get(`/batches/${w.chat}/output`)).status,
        (await as(w, role).get(`/batches/${w.messages}/results`)).status,
        (await as(w, role).get(`/batches/${other.chat}/errors`)).status,
        (await as(w, role).get(`/batches/${other.messages}/results`)).status,
      ];
    }
    expect(got).toEqual({ owner: [200, 200, 404, 404], admin: [200, 200, 404, 404], billing: [403, 403, 403, 403], developer: [200, 200, 404, 404] });
    // the 403 page says why
    expect((await as(w, 'billing').get(`/batches/${w.chat}/output`)).text).toContain('Financeiro');
  });

  it('a file the batch has not: the running batch’s output, results of an OpenAI batch, output of an Anthropic one, an unknown id: 404', async () => {
    const c = as(w, 'owner');
    expect([
      (await c.get(`/batches/${w.running}/output`)).status,
      (await c.get(`/batches/${w.chat}/results`)).status,
      (await c.get(`/batches/${w.messages}/output`)).status,
      (await c.get(`/batches/batch_${'0'.repeat(24)}/output`)).status,
      // the fixture's batches name an input file that is gone (deleted, or expired)
      (await c.get(`/batches/${w.chat}/input`)).status,
      (await c.get(`/batches/${w.chat}/nothing`)).status,
    ]).toEqual([404, 404, 404, 404, 404, 404]);
  });

  it('a running Anthropic batch has no results yet: 404', async () => {
    await db.query("update batches set status = 'in_progress', completed_at = null where id = $1", [other.messages]);
    expect((await as(other, 'owner').get(`/batches/${other.messages}/results`)).status).toBe(404);
    const page = await as(other, 'owner').get('/batches');
    expect(tableRows(page.text, 'batches')[2].slice(2, 4)).toEqual(['Em andamento', `${brDay(3)}, 11:30`]);
  });
});

describe('Cancelar', () => {
  let x: BatchWorld;
  let run: RunningBatches;
  beforeAll(async () => {
    x = await batchWorld(db, await hashPassword('x y z w'));
    run = await runningBatches(db, x.tenantId);
  });
  const statusOf = async (id: string) =>
    (
      await db.query(
        'select status, cancelling_at is not null as cancelling_at, cancelled_at is not null as cancelled_at, total, completed, failed from batches where id = $1',
        [id],
      )
    ).rows[0];
  const cancel = async (c: PortalClient, id: string) => c.post(`/batches/${id}/cancel`, { _csrf: await c.csrfOf('/batches') });

  it('the button on the batches validating or in progress only, and its confirmation page', async () => {
    const page = await as(x, 'developer').get('/batches');
    const rows = tableRows(page.text, 'batches').slice(1);
    expect(rows.map((r) => [r[0], r[2], r.at(-2), r.at(-1)])).toEqual([
      [run.vendor, 'Em andamento', 'Entrada', 'Cancelar'],
      [run.validating, 'Validando', 'Entrada', 'Cancelar'],
      [run.queued, 'Em andamento', 'Entrada', 'Cancelar'],
      [x.running, 'Em andamento', '', 'Cancelar'],
      [x.messages, 'Concluído', 'Resultados', ''],
      [x.chat, 'Concluído', 'Saída · Erros', ''],
    ]);
    const confirm = await as(x, 'admin').get(`/batches/${run.queued}/cancel`);
    expect(confirm.status).toBe(200);
    expect(confirm.text).toContain(`Cancelar o lote ${run.queued}?`);
    expect(confirm.text).toMatch(new RegExp(`<form method="post" action="/batches/${run.queued}/cancel">\\s*<input type="hidden" name="_csrf" value="[^"]+">`));
    expect(confirm.text).toContain('data-testid="confirm-cancel">Sim, cancelar</button>');
    // asking is not cancelling
    expect((await statusOf(run.queued)).status).toBe('in_progress');
  });

  it('billing gets the 403 page, for the confirmation and the cancel; another tenant’s batch is a 404; no CSRF token, a 403', async () => {
    const got: Record<string, number[]> = {};
    for (const role of ROLES) {
      const c = as(x, role);
      got[role] = [(await c.get(`/batches/${run.queued}/cancel`)).status, (await cancel(c, other.running)).status];
    }
    expect(got).toEqual({ owner: [200, 404], admin: [200, 404], billing: [403, 403], developer: [200, 404] });
    const refused = await cancel(as(x, 'billing'), run.queued);
    expect(refused.status).toBe(403);
    expect(refused.text).toContain('Financeiro');
    const noToken = await as(x, 'owner').post(`/batches/${run.queued}/cancel`, {});
    expect(noToken.status).toBe(403);
    expect(await statusOf(run.queued)).toEqual({ status: 'in_progress', cancelling_at: false, cancelled_at: false, total: 4, completed: 1, failed: 0 });
    expect((await statusOf(other.running)).status).toBe('in_progress');
  });

  it('queue mode: cancelling at once; the runners end the lines not started and, the running line ended, the batch cancelled with its counts', async () => {
    const c = as(x, 'developer');
    const res = await cancel(c, run.queued);
    expect([res.status, res.location]).toEqual([303, `/batches?cancelled=${run.queued}`]);
    expect(await statusOf(run.queued)).toEqual({ status: 'cancelling', cancelling_at: true, cancelled_at: false, total: 4, completed: 1, failed: 0 });
    const page = await c.get(res.location!);
    expect(page.text).toContain(`O lote ${run.queued} está sendo cancelado.`);
    const row = tableRows(page.text, 'batches').find((r) => r[0] === run.queued)!;
    expect([row[2], row[4], row[5], row[6], row.at(-1)]).toEqual(['Cancelando', '4', '1', '0', '']);
    // again: the API's cancel of a batch being cancelled answers it as it is, and so does the portal
    expect((await cancel(c, run.queued)).status).toBe(303);
    // what a runner does taking a line of a batch `cancelling` (src/batch/runner.ts runLine): every line not started ends not run
    await db.query(
      `insert into batch_results (batch_id, line, custom_id, error, ok) select $1, g, 'q-' || g, $2, false from generate_series(0, 3) g on conflict do nothing`,
      [run.queued, NOT_RUN.cancelled],
    );
    // the running line is still running: not ended yet
    expect(await finalizeIfDone(db, run.queued, 30)).toBeNull();
    // it ends (answered 200): its runner ends the batch
    await db.query(
      `with r as (update batch_results set status_code = 200, body = '{"ok":1}', ok = true where batch_id = $1 and line = 1 and ok is null returning ok)
       update batches set completed = completed + (select count(*) from r) where id = $1`,
      [run.queued],
    );
    expect((await finalizeIfDone(db, run.queued, 30))?.status).toBe('cancelled');
    expect(await statusOf(run.queued)).toEqual({ status: 'cancelled', cancelling_at: true, cancelled_at: true, total: 4, completed: 2, failed: 0 });
    const after = tableRows((await c.get('/batches')).text, 'batches').find((r) => r[0] === run.queued)!;
    // lines 2 and 3 were not run: counted neither completed nor failed; their lines in the error file
    expect([after[2], after[4], after[5], after[6], after[8], after[9]]).toEqual(['Cancelado', '4', '2', '0', 'Entrada · Saída · Erros', '']);
    const errors = (await c.get(`/batches/${run.queued}/errors`)).text.trim().split('\n');
    expect(errors.map((l) => [JSON.parse(l).custom_id, JSON.parse(l).error.code])).toEqual([
      ['q-2', 'batch_cancelled'],
      ['q-3', 'batch_cancelled'],
    ]);
  });

  it('an ended batch: 409 and the page says why, for the confirmation and the cancel; its status unchanged', async () => {
    const c = as(x, 'owner');
    for (const res of [await c.get(`/batches/${x.chat}/cancel`), await cancel(c, x.chat)]) {
      expect(res.status).toBe(409);
      expect(res.text).toContain(`O lote ${x.chat} já está &quot;Concluído&quot;: não pode mais ser cancelado.`);
    }
    expect((await c.get(`/batches/${run.queued}/cancel`)).status).toBe(409);
    expect((await statusOf(x.chat)).status).toBe('completed');
  });

  it('an Anthropic message batch validating: cancelling, through the same cancel', async () => {
    const res = await cancel(as(x, 'admin'), run.validating);
    expect(res.status).toBe(303);
    expect(await statusOf(run.validating)).toEqual({ status: 'cancelling', cancelling_at: true, cancelled_at: false, total: 2, completed: 0, failed: 0 });
  });

  it('vendor mode: the front door’s vendor loop finds the batch cancelling, tells the vendor once, and ends it cancelled', async () => {
    // the worker of the model's pool, as the vendor answers through it
    const asked: VendorBatchRequest[] = [];
    let cancelledAtVendor = false;
    const nc = {
      request: async (_subject: string, data: Uint8Array) => {
        const req = decodeJson(data) as VendorBatchRequest;
        asked.push(req);
        if (req.op === 'cancel') cancelledAtVendor = true;
        const reply =
          req.op === 'cancel' || !cancelledAtVendor
            ? { ok: true, vendor_batch_id: `vb_${run.vendor}`, status: cancelledAtVendor ? 'cancelling' : 'in_progress', ended: false }
            : // the vendor had answered line 0 before the cancel; line 1 it never ran
              {
                ok: true,
                vendor_batch_id: `vb_${run.vendor}`,
                status: 'cancelled',
                ended: true,
                results: [{ custom_id: 'l0', status_code: 200, body: { id: 'chatcmpl-0' }, error: null }],
              };
        return { data: encode(reply) };
      },
    };
    const model = { id: 'vbatch/gpt', deployments: [{ id: 'vbatch-gpt-1', batchPrices: { input: 500_000n, output: 1_000_000n } }] };
    const door = {
      config: { BATCH_VENDOR_POLL_MS: 86_400_000 }, // its batch due to no other loop of the shared database
      db,
      deps: { catalog: { get: async (id: string) => (id === model.id ? model : undefined) } },
      inFlight: () => 0,
    } as unknown as RunnerDoor;
    const loop = new VendorBatches(door, nc as never, (id) => finalizeIfDone(db, id, 30));
    // in progress: the loop polls the vendor, and tells it nothing else
    await loop.tick(run.vendor); // its batch alone, due to no loop: the database is shared with other files' stacks
    expect(asked.map((a) => a.op)).toEqual(['poll']);
    asked.length = 0;
    expect((await cancel(as(x, 'owner'), run.vendor)).status).toBe(303);
    expect((await statusOf(run.vendor)).status).toBe('cancelling');
    await loop.tick(run.vendor);
    expect(asked.map((a) => [a.op, 'vendor_batch_id' in a ? a.vendor_batch_id : null])).toEqual([
      ['cancel', `vb_${run.vendor}`],
      ['poll', `vb_${run.vendor}`],
    ]);
    expect(await statusOf(run.vendor)).toEqual({ status: 'cancelled', cancelling_at: true, cancelled_at: true, total: 3, completed: 1, failed: 0 });
    const { rows } = await db.query("select line, ok, error->>'code' as code from batch_results where batch_id = $1 order by line", [run.vendor]);
    expect(rows).toEqual([
      { line: 0, ok: true, code: null },
      { line: 1, ok: false, code: 'batch_cancelled' },
      { line: 2, ok: false, code: 'batch_cancelled' },
    ]);
    expect((await db.query('select cancel_sent from vendor_batch_chunks where batch_id = $1', [run.vendor])).rows).toEqual([{ cancel_sent: true }]);
    // a later pass finds nothing more to tell the vendor
    asked.length = 0;
    await loop.tick(run.vendor);
    expect(asked).toEqual([]);
  });
});

describe('the input file', () => {
  let x: BatchWorld;
  let run: RunningBatches;
  beforeAll(async () => {
    x = await batchWorld(db, await hashPassword('x y z w'));
    run = await runningBatches(db, x.tenantId);
  });

  it('an OpenAI batch’s input as stored; an Anthropic batch’s its requests as sent; owner, admin, developer only', async () => {
    const got: Record<string, number[]> = {};
    for (const role of ROLES) {
      got[role] = [(await as(x, role).get(`/batches/${run.queued}/input`)).status, (await as(other, role).get(`/batches/${run.queued}/input`)).status];
    }
    expect(got).toEqual({ owner: [200, 404], admin: [200, 404], billing: [403, 403], developer: [200, 404] });
    const input = await as(x, 'developer').get(`/batches/${run.queued}/input`);
    expect([input.headers.get('content-type'), input.headers.get('content-disposition'), input.text]).toEqual([
      'application/jsonl',
      `attachment; filename="${run.queued}_input.jsonl"`,
      QUEUED_INPUT,
    ]);
    const requests = await as(x, 'owner').get(`/batches/${run.validating}/input`);
    expect(requests.text).toBe(
      '{"custom_id":"m-a","params":{"model":"sim/echo","max_tokens":8,"messages":[{"role":"user","content":"m-a"}]}}\n' +
        '{"custom_id":"m-b","params":{"model":"sim/echo","max_tokens":8,"messages":[{"role":"user","content":"m-b"}]}}\n',
    );
    expect(MESSAGE_INPUT).toContain('"url":"/v1/messages"');
  });

  it('deleted or expired: no link, and a 404', async () => {
    await db.query("update batch_files set expires_at = now() - interval '1 second' where id = (select input_file_id from batches where id = $1)", [
      run.queued,
    ]);
    const row = tableRows((await as(x, 'owner').get('/batches')).text, 'batches').find((r) => r[0] === run.queued)!;
    expect(row.at(-2)).toBe('');
    expect((await as(x, 'owner').get(`/batches/${run.queued}/input`)).status).toBe(404);
  });
});
