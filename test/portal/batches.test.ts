// The portal's "Lotes" page (issue 30): a tenant's batches, OpenAI's and Anthropic's, newest first
// with paging, their counts, the spend of their lines (the ledger's debits naming the batch, to the
// centavo) and their result files. Every member sees the page; the files (prompts and answers)
// only owners, admins and developers download — billing gets 403 — and another tenant's batch is
// a 404 to everyone. Fixture rows of known content (batches-fixture.ts) as the API and its runner
// leave them; the portal reads them as catraca_portal (migration 089's grants).
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { ROLES, type Role } from '../../src/db/members.ts';
import { createPool } from '../../src/db/pool.ts';
import { derivedRoleUrl } from '../../src/db/roles.ts';
import { type Portal, startPortal } from '../../src/portal/server.ts';
import { hashPassword } from '../../src/web/sign-in.ts';
import { type BatchWorld, batchWorld, ERRORS_JSONL, manyBatches, OUTPUT_JSONL, brDay, enDay } from './batches-fixture.ts';
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
      ['Lote', 'API · endpoint', 'Situação', 'Criado em Encerrado em', 'Linhas', 'Concluídas', 'Com erro', 'Gasto', 'Arquivos'],
      // 4 999 µBRL: R$ 0,00 to the centavo; still running, no files
      [w.running, 'OpenAI /v1/embeddings', 'Em andamento', `${brDay(4)}, 09:00`, '1.000', '10', '0', 'R$ 0,00', ''],
      // 15 005 µBRL rounds half up to R$ 0,02
      [w.messages, 'Anthropic /v1/messages', 'Concluído', `${brDay(3)}, 11:30 ${brDay(3)}, 11:31`, '2', '1', '1', 'R$ 0,02', 'Resultados'],
      // 1 234 567 + 2 345 678 = 3 580 245 µBRL; the online debit of 7 R$ is no batch's
      [w.chat, 'OpenAI /v1/chat/completions', 'Concluído', `${brDay(2)}, 10:00 ${brDay(2)}, 10:07`, '3', '2', '1', 'R$ 3,58', 'Saída · Erros'],
    ]);
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
    expect(rows[0]).toEqual(['Batch', 'API · endpoint', 'Status', 'Created Ended', 'Lines', 'Completed', 'Failed', 'Spend', 'Files']);
    expect(rows[3].slice(2)).toEqual(['Completed', `${enDay(2)}, 10:00 AM ${enDay(2)}, 10:07 AM`, '3', '2', '1', 'R$ 3.58', 'Output · Errors']);
  });

  it('every role sees the page; billing sees no Files column (it may not download)', async () => {
    const got: Record<string, [number, number]> = {};
    for (const role of ROLES) {
      const page = await as(w, role).get('/batches');
      got[role] = [page.status, tableRows(page.text, 'batches')[0].length];
    }
    expect(got).toEqual({ owner: [200, 9], admin: [200, 9], billing: [200, 8], developer: [200, 9] });
  });

  it('an output file expired: no link, and its download is a 404', async () => {
    await db.query("update batch_files set expires_at = now() - interval '1 second' where id = $1", [other.output]);
    const page = await as(other, 'owner').get('/batches');
    expect(tableRows(page.text, 'batches')[3].at(-1)).toBe('Erros');
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
      (await c.get(`/batches/${w.chat}/input`)).status,
    ]).toEqual([404, 404, 404, 404, 404]);
  });

  it('a running Anthropic batch has no results yet: 404', async () => {
    await db.query("update batches set status = 'in_progress', completed_at = null where id = $1", [other.messages]);
    expect((await as(other, 'owner').get(`/batches/${other.messages}/results`)).status).toBe(404);
    const page = await as(other, 'owner').get('/batches');
    expect(tableRows(page.text, 'batches')[2].slice(2, 4)).toEqual(['Em andamento', `${brDay(3)}, 11:30`]);
  });
});
