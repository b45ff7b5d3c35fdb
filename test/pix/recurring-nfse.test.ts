// A paid recurring charge gets its nota fiscal like any top-up (issue 29): the portal (as
// catraca_portal) with the Pix simulator and the Sefin Nacional simulator (NFSE_PROVIDER=simulator),
// on a database of this file's own (nfse_settings is database-wide: no other file's top-ups get
// notes). The charge is credited by the same path as a one-off Pix (catraca_pix_credit, then
// catraca_invoice_topup in the same transaction): one note, issued, for the charge's amount, with
// the tenant's "Dados fiscais" as tomador, and none more when the PSP repeats its callback.
import { mkdtempSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import type pg from 'pg';
import { afterAll, beforeAll, describe, expect, it, vi } from 'vitest';
import { todayInSaoPaulo } from '../../src/billing/tenant-days.ts';
import { loadConfig } from '../../src/config.ts';
import { createPool } from '../../src/db/pool.ts';
import { derivedRoleUrl } from '../../src/db/roles.ts';
import { createTenant } from '../../src/db/tenants.ts';
import { selfSignedPkcs12 } from '../../src/nfse/certificate.ts';
import { saveProfile } from '../../src/nfse/profiles.ts';
import { loadNfseSetup } from '../../src/nfse/settings.ts';
import type { InvoiceRow } from '../../src/nfse/store.ts';
import { httpRequest } from '../../src/pix/http.ts';
import { addDays } from '../../src/pix/recurring/projection.ts';
import { getSetting, SETTINGS } from '../../src/pix/settings.ts';
import { type Portal, startPortal } from '../../src/portal/server.ts';
import { type OwnDatabase, ownDatabase } from '../helpers/own-database.ts';

// each note is validated against the schema by the simulator (1–2 s of CPU on a shared machine)
vi.setConfig({ testTimeout: 120_000 });

describe('a paid recurring charge issues one NFS-e', () => {
  let own: OwnDatabase;
  let admin: pg.Pool;
  let portalDb: pg.Pool;
  let portal: Portal;
  let offsetDays = 0;
  const DAY = 86_400_000;
  const clock = () => new Date(Date.now() + offsetDays * DAY);
  const moveDays = (n: number) => {
    offsetDays += n;
    portal.simulator!.rec.dayOffset += n;
  };
  const simPost = async (path: string, body: unknown = {}) => {
    const id = await getSetting(admin, SETTINGS.simulatorClientId);
    const sec = await getSetting(admin, SETTINGS.simulatorClientSecret);
    const res = await httpRequest(`${portal.simulator!.url}${path}`, {
      method: 'POST',
      headers: { authorization: `Basic ${Buffer.from(`${id}:${sec}`).toString('base64')}`, 'content-type': 'application/json' },
      body: JSON.stringify(body),
    });
    return res.status;
  };
  const invoicesOf = async (txid: string): Promise<InvoiceRow[]> => (await admin.query('select * from invoices where pix_txid = $1', [txid])).rows;
  async function until<T>(what: string, fn: () => Promise<T | null | undefined | false>, ms = 60_000): Promise<T> {
    const end = Date.now() + ms;
    for (;;) {
      const v = await fn();
      if (v) return v;
      if (Date.now() > end) throw new Error(`timed out waiting for ${what}`);
      await new Promise((r) => setTimeout(r, 100));
    }
  }

  beforeAll(async () => {
    own = await ownDatabase('recnfse', { migrate: true });
    admin = createPool(own.url, 3);
    portalDb = createPool(derivedRoleUrl(own.url, 'portal'), 5);
    const dir = mkdtempSync(join(tmpdir(), 'recnfse-'));
    const pfx = selfSignedPkcs12({ name: 'CATRACA TESTE LTDA', document: '11222333000181', password: 'a1-pass-test' });
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
    // no NATS: the issuer does the work itself
    portal = await startPortal({
      db: portalDb,
      nc: null,
      env: { PIX_PROVIDER: 'simulator' },
      reconcileIntervalMs: 0,
      now: clock,
      nfse: { setup, tuning: { retryMs: [300, 300, 500], relayIntervalMs: 150, sweepIntervalMs: 1000, leaseMs: 5000 } },
    });
    expect(portal.recurring?.enabled).toBe(true);
    expect(portal.nfse?.simulator).toBeTruthy();
  }, 90_000);

  afterAll(async () => {
    await portal?.close();
    await portalDb?.end();
    await admin?.end();
    await own?.drop();
  });

  it('credited once by the one-off path, one note issued for its amount, none more on a repeated callback', async () => {
    const t = await createTenant(admin, 'Recarga com nota');
    expect(
      (
        await saveProfile(
          portalDb,
          t.id,
          {
            document: '11.444.777/0001-61',
            name: 'Cliente Recorrente Ltda',
            cep: '88015-100',
            street: 'Rua Felipe Schmidt',
            number: '100',
            district: 'Centro',
            cityCode: '4205407',
            uf: 'SC',
          },
          null,
        )
      ).ok,
    ).toBe(true);
    const rec = portal.recurring!;
    // R$ 0,00 and no spend: the first charge brings the balance to the R$ 100,00 target
    const r = await rec.create(t.id, {
      periodicity: 'SEMANAL',
      targetMicros: 100_000_000n,
      maxMicros: 200_000_000n,
      payerDocument: '11.444.777/0001-61',
      payerName: 'Cliente Recorrente Ltda',
    });
    expect(await simPost(`/sim/rec/${r.id_rec}/autorizar`, { valorMaximo: '200.00' })).toBe(200);
    const today = todayInSaoPaulo(clock());
    const [charge] = await rec.charges(r.id_rec);
    expect(charge).toMatchObject({ amount_micros: 100_000_000n, due_date: addDays(today, 3), status: 'ATIVA' });
    expect(await invoicesOf(charge.txid)).toEqual([]); // nothing paid, no note

    const sim = portal.nfse!.simulator!.state;
    const before = sim.byDps.size;
    moveDays(3);
    expect((await portal.simulator!.rec.settleDue()).paid).toEqual([charge.txid]);
    expect((await admin.query('select balance_micros from tenants where id = $1', [t.id])).rows[0].balance_micros).toBe(100_000_000n);
    const inv = await until('the note issued', async () => {
      const rows = await invoicesOf(charge.txid);
      return rows[0]?.state === 'issued' ? rows[0] : null;
    });
    expect(inv).toMatchObject({ tenant_id: t.id, kind: 'topup', pix_txid: charge.txid, amount_micros: 100_000_000n, state: 'issued' });
    expect(inv.access_key).toMatch(/^[0-9]{50}$/);
    expect(inv.dps_xml).toContain('<vServ>100.00</vServ>');
    expect(inv.dps_xml).toContain(`<docRef>${charge.txid}</docRef>`);
    expect(inv.dps_xml).toContain('<toma><CNPJ>11444777000161</CNPJ><xNome>Cliente Recorrente Ltda</xNome>');
    expect(sim.byDps.size).toBe(before + 1);

    // the PSP repeats its callback, reconciliation asks again: still one credit, one note
    const secret = (await getSetting(admin, SETTINGS.webhookSecret))!;
    const again = await httpRequest(`${portal.url}/webhooks/pix/${secret}/cobr`, {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: JSON.stringify({ cobsr: [{ idRec: r.id_rec, txid: charge.txid, status: 'CONCLUIDA' }] }),
    });
    expect(again.status).toBe(200);
    expect(await rec.syncCharge(charge.txid)).toBe('CONCLUIDA');
    await portal.nfse!.issuer.idle();
    expect((await invoicesOf(charge.txid)).map((x) => [x.id, x.state])).toEqual([[inv.id, 'issued']]);
    expect((await admin.query(`select count(*)::int as n from ledger where tenant_id = $1 and source = 'pix'`, [t.id])).rows[0].n).toBe(1);
    expect(sim.byDps.size).toBe(before + 1);
    const issued = (await admin.query(`select data from notify_events where type = 'invoice.issued' and tenant_id = $1`, [t.id])).rows;
    expect(issued).toHaveLength(1);
    expect(issued[0].data).toMatchObject({ invoice_id: inv.id, charge_id: charge.txid, amount: '100.000000' });
  });
});
