// The console's "Lotes" page (issue 30): every tenant's batches, newest first, filtered by status
// and tenant, each with its tenant, lines and spend — the count and sum of the ledger's debits
// naming the batch, exact to the µBRL. Fixture rows of known content (test/portal/batches-fixture.ts).
import { randomBytes } from 'node:crypto';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createOperator, totpFor } from '../../src/console/auth.ts';
import { type ConsoleServer, startConsole } from '../../src/console/server.ts';
import { createPool } from '../../src/db/pool.ts';
import { derivedRoleUrl } from '../../src/db/roles.ts';
import { type BatchWorld, batchWorld, brDay } from '../portal/batches-fixture.ts';
import { PortalClient } from '../portal/client.ts';

const admin = createPool(process.env.DATABASE_URL!, 3);
const consoleDb = createPool(derivedRoleUrl(process.env.DATABASE_URL!, 'console'), 3);
const u = randomBytes(4).toString('hex');
let server: ConsoleServer;
let client: PortalClient;
let w: BatchWorld;
let other: BatchWorld;

beforeAll(async () => {
  w = await batchWorld(admin, 'not-a-password-hash');
  other = await batchWorld(admin, 'not-a-password-hash');
  const op = await createOperator(admin, { email: `lotes.${u}@example.com`, createdBy: null });
  if (!op.ok) throw new Error(op.error);
  server = await startConsole({ db: consoleDb, nc: null, port: 0 });
  client = new PortalClient(server.url);
  const signed = await client.post('/login', {
    _csrf: await client.csrfOf('/login'),
    email: op.setup.operator.email,
    password: op.setup.password,
    code: totpFor(op.setup.totpSecret, op.setup.operator.email).generate(),
  });
  expect(signed.status).toBe(303);
});

afterAll(async () => {
  await server?.close();
  await Promise.all([admin.end(), consoleDb.end()]);
});

/** The rows of the batches table: cell texts, tags dropped (a <br> a space). */
function rows(page: string): string[][] {
  const table = /<table data-testid="batches">([\s\S]*?)<\/table>/.exec(page)?.[1];
  if (!table) throw new Error('no batches table');
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

describe('the console’s Lotes page', () => {
  it('one tenant’s batches: tenant, API, status, lines, lines debited and their spend to the µBRL', async () => {
    const res = await client.get(`/batches?tenant=${w.tenantId}`);
    expect(res.status).toBe(200);
    const name = (await admin.query('select name from tenants where id = $1', [w.tenantId])).rows[0].name;
    expect(rows(res.text)).toEqual([
      ['Lote', 'Cliente', 'API · endpoint', 'Situação', 'Criado em', 'Linhas', 'Concluídas', 'Com erro', 'Debitadas', 'Gasto'],
      [w.running, name, 'OpenAI /v1/embeddings', 'Em andamento', `${brDay(4)}, 09:00`, '1.000', '10', '0', '1', 'R$ 0,004999'],
      [w.messages, name, 'Anthropic /v1/messages', 'Concluído', `${brDay(3)}, 11:30`, '2', '1', '1', '1', 'R$ 0,015005'],
      // 1 234 567 + 2 345 678: the tenant's online debit (R$ 7) is no batch's
      [w.chat, name, 'OpenAI /v1/chat/completions', 'Concluído', `${brDay(2)}, 10:00`, '3', '2', '1', '2', 'R$ 3,580245'],
    ]);
    expect(res.text).toContain(`<a href="/tenants/${w.tenantId}">`);
    expect(res.text).toContain('<a href="/batches" aria-current="page">Lotes</a>');
  });

  it('across tenants, by status: the running batches of both; an unknown status shows every status', async () => {
    const running = await client.get('/batches?status=in_progress');
    const ids = rows(running.text)
      .slice(1)
      .map((r) => r[0]);
    // both created at the same time: their order is their ids'
    expect(ids.filter((id) => [w.running, other.running, w.chat, other.chat].includes(id))).toEqual([w.running, other.running].sort().reverse());
    expect(
      rows(running.text)
        .slice(1)
        .every((r) => r[3] === 'Em andamento'),
    ).toBe(true);
    const bogus = await client.get(`/batches?status=nope&tenant=${other.tenantId}`);
    expect(
      rows(bogus.text)
        .slice(1)
        .map((r) => r[0]),
    ).toEqual([other.running, other.messages, other.chat]);
  });

  it('a tenant without batches', async () => {
    const res = await client.get('/batches?tenant=ten_nobody');
    expect(res.text).toContain('data-testid="batches-empty"');
  });
});
