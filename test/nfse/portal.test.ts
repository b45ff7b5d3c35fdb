// The tenant's side of notas fiscais (issue 28) over HTTP: "Dados fiscais" refuses a document with
// wrong check digits by the server's message naming it and keeps each change; a top-up waits for
// the profile while issuing is on; "Notas fiscais" lists the note and serves its XML byte for byte
// and its DANFSe; a developer gets 403 on the page and on both files and sees no link; another
// tenant's note is a 404. The portal runs the issuer with the Sefin Nacional simulator, in a
// database of this file's own (nfse_settings is database-wide), like issue.test.ts.
import { mkdtempSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { randomBytes } from 'node:crypto';
import type pg from 'pg';
import { afterAll, beforeAll, describe, expect, test, vi } from 'vitest';
import { loadConfig } from '../../src/config.ts';
import { createPool } from '../../src/db/pool.ts';
import type { Role } from '../../src/db/members.ts';
import { derivedRoleUrl } from '../../src/db/roles.ts';
import { createTenant } from '../../src/db/tenants.ts';
import { createOperator, type OperatorSetup, totpFor } from '../../src/console/auth.ts';
import { type ConsoleServer, startConsole } from '../../src/console/server.ts';
import { cnpjCheckDigits } from '../../src/nfse/document.ts';
import { selfSignedPkcs12 } from '../../src/nfse/certificate.ts';
import { loadNfseSetup } from '../../src/nfse/settings.ts';
import type { InvoiceRow } from '../../src/nfse/store.ts';
import { createSession } from '../../src/portal/auth.ts';
import { type Portal, startPortal } from '../../src/portal/server.ts';
import { hashPassword } from '../../src/web/sign-in.ts';
import { type OwnDatabase, ownDatabase } from '../helpers/own-database.ts';
import { pdfText } from '../helpers/pdf-text.ts';
import { PortalClient } from '../portal/client.ts';
import type { Mail } from '../../src/mail/index.ts';
import type { DeliveryRow } from '../../src/notify/deliveries.ts';
import type { NotifyEvent } from '../../src/notify/events.ts';
import { sendEventMail } from '../../src/portal/notifier/mail.ts';

vi.setConfig({ testTimeout: 120_000 });

const TUNING = { retryMs: [300, 300, 500], relayIntervalMs: 150, sweepIntervalMs: 1000, leaseMs: 5000 };

let own: OwnDatabase;
let admin: pg.Pool;
let portalDb: pg.Pool;
let portal: Portal;
let consoleDb: pg.Pool;
let consoleServer: ConsoleServer;
let passwordHash: string;

const PROFILE_FORM = {
  document: '11.444.777/0001-61',
  name: 'Cliente Exemplo Ltda',
  email: 'notas@cliente.example',
  cep: '88015-100',
  street: 'Rua Felipe Schmidt',
  number: '100',
  complement: '',
  district: 'Centro',
  city_code: '4205407',
  uf: 'SC',
  municipal_registration: '',
};

/** A member of a tenant, signed in: a client with its session and CSRF token. */
async function member(tenantId: string, role: Role): Promise<{ client: PortalClient; csrf: string; id: string; email: string }> {
  const id = `usr_${randomBytes(6).toString('hex')}`;
  await admin.query(`insert into portal_users (id, tenant_id, email, password_hash, role, email_verified_at) values ($1, $2, $3, $4, $5, now())`, [
    id,
    tenantId,
    `${role}.${id}@example.com`,
    passwordHash,
    role,
  ]);
  const s = await createSession(portalDb, id);
  const client = new PortalClient(portal.url);
  client.cookies.set('catraca_session', s.token);
  return { client, csrf: s.csrf, id, email: `${role}.${id}@example.com` };
}

/** A GET's status, content type and body bytes. */
async function download(client: PortalClient, path: string): Promise<{ status: number; type: string | null; body: Buffer; disposition: string | null }> {
  const res = await fetch(`${portal.url}${path}`, { redirect: 'manual', headers: { cookie: `catraca_session=${client.cookies.get('catraca_session')}` } });
  return {
    status: res.status,
    type: res.headers.get('content-type'),
    body: Buffer.from(await res.arrayBuffer()),
    disposition: res.headers.get('content-disposition'),
  };
}

async function until<T>(what: string, fn: () => Promise<T | null | undefined | false>, ms = 30_000): Promise<T> {
  const end = Date.now() + ms;
  for (;;) {
    const v = await fn();
    if (v) return v;
    if (Date.now() > end) throw new Error(`timed out waiting for ${what}`);
    await new Promise((r) => setTimeout(r, 100));
  }
}

/** A top-up through the portal's form, paid at the Pix simulator; the issued note. */
async function topUpAndIssue(client: PortalClient, csrf: string, amount: string): Promise<InvoiceRow> {
  const res = await client.post('/topup', { _csrf: csrf, amount });
  expect(res.status).toBe(303);
  const txid = res.location!.replace('/topup/', '');
  expect((await portal.simulator!.pay(txid)).status).toBe(200);
  return until('the note issued', async () => {
    const r = (await admin.query('select * from invoices where pix_txid = $1', [txid])).rows[0];
    return r?.state === 'issued' ? (r as InvoiceRow) : null;
  });
}

beforeAll(async () => {
  passwordHash = await hashPassword('correct horse battery');
  own = await ownDatabase('nfseportal', { migrate: true });
  admin = createPool(own.url, 3);
  portalDb = createPool(derivedRoleUrl(own.url, 'portal'), 5);
  const dir = mkdtempSync(join(tmpdir(), 'nfse-portal-'));
  const pfx = selfSignedPkcs12({ name: 'CATRACA TESTE LTDA', document: '11222333000181', password: 'a1-pass-test' });
  writeFileSync(join(dir, 'a1.pfx'), pfx.pfx);
  const setup = loadNfseSetup(
    loadConfig({
      NFSE_PROVIDER: 'simulator',
      NFSE_CERT_PFX: join(dir, 'a1.pfx'),
      NFSE_CERT_PASSWORD: 'a1-pass-test',
      NFSE_MUNICIPIO: '4205407',
      NFSE_SERVICE_CODE: '010301',
      NFSE_ISS_RATE: '2',
    }),
  );
  // no NATS: the issuer does the work itself (the bus path is issue.test.ts's)
  portal = await startPortal({
    db: portalDb,
    nc: null,
    env: { PIX_PROVIDER: 'simulator' },
    devMode: true,
    reconcileIntervalMs: 0,
    nfse: { setup, tuning: TUNING },
  });
  // the operator's console on the same database (as catraca_console)
  consoleDb = createPool(derivedRoleUrl(own.url, 'console'), 3);
  consoleServer = await startConsole({ db: consoleDb, nc: null, port: 0 });
}, 90_000);

afterAll(async () => {
  await consoleServer?.close();
  await consoleDb?.end();
  await portal?.close();
  await portalDb?.end();
  await admin?.end();
  await own?.drop();
});

describe('Dados fiscais', () => {
  test('a top-up waits for the profile; a wrong document is refused by the server naming it; each save is kept with its date', async () => {
    const t = await createTenant(admin, 'Dados fiscais');
    const owner = await member(t.id, 'owner');
    // issuing is on and the tenant has no profile: the top-up page points to Dados fiscais, the form is refused
    const page = await owner.client.get('/topup');
    expect(page.status).toBe(200);
    expect(page.text).toContain(
      'Antes da primeira recarga, preencha os Dados fiscais: a nota fiscal de cada recarga é emitida para esse CNPJ ou CPF.</p><p><a href="/dados-fiscais" data-testid="profile-first-link">Preencher os Dados fiscais</a>',
    );
    expect(page.text).not.toContain('data-testid="topup-amount"');
    const refused = await owner.client.post('/topup', { _csrf: owner.csrf, amount: '20,00' });
    expect(refused.status).toBe(409);
    expect(refused.text).toContain('Antes da primeira recarga, preencha os Dados fiscais');
    expect((await admin.query('select count(*)::int as n from pix_charges where tenant_id = $1', [t.id])).rows[0].n).toBe(0);

    // wrong check digits, with and without punctuation: the server's message names the document
    const badCnpj = await owner.client.post('/dados-fiscais', { _csrf: owner.csrf, ...PROFILE_FORM, document: '11.444.777/0001-62' });
    expect(badCnpj.status).toBe(400);
    expect(badCnpj.text).toContain(
      '<p class="error" data-testid="fiscal-error-document">CNPJ inválido: 11.444.777/0001-62 (confira os dígitos verificadores).</p>',
    );
    expect(badCnpj.text).toContain('value="Cliente Exemplo Ltda"');
    const badCpf = await owner.client.post('/dados-fiscais', { _csrf: owner.csrf, ...PROFILE_FORM, document: '52998224724' });
    expect(badCpf.text).toContain('data-testid="fiscal-error-document">CPF inválido: 52998224724 (confira os dígitos verificadores).</p>');
    const badAlnum = await owner.client.post('/dados-fiscais', { _csrf: owner.csrf, ...PROFILE_FORM, document: '12.ABC.345/01DE-36' });
    expect(badAlnum.text).toContain('data-testid="fiscal-error-document">CNPJ inválido: 12.ABC.345/01DE-36 (confira os dígitos verificadores).</p>');
    const badCity = await owner.client.post('/dados-fiscais', { _csrf: owner.csrf, ...PROFILE_FORM, city_code: '3550308' });
    expect(badCity.status).toBe(400);
    expect(badCity.text).toContain('data-testid="fiscal-error-city_code">O código IBGE 3550308 não é de um município de SC.</p>');
    expect((await admin.query('select count(*)::int as n from billing_profiles where tenant_id = $1', [t.id])).rows[0].n).toBe(0);

    // the alphanumeric CNPJ, then a person's CPF without punctuation: two versions, newest first
    const saved = await owner.client.post('/dados-fiscais', { _csrf: owner.csrf, ...PROFILE_FORM, document: '12.abc.345/01de-35' });
    expect([saved.status, saved.location]).toEqual([303, '/dados-fiscais?saved=1']);
    expect((await owner.client.get('/dados-fiscais?saved=1')).text).toContain('Dados fiscais salvos.');
    expect(
      (
        await owner.client.post('/dados-fiscais', {
          _csrf: owner.csrf,
          ...PROFILE_FORM,
          document: '52998224725',
          name: 'Maria da Silva',
          municipal_registration: '12345',
        })
      ).status,
    ).toBe(303);
    const { rows } = await admin.query(
      'select document_kind, document, name, cep, city_code, uf, municipal_registration, saved_by from billing_profiles where tenant_id = $1 order by id',
      [t.id],
    );
    expect(rows).toEqual([
      {
        document_kind: 'cnpj',
        document: '12ABC34501DE35',
        name: 'Cliente Exemplo Ltda',
        cep: '88015100',
        city_code: '4205407',
        uf: 'SC',
        municipal_registration: null,
        saved_by: owner.id,
      },
      {
        document_kind: 'cpf',
        document: '52998224725',
        name: 'Maria da Silva',
        cep: '88015100',
        city_code: '4205407',
        uf: 'SC',
        municipal_registration: '12345',
        saved_by: owner.id,
      },
    ]);
    const shown = (await owner.client.get('/dados-fiscais')).text;
    expect(shown).toContain('name="document" value="529.982.247-25"');
    expect(shown).toContain('<td>529.982.247-25</td><td>Maria da Silva</td><td>4205407 / SC</td>');
    expect(shown).toContain('<td>12.ABC.345/01DE-35</td><td>Cliente Exemplo Ltda</td><td>4205407 / SC</td>');
    // now the top-up form is there
    expect((await owner.client.get('/topup')).text).toContain('data-testid="topup-amount"');
  });
});

describe('Notas fiscais', () => {
  test('the owner and a billing member see the note and get its XML byte for byte and its DANFSe; a developer gets 403 and no link; another tenant 404', async () => {
    const t = await createTenant(admin, 'Notas fiscais');
    const owner = await member(t.id, 'owner');
    const billing = await member(t.id, 'billing');
    const developer = await member(t.id, 'developer');
    expect((await owner.client.post('/dados-fiscais', { _csrf: owner.csrf, ...PROFILE_FORM })).status).toBe(303);
    const inv = await topUpAndIssue(owner.client, owner.csrf, '37,50');
    expect(inv.amount_micros).toBe(37_500_000n);
    // topup.credited names the note; its key is not known yet at the credit (the note is issued after it): invoice.issued carries it
    const e2e = (await admin.query('select end_to_end_id from pix_charges where txid = $1', [inv.pix_txid])).rows[0].end_to_end_id;
    const events = (await admin.query('select type, data from notify_events where tenant_id = $1 order by created_at, id', [t.id])).rows;
    expect(events.map((e) => e.type)).toEqual(['topup.credited', 'invoice.issued']);
    expect(events[0].data).toEqual({
      tenant_id: t.id,
      charge_id: inv.pix_txid,
      end_to_end_id: e2e,
      amount: '37.500000',
      balance: '37.500000',
      paid_at: expect.any(String),
      invoice_id: inv.id,
      access_key: null,
    });
    // its e-mail, sent now that the note is issued: the number and the access key, read when the e-mail leaves
    const sent: Mail[] = [];
    const mailer = { configured: true, sendMail: async (m: Mail) => void sent.push(m), close: () => {} };
    const credited = (await admin.query(`select * from notify_events where tenant_id = $1 and type = 'topup.credited'`, [t.id])).rows[0] as NotifyEvent;
    expect(await sendEventMail({ db: portalDb, mailer, pix: null, site: { url: portal.url } }, {} as DeliveryRow, credited)).toEqual({ error: null });
    expect(sent[0].to).toEqual([billing.email, owner.email].sort());
    expect(sent[0].text.split('\n\n')[1]).toBe(
      `Nota fiscal (NFS-e) ${inv.nfse_number} desta recarga emitida. Chave de acesso: ${inv.access_key}. XML e PDF em Notas fiscais: ${portal.url}/notas-fiscais`,
    );
    expect(events[1].data).toMatchObject({
      invoice_id: inv.id,
      charge_id: inv.pix_txid,
      access_key: inv.access_key,
      xml_url: `${portal.url}/notas-fiscais/${inv.id}/xml`,
    });

    const list = await billing.client.get('/notas-fiscais');
    expect(list.status).toBe(200);
    expect(list.text).toContain(
      `<tr data-testid="invoice-${inv.id}"><td>${inv.nfse_number}</td><td><code class="key" data-testid="invoice-key">${inv.access_key}</code></td>`,
    );
    expect(list.text).toMatch(/<td class="num">R\$\s37,50<\/td><td><span class="badge" data-testid="invoice-status">Emitida<\/span><\/td>/);
    expect(list.text).toContain(`<a href="/notas-fiscais/${inv.id}/xml" download data-testid="invoice-xml">XML</a>`);
    expect(list.text).toContain('<a href="/notas-fiscais">Notas fiscais</a><a href="/dados-fiscais">Dados fiscais</a>');

    for (const who of [owner, billing]) {
      const xml = await download(who.client, `/notas-fiscais/${inv.id}/xml`);
      expect([xml.status, xml.type, xml.disposition]).toEqual([200, 'application/xml', `attachment; filename="NFSe-${inv.access_key}.xml"`]);
      expect(xml.body.equals(inv.nfse_xml!)).toBe(true);
      const pdf = await download(who.client, `/notas-fiscais/${inv.id}/pdf`);
      expect([pdf.status, pdf.type, pdf.disposition]).toEqual([200, 'application/pdf', `attachment; filename="DANFSe-${inv.access_key}.pdf"`]);
      expect(pdf.body.subarray(0, 5).toString('latin1')).toBe('%PDF-');
      const lines = pdfText(pdf.body).split('\n');
      expect(lines).toEqual(expect.arrayContaining([inv.access_key!, inv.nfse_number!, '11.444.777/0001-61', 'Cliente Exemplo Ltda', 'R$ 37,50']));
    }

    // a developer: the page and both files refused, no link in the nav
    const dev = await developer.client.get('/notas-fiscais');
    expect(dev.status).toBe(403);
    expect(dev.text).not.toContain(inv.access_key!);
    expect(dev.text).not.toContain('href="/notas-fiscais"');
    expect(dev.text).not.toContain('href="/dados-fiscais"');
    expect((await developer.client.get('/dashboard')).text).not.toContain('href="/notas-fiscais"');
    for (const file of ['xml', 'pdf']) {
      const r = await download(developer.client, `/notas-fiscais/${inv.id}/${file}`);
      expect(r.status).toBe(403);
      expect(r.body.toString('utf8')).not.toContain(inv.access_key!);
    }
    expect((await developer.client.get('/dados-fiscais')).status).toBe(403);
    expect((await developer.client.post('/dados-fiscais', { _csrf: developer.csrf, ...PROFILE_FORM, name: 'Trocado' })).status).toBe(403);

    // another tenant's owner: the note does not exist for them
    const other = await member((await createTenant(admin, 'Outro')).id, 'owner');
    for (const file of ['xml', 'pdf']) expect((await download(other.client, `/notas-fiscais/${inv.id}/${file}`)).status).toBe(404);
    expect((await other.client.get('/notas-fiscais')).text).not.toContain(inv.id);
  });
});

/** An operator signed in to the console (e-mail, password, the authenticator's code). */
async function operatorClient(): Promise<{ client: PortalClient; setup: OperatorSetup }> {
  const r = await createOperator(admin, { email: `nfse.${randomBytes(5).toString('hex')}@example.com`, createdBy: null });
  if (!r.ok) throw new Error(r.error);
  const client = new PortalClient(consoleServer.url);
  const token = PortalClient.csrf((await client.get('/login')).text);
  const code = totpFor(r.setup.totpSecret, r.setup.operator.email).generate();
  const res = await client.post('/login', { _csrf: token, email: r.setup.operator.email, password: r.setup.password, code });
  expect([res.status, res.location]).toEqual([303, '/tenants']);
  return { client, setup: r.setup };
}

describe('the console: rejected notes, top-ups without a note, the retry', () => {
  test('rejected (E0202) → listed with the code and a Retry button → the tenant fixes Dados fiscais → retry (CSRF, audited) → issued', async () => {
    const t = await createTenant(admin, 'Console NFS-e');
    const owner = await member(t.id, 'owner');
    // the tenant typed the operator's own CNPJ root (valid check digits): Sefin refuses E0202
    const sameRoot = `112223330009${cnpjCheckDigits('112223330009')}`;
    expect((await owner.client.post('/dados-fiscais', { _csrf: owner.csrf, ...PROFILE_FORM, document: sameRoot })).status).toBe(303);
    const res = await owner.client.post('/topup', { _csrf: owner.csrf, amount: '12,00' });
    const txid = res.location!.replace('/topup/', '');
    expect((await portal.simulator!.pay(txid)).status).toBe(200);
    const rejected = await until('rejected', async () => {
      const r = (await admin.query('select * from invoices where pix_txid = $1', [txid])).rows[0];
      return r?.state === 'rejected' ? (r as InvoiceRow) : null;
    });
    expect(rejected.error_code).toBe('E0202');
    // the topup.credited e-mail of a top-up whose note is not issued: it is on its way
    const sent: Mail[] = [];
    const mailer = { configured: true, sendMail: async (m: Mail) => void sent.push(m), close: () => {} };
    const credited = (await admin.query(`select * from notify_events where tenant_id = $1 and type = 'topup.credited'`, [t.id])).rows[0] as NotifyEvent;
    expect(credited.data).toMatchObject({ invoice_id: rejected.id, access_key: null });
    expect(await sendEventMail({ db: portalDb, mailer, pix: null, site: { url: portal.url } }, {} as DeliveryRow, credited)).toEqual({ error: null });
    expect(sent[0].text.split('\n\n')[1]).toBe(
      `A nota fiscal (NFS-e) desta recarga está sendo emitida: a chave de acesso vem no aviso “Nota fiscal emitida” e fica em Notas fiscais: ${portal.url}/notas-fiscais`,
    );

    const op = await operatorClient();
    const page = await op.client.get('/nfse');
    expect(page.status).toBe(200);
    expect(page.text).toContain('<a href="/nfse" aria-current="page">Notas fiscais</a>');
    const row = page.text.slice(page.text.indexOf(`<tr data-testid="nfse-${rejected.id}">`));
    expect(row.slice(0, row.indexOf('</tr>'))).toContain(
      `<td data-testid="nfse-state">rejeitada</td><td><p data-testid="nfse-error"><code>E0202</code> ${rejected.error_message}</p></td>`,
    );
    expect(row.slice(0, row.indexOf('</tr>'))).toContain(
      `<form method="post" action="/nfse/${rejected.id}/retry"><input type="hidden" name="_csrf" value="${PortalClient.csrf(page.text)}"><button type="submit" data-testid="nfse-retry">Tentar de novo</button></form>`,
    );
    // the reconciliation: the credited top-up without an issued note, and why
    expect(page.text).toContain(`<td data-testid="missing-reason">rejected E0202: ${rejected.error_message}</td>`);

    // without the form's token: refused, nothing retried, nothing audited
    const forged = await op.client.post(`/nfse/${rejected.id}/retry`, {});
    expect(forged.status).toBe(403);
    expect((await admin.query('select state from invoices where id = $1', [rejected.id])).rows[0].state).toBe('rejected');
    // an unknown note: 404
    expect((await op.client.post('/nfse/inv_00000000000000000000000000000000/retry', { _csrf: PortalClient.csrf(page.text) })).status).toBe(404);

    // the fix, then the retry
    expect((await owner.client.post('/dados-fiscais', { _csrf: owner.csrf, ...PROFILE_FORM })).status).toBe(303);
    const retried = await op.client.post(`/nfse/${rejected.id}/retry`, { _csrf: PortalClient.csrf(page.text) });
    expect([retried.status, retried.location]).toEqual([303, '/nfse?done=issue']);
    expect((await op.client.get('/nfse?done=issue')).text).toContain('A nota vai ser emitida de novo (uma DPS nova, com o mesmo número).');
    const issued = await until('issued after the retry', async () => {
      const r = (await admin.query('select * from invoices where id = $1', [rejected.id])).rows[0];
      return r?.state === 'issued' ? (r as InvoiceRow) : null;
    });
    expect(issued.dps_number).toBe(rejected.dps_number);
    expect(issued.dps_xml).toContain('<toma><CNPJ>11444777000161</CNPJ>');
    const audits = (
      await admin.query(`select operator_id, action, tenant_id, target, before, after from console_audit where action = 'nfse_retry' and target = $1`, [
        rejected.id,
      ])
    ).rows;
    expect(audits).toEqual([
      {
        operator_id: op.setup.operator.id,
        action: 'nfse_retry',
        tenant_id: t.id,
        target: rejected.id,
        before: { state: 'rejected', cancel_state: null, error_code: 'E0202', error_message: rejected.error_message },
        after: { retry: 'issue' },
      },
    ]);
    const after = (await op.client.get('/nfse')).text;
    expect(after).not.toContain(`data-testid="nfse-${rejected.id}"`);
    expect(after).not.toContain(`data-testid="missing-${txid}"`);
    // an issued note: nothing to retry
    const again = await op.client.post(`/nfse/${rejected.id}/retry`, { _csrf: PortalClient.csrf(after) });
    expect(again.status).toBe(409);
    expect(again.text).toContain('Nada a tentar de novo: a nota não está rejeitada nem com cancelamento recusado.');
    expect((await admin.query(`select count(*)::int as n from console_audit where action = 'nfse_retry' and target = $1`, [rejected.id])).rows[0].n).toBe(1);
  });

  test('a refunded top-up whose note is outside the cancellation window: the console says what to do instead, no Retry', async () => {
    const t = await createTenant(admin, 'Fora do prazo');
    const owner = await member(t.id, 'owner');
    expect((await owner.client.post('/dados-fiscais', { _csrf: owner.csrf, ...PROFILE_FORM })).status).toBe(303);
    const inv = await topUpAndIssue(owner.client, owner.csrf, '15,00');
    await admin.query(`update invoices set issued_at = now() - interval '40 days' where id = $1`, [inv.id]);
    expect(await portal.pix.requestRefund(inv.pix_txid!, 15_000_000n)).toBe('refunded');
    const outside = await until('outside the window', async () => {
      const r = (await admin.query('select * from invoices where id = $1', [inv.id])).rows[0];
      return r?.cancel_state === 'outside_window' ? (r as InvoiceRow) : null;
    });
    const issuedOn = outside.issued_at!.toISOString().slice(0, 10);
    const op = await operatorClient();
    const page = (await op.client.get('/nfse')).text;
    const row = page.slice(page.indexOf(`<tr data-testid="nfse-${inv.id}">`));
    const cells = row.slice(0, row.indexOf('</tr>'));
    expect(cells).toContain(
      `<td data-testid="nfse-state">emitida · cancelamento fora do prazo</td><td><p data-testid="nfse-do-instead">O catraca não cancela esta nota: a recarga foi devolvida, mas o cancelamento pela Sefin Nacional não é possível. O que fazer: issued on ${issuedOn}, more than 30 days ago (NFSE_CANCEL_DAYS): ask the municipality for a cancellation by fiscal analysis (evento e101103, in the Emissor Nacional) or issue a substitute note</p></td>\n<td></td>`,
    );
    expect(cells).not.toContain('nfse-retry');
    expect(portal.nfse!.simulator!.state.byKey.get(inv.access_key!)!.cancelled).toBe(false);
  });
});
