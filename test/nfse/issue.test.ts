// NFS-e issuing end to end (issue 28): the portal (as catraca_portal) with the Pix simulator and
// the Sefin Nacional simulator (mTLS, schema, signature), the issuer on the run's NATS (JetStream
// stream NFSE), a database of this file's own (nfse_settings is database-wide: no other file's
// top-ups get notes). What Sefin received is compared with what catraca stored; the signatures are
// verified with xml-crypto directly, not with the code that made or checked them.
import { mkdtempSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { DOMParser } from '@xmldom/xmldom';
import { connect, type NatsConnection } from 'nats';
import type pg from 'pg';
import { SignedXml } from 'xml-crypto';
import { afterAll, beforeAll, describe, expect, test, vi } from 'vitest';
import { run as runCli } from '../../src/cli/main.ts';
import { loadConfig } from '../../src/config.ts';
import { ensureNotifyStream } from '../../src/notify/bus.ts';
import { createPool } from '../../src/db/pool.ts';
import { derivedRoleUrl } from '../../src/db/roles.ts';
import { createTenant } from '../../src/db/tenants.ts';
import { selfSignedPkcs12 } from '../../src/nfse/certificate.ts';
import { cnpjCheckDigits } from '../../src/nfse/document.ts';
import { Issuer } from '../../src/nfse/issuer.ts';
import { saveProfile } from '../../src/nfse/profiles.ts';
import { loadNfseSetup } from '../../src/nfse/settings.ts';
import { getInvoice, type InvoiceRow, reconcile, requestCancel, retryInvoice } from '../../src/nfse/store.ts';
import { validateAgainst } from '../../src/nfse/xsd.ts';
import { type Portal, startPortal } from '../../src/portal/server.ts';
import { type OwnDatabase, ownDatabase } from '../helpers/own-database.ts';

// each note is validated against the schema by the simulator (1–2 s of CPU on a shared machine)
vi.setConfig({ testTimeout: 120_000 });

const OPERATOR_CNPJ = '11222333000181';
const TUNING = { retryMs: [300, 300, 500], relayIntervalMs: 150, sweepIntervalMs: 1000, leaseMs: 5000 };

let own: OwnDatabase;
let admin: pg.Pool;
let portalDb: pg.Pool;
let nc: NatsConnection;
let portal: Portal;
let certPem: string;

const profile = (document: string) => ({
  document,
  name: 'Cliente Exemplo Ltda',
  email: 'notas@cliente.example',
  cep: '88015-100',
  street: 'Rua Felipe Schmidt',
  number: '100',
  district: 'Centro',
  cityCode: '4205407',
  uf: 'SC',
});

async function until<T>(what: string, fn: () => Promise<T | null | undefined | false>, ms = 30_000): Promise<T> {
  const end = Date.now() + ms;
  for (;;) {
    const v = await fn();
    if (v) return v;
    if (Date.now() > end) throw new Error(`timed out waiting for ${what}`);
    await new Promise((r) => setTimeout(r, 100));
  }
}

const invoiceOf = async (txid: string): Promise<InvoiceRow | null> => (await admin.query('select * from invoices where pix_txid = $1', [txid])).rows[0] ?? null;

/** A tenant, its profile (when given), a paid top-up; the charge's txid. */
async function paidTopUp(tenantId: string, amount = 20_000_000n): Promise<string> {
  const ch = await portal.pix.createTopUp(tenantId, amount);
  const paid = await portal.simulator!.pay(ch.txid);
  expect(paid.status).toBe(200);
  await until('the credit', async () => (await admin.query(`select 1 from pix_charges where txid = $1 and status = 'CONCLUIDA'`, [ch.txid])).rowCount);
  return ch.txid;
}

function verifiesWith(xml: string, pem: string, root: string): boolean {
  const doc = new DOMParser().parseFromString(xml, 'text/xml');
  const rootEl = doc.documentElement!;
  const sig = Array.from(rootEl.childNodes).find((n) => (n as unknown as Element).localName === 'Signature');
  const v = new SignedXml({ publicCert: pem, getCertFromKeyInfo: () => null });
  v.loadSignature(sig as unknown as Node);
  return rootEl.localName === root && v.checkSignature(xml);
}

beforeAll(async () => {
  own = await ownDatabase('nfse', { migrate: true });
  admin = createPool(own.url, 3);
  portalDb = createPool(derivedRoleUrl(own.url, 'portal'), 5);
  nc = await connect({ servers: process.env.NATS_URL });
  // the notification events this file makes go to NOTIFY (no notifier here delivers them)
  await ensureNotifyStream(nc);
  const dir = mkdtempSync(join(tmpdir(), 'nfse-'));
  const pfx = selfSignedPkcs12({ name: 'CATRACA TESTE LTDA', document: OPERATOR_CNPJ, password: 'a1-pass-test' });
  certPem = pfx.certPem;
  writeFileSync(join(dir, 'a1.pfx'), pfx.pfx);
  const setup = loadNfseSetup(
    loadConfig({
      NFSE_PROVIDER: 'simulator',
      NFSE_CERT_PFX: join(dir, 'a1.pfx'),
      NFSE_CERT_PASSWORD: 'a1-pass-test',
      NFSE_MUNICIPIO: '4205407',
      NFSE_SERVICE_CODE: '010301',
      NFSE_NBS: '115013000',
      NFSE_ISS_RATE: '2',
      NFSE_IBSCBS_CST: '000',
      NFSE_IBSCBS_CLASS: '000001',
      NFSE_IBSCBS_IND_OP: '100301',
    }),
  );
  portal = await startPortal({ db: portalDb, nc, env: { PIX_PROVIDER: 'simulator' }, devMode: true, reconcileIntervalMs: 0, nfse: { setup, tuning: TUNING } });
}, 90_000);

afterAll(async () => {
  await portal?.close();
  await nc?.drain();
  await portalDb?.end();
  await admin?.end();
  await own?.drop();
});

describe('a nota fiscal for every credited top-up', () => {
  test('one note, valid against the national schema, signed; the DPS Sefin received is the one stored; the tomador is the profile as it was', async () => {
    const t = await createTenant(admin, 'Cliente NFS-e');
    const saved = await saveProfile(portalDb, t.id, profile('12.ABC.345/01DE-35'), null);
    expect(saved.ok).toBe(true);
    const sim = portal.nfse!.simulator!.state;
    const before = sim.byDps.size;
    const txid = await paidTopUp(t.id, 20_000_000n);
    const inv = await until('the note issued', async () => {
      const r = await invoiceOf(txid);
      return r?.state === 'issued' ? r : null;
    });
    expect(sim.byDps.size).toBe(before + 1);
    expect((await admin.query('select count(*)::int as n from invoices where pix_txid = $1', [txid])).rows[0].n).toBe(1);
    // the DPS Sefin received, byte for byte the one stored
    const received = sim.received.filter((x) => x.includes(`Id="${inv.dps_id}"`));
    expect(received).toEqual([inv.dps_xml]);
    expect(await validateAgainst('DPS_v1.01.xsd', inv.dps_xml!)).toEqual([]);
    expect(verifiesWith(inv.dps_xml!, certPem, 'DPS')).toBe(true);
    expect(inv.dps_xml).toContain(
      '<toma><CNPJ>12ABC34501DE35</CNPJ><xNome>Cliente Exemplo Ltda</xNome><end><endNac><cMun>4205407</cMun><CEP>88015100</CEP></endNac>',
    );
    expect(inv.dps_xml).toContain('<vServ>20.00</vServ>');
    expect(inv.dps_xml).toContain(`<docRef>${txid}</docRef>`);
    expect(inv.dps_xml).toMatch(/<dhEmi>\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d-03:00<\/dhEmi>/);
    expect(inv.dps_xml).toContain('<IBSCBS><finNFSe>0</finNFSe><indFinal>0</indFinal><cIndOp>100301</cIndOp>');
    // the NFS-e as Sefin returned it: stored byte for byte, valid, signed by Sefin, with its key and number
    const note = sim.byDps.get(inv.dps_id!)!;
    expect(inv.nfse_xml!.equals(Buffer.from(note.nfseXml, 'utf8'))).toBe(true);
    expect(inv.access_key).toBe(note.accessKey);
    expect(inv.access_key).toMatch(/^[0-9]{50}$/);
    expect(inv.nfse_number).toBe(note.number);
    expect(await validateAgainst('NFSe_v1.01.xsd', inv.nfse_xml!.toString('utf8'))).toEqual([]);
    expect(verifiesWith(inv.nfse_xml!.toString('utf8'), portal.nfse!.simulator!.caPem, 'NFSe')).toBe(true);
    // invoice.issued, once, with the key and the XML's URL
    const ev = (await admin.query(`select data from notify_events where type = 'invoice.issued' and tenant_id = $1`, [t.id])).rows;
    expect(ev).toHaveLength(1);
    expect(ev[0].data).toMatchObject({ invoice_id: inv.id, charge_id: txid, access_key: inv.access_key, number: inv.nfse_number, amount: '20.000000' });
    expect(ev[0].data.xml_url).toBe(`${portal.url}/notas-fiscais/${inv.id}/xml`);
    // a later change of the profile does not touch the note
    expect((await saveProfile(portalDb, t.id, { ...profile('11.444.777/0001-61'), name: 'Novo Nome SA' }, null)).ok).toBe(true);
    expect((await getInvoice(admin, inv.id))!.dps_xml).toBe(inv.dps_xml);
    expect((await reconcile(admin, { tenantId: t.id }))[0]).toMatchObject({ txid, invoice_id: inv.id, state: 'issued', reason: `issued ${inv.access_key}` });
  });

  test('a tenant without a profile gets a note without a tomador', async () => {
    const t = await createTenant(admin, 'Sem dados fiscais');
    const txid = await paidTopUp(t.id, 15_000_000n);
    const inv = await until('issued', async () => ((await invoiceOf(txid))?.state === 'issued' ? invoiceOf(txid) : null));
    expect(inv.dps_xml).not.toContain('<toma>');
    expect(inv.dps_xml).toContain('<indFinal>1</indFinal>');
    expect(inv.profile_id).toBeNull();
  });

  test('a restart between crediting and issuing (even after the DPS was sent) still makes exactly one note', async () => {
    const t = await createTenant(admin, 'Reinício');
    const issuer = portal.nfse!.issuer;
    await issuer.stop();
    const txid = await paidTopUp(t.id, 10_000_000n);
    const pending = await until('the invoice row', () => invoiceOf(txid));
    expect(pending.state).toBe('pending');
    // a process that built, stored and sent the DPS, then died before storing Sefin's answer
    const { setup, client, simulator } = portal.nfse!;
    const dying = new Issuer({
      db: portalDb,
      nc: null,
      client,
      cert: setup.cert,
      prestador: setup.prestador,
      emitOn: 'topup',
      cancelDays: 30,
      site: { url: portal.url },
    });
    const originalSend = client.sendDps.bind(client);
    client.sendDps = async (xml) => {
      await originalSend(xml);
      throw new Error('killed after sending');
    };
    await expect(dying.issue(pending.id)).rejects.toThrow('killed after sending');
    client.sendDps = originalSend;
    const sent = (await getInvoice(admin, pending.id))!;
    expect(sent.state).toBe('pending');
    expect(simulator!.state.byDps.has(sent.dps_id!)).toBe(true);
    // its claim lapses; a new issuer on the bus takes it: Sefin says E0014, the NFS-e of this very DPS is kept
    await admin.query(`update invoices set claimed_until = now() - interval '1 second' where id = $1`, [pending.id]);
    const restarted = new Issuer({
      db: portalDb,
      nc,
      client,
      cert: setup.cert,
      prestador: setup.prestador,
      emitOn: 'topup',
      cancelDays: 30,
      site: { url: portal.url },
      ...TUNING,
    });
    await restarted.start();
    try {
      const inv = await until('issued after the restart', async () => ((await invoiceOf(txid))?.state === 'issued' ? invoiceOf(txid) : null));
      expect(inv.access_key).toBe(simulator!.state.byDps.get(sent.dps_id!)!.accessKey);
      expect(inv.dps_xml).toBe(sent.dps_xml);
      expect([...simulator!.state.byDps.values()].filter((n) => n.dpsId === sent.dps_id)).toHaveLength(1);
      expect((await admin.query(`select count(*)::int as n from notify_events where type = 'invoice.issued' and tenant_id = $1`, [t.id])).rows[0].n).toBe(1);
    } finally {
      // the portal's issuer from now on (its close stops it)
      portal.nfse!.issuer = restarted;
    }
  });
});

describe('when Sefin is away, refuses, or the top-up is refunded', () => {
  test('Sefin unavailable for a while: the note is issued once it is back', async () => {
    const t = await createTenant(admin, 'Indisponível');
    const sim = portal.nfse!.simulator!.state;
    sim.unavailable = true;
    try {
      const txid = await paidTopUp(t.id, 30_000_000n);
      const waiting = await until('two failed attempts', async () => {
        const r = await invoiceOf(txid);
        return r && r.attempts >= 2 ? r : null;
      });
      expect(waiting.state).toBe('pending');
      expect(waiting.error_message).toMatch(/^Sefin unavailable: HTTP 503/);
    } finally {
      sim.unavailable = false;
    }
    const inv = await until('issued once Sefin is back', async () => {
      const r = (await admin.query(`select * from invoices where tenant_id = $1`, [t.id])).rows[0];
      return r?.state === 'issued' ? r : null;
    });
    expect([...sim.byDps.values()].filter((n) => n.dpsId === inv.dps_id)).toHaveLength(1);
    expect(inv.error_message).toBeNull();
  });

  test("a rejected DPS stays rejected with Sefin's code; fixed and retried, it is issued", async () => {
    const t = await createTenant(admin, 'Rejeitada');
    // the tenant typed the operator's own CNPJ root (valid check digits): Sefin refuses E0202
    const sameRoot = `112223330002${cnpjCheckDigits('112223330002')}`;
    expect((await saveProfile(portalDb, t.id, profile(sameRoot), null)).ok).toBe(true);
    const txid = await paidTopUp(t.id, 25_000_000n);
    const rejected = await until('rejected', async () => ((await invoiceOf(txid))?.state === 'rejected' ? invoiceOf(txid) : null));
    expect(rejected.error_code).toBe('E0202');
    expect(rejected.error_message).toMatch(/não é permitido que o prestador do serviço seja igual ao tomador/);
    expect((await reconcile(admin, { problems: true, tenantId: t.id }))[0].reason).toMatch(/^rejected E0202: /);
    // stays rejected: nothing retries it by itself
    await new Promise((r) => setTimeout(r, 1000));
    expect((await invoiceOf(txid))!.state).toBe('rejected');
    // the fix, then the operator's retry (console / CLI)
    expect((await saveProfile(portalDb, t.id, profile('11.444.777/0001-61'), null)).ok).toBe(true);
    expect(await retryInvoice(admin, rejected.id)).toBe('issue');
    const inv = await until('issued after the retry', async () => ((await invoiceOf(txid))?.state === 'issued' ? invoiceOf(txid) : null));
    expect(inv.dps_number).toBe(rejected.dps_number);
    expect(inv.dps_xml).toContain('<toma><CNPJ>11444777000161</CNPJ>');
    expect(inv.error_code).toBeNull();
  });

  test('a refund in full cancels the note with the cancellation event; outside the window the console is told', async () => {
    const t = await createTenant(admin, 'Devolução');
    const txid = await paidTopUp(t.id, 40_000_000n);
    const inv = await until('issued', async () => ((await invoiceOf(txid))?.state === 'issued' ? invoiceOf(txid) : null));
    expect(await portal.pix.requestRefund(txid, 40_000_000n)).toBe('refunded');
    const done = await until('cancelled', async () => ((await invoiceOf(txid))?.cancel_state === 'done' ? invoiceOf(txid) : null));
    expect(done.cancelled_at).not.toBeNull();
    const event = done.event_xml!.toString('utf8');
    expect(await validateAgainst('evento_v1.01.xsd', event)).toEqual([]);
    expect(event).toContain(`<chNFSe>${inv.access_key}</chNFSe><e101101><xDesc>Cancelamento de NFS-e</xDesc><cMotivo>2</cMotivo>`);
    expect(portal.nfse!.simulator!.state.byKey.get(inv.access_key!)!.cancelled).toBe(true);

    // a note issued 40 days ago (NFSE_CANCEL_DAYS 30): no event is sent, the console says what to do
    const t2 = await createTenant(admin, 'Fora do prazo');
    const txid2 = await paidTopUp(t2.id, 12_000_000n);
    const old = await until('issued', async () => ((await invoiceOf(txid2))?.state === 'issued' ? invoiceOf(txid2) : null));
    await admin.query(`update invoices set issued_at = now() - interval '40 days' where id = $1`, [old.id]);
    expect(await requestCancel(admin, old.id, 'pedido do operador')).toBe(true);
    const outside = await until('outside the window', async () => ((await invoiceOf(txid2))?.cancel_state === 'outside_window' ? invoiceOf(txid2) : null));
    expect(outside.cancel_note).toMatch(
      /more than 30 days ago \(NFSE_CANCEL_DAYS\): ask the municipality for a cancellation by fiscal analysis \(evento e101103/,
    );
    expect(portal.nfse!.simulator!.state.byKey.get(old.access_key!)!.cancelled).toBe(false);
  });
});

describe('catraca nfse, as catraca_admin', () => {
  test('list (and --missing), retry and cancel', async () => {
    const env = { DATABASE_URL: derivedRoleUrl(own.url, 'admin'), NATS_URL: process.env.NATS_URL };
    const cli = async (...argv: string[]) => {
      let out = '';
      let err = '';
      const code = await runCli([...argv, '--json'], { env, stdout: (x) => (out += x), stderr: (x) => (err += x) });
      return { code, err, body: out ? JSON.parse(out) : null };
    };
    const t = await createTenant(admin, 'CLI');
    const sameRoot = `112223330003${cnpjCheckDigits('112223330003')}`;
    expect((await saveProfile(portalDb, t.id, profile(sameRoot), null)).ok).toBe(true);
    const txid = await paidTopUp(t.id, 11_000_000n);
    const rejected = await until('rejected', async () => ((await invoiceOf(txid))?.state === 'rejected' ? invoiceOf(txid) : null));
    const missing = await cli('nfse', 'list', '--missing', '--tenant', t.id);
    expect(missing.code).toBe(0);
    expect(missing.body.topups).toEqual([
      {
        charge_id: txid,
        tenant_id: t.id,
        amount: '11.00',
        paid_at: expect.any(String),
        invoice_id: rejected.id,
        reason: expect.stringMatching(/^rejected E0202: /),
      },
    ]);
    const listed = await cli('nfse', 'list', '--tenant', t.id);
    expect(listed.body.invoices).toEqual([
      expect.objectContaining({ id: rejected.id, state: 'rejected', amount: '11.00', charge_id: txid, error: expect.stringMatching(/^E0202: /) }),
    ]);
    expect((await cli('nfse', 'retry', '--id', 'inv_00000000000000000000000000000000')).code).toBe(1);
    expect((await saveProfile(portalDb, t.id, profile('529.982.247-25'), null)).ok).toBe(true);
    expect((await cli('nfse', 'retry', '--id', rejected.id)).body).toEqual({ id: rejected.id, retry: 'issue' });
    const issued = await until('issued', async () => ((await invoiceOf(txid))?.state === 'issued' ? invoiceOf(txid) : null));
    expect(issued.dps_xml).toContain('<toma><CPF>52998224725</CPF>');
    expect((await cli('nfse', 'list', '--missing', '--tenant', t.id)).body.topups).toEqual([]);
    expect((await cli('nfse', 'cancel', '--id', issued.id, '--reason', 'curto')).code).toBe(2);
    expect((await cli('nfse', 'cancel', '--id', issued.id, '--reason', 'Emitida para o cliente errado')).body).toEqual({ id: issued.id, cancel: 'requested' });
    const cancelled = await until('cancelled', async () => ((await invoiceOf(txid))?.cancel_state === 'done' ? invoiceOf(txid) : null));
    const ev = cancelled.event_xml!.toString('utf8');
    expect(ev.slice(ev.indexOf('<e101101>'), ev.indexOf('</e101101>'))).toBe(
      '<e101101><xDesc>Cancelamento de NFS-e</xDesc><cMotivo>9</cMotivo><xMotivo>Emitida para o cliente errado</xMotivo>',
    );
  });
});
