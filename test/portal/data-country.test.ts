// Issue 31, part 3: a key's data country in the portal. Owners and admins choose "País dos dados"
// (any country, or Brasil) when creating a key, and the keys list shows it; a developer is offered
// no choice and the server refuses one they send anyway (403, no key). Through the portal's HTTP.
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { Role } from '../../src/db/members.ts';
import { createPool } from '../../src/db/pool.ts';
import { type MailSink, startMailSink } from '../../src/mail/sink.ts';
import { createSession } from '../../src/portal/auth.ts';
import { type Portal, startPortal } from '../../src/portal/server.ts';
import { hashPassword } from '../../src/web/sign-in.ts';
import { PortalClient, sinkMailbox } from './client.ts';

const db = createPool(process.env.DATABASE_URL!, 4);
const uniq = () => Math.random().toString(36).slice(2, 10);
let sink: MailSink;
let portal: Portal;
let passwordHash: string;
const client = () => new PortalClient(portal.url, {}, { mailbox: sinkMailbox(sink) });

beforeAll(async () => {
  passwordHash = await hashPassword('correct horse battery');
  sink = await startMailSink();
  portal = await startPortal({
    db,
    nc: null,
    reconcileIntervalMs: 0,
    registerWebhook: false,
    signupLimitPerHour: 1000,
    env: { PIX_PROVIDER: 'simulator', SMTP_URL: sink.url },
  });
});
afterAll(async () => {
  await portal?.close();
  await sink?.close();
  await db.end();
});

/** A new tenant's owner, signed up through the portal. */
async function newOwner() {
  const c = client();
  const email = `dc.owner.${uniq()}@example.com`;
  expect((await c.signUp(email)).status).toBe(303);
  const tenantId = (await db.query('select tenant_id from portal_users where email = $1', [email])).rows[0].tenant_id as string;
  return { c, tenantId };
}

/** A member of the tenant with this role, written to the database, with a session. */
async function memberOf(tenantId: string, role: Role) {
  const id = `usr_${uniq()}${uniq()}`;
  await db.query(`insert into portal_users (id, tenant_id, email, password_hash, role, email_verified_at) values ($1, $2, $3, $4, $5, now())`, [
    id,
    tenantId,
    `dc.${role}.${uniq()}@example.com`,
    passwordHash,
    role,
  ]);
  const c = client();
  c.cookies.set('catraca_session', (await createSession(db, id)).token);
  return { c, id };
}

async function createKey(c: PortalClient, label: string, extra: Record<string, string> = {}) {
  return c.post('/keys', { _csrf: await c.csrfOf('/keys'), label, scope: 'all', ...extra });
}
const keyRow = async (tenantId: string, label: string) =>
  (await db.query('select data_country from api_keys where tenant_id = $1 and label = $2', [tenantId, label])).rows;
/** The "País dos dados" cell of the keys list's row with this label. */
function countryCell(page: string, label: string): string | null {
  for (const row of page.split('data-testid="key-row"').slice(1)) {
    if (!row.includes(`<td>${label}</td>`)) continue;
    return /data-testid="key-data-country">([^<]*)</.exec(row)?.[1] ?? null;
  }
  return null;
}
const SELECT =
  '<label>País dos dados<select name="data_country" data-testid="key-data-country-select">\n<option value="" selected>Qualquer país</option><option value="BR" >Brasil</option>\n</select>';

describe('a key’s data country in the portal', () => {
  it('owner and admin: offered "País dos dados" (Qualquer país / Brasil), the key kept in Brazil, shown in the list', async () => {
    const o = await newOwner();
    const admin = await memberOf(o.tenantId, 'admin');
    for (const [who, c] of [
      ['owner', o.c],
      ['admin', admin.c],
    ] as const) {
      const page = await c.get('/keys');
      expect(page.status).toBe(200);
      expect(page.text).toContain('<th>País dos dados</th>');
      expect(page.text).toContain(SELECT);
      const res = await createKey(c, `lgpd-${who}`, { data_country: 'BR' });
      expect(res.status).toBe(303);
      expect(await keyRow(o.tenantId, `lgpd-${who}`)).toEqual([{ data_country: 'BR' }]);
      expect((await createKey(c, `free-${who}`, { data_country: '' })).status).toBe(303);
      expect(await keyRow(o.tenantId, `free-${who}`)).toEqual([{ data_country: null }]);
    }
    const list = (await o.c.get('/keys')).text;
    expect(countryCell(list, 'lgpd-owner')).toBe('Brasil');
    expect(countryCell(list, 'lgpd-admin')).toBe('Brasil');
    expect(countryCell(list, 'free-owner')).toBe('Qualquer país');
    expect(countryCell(list, 'free-admin')).toBe('Qualquer país');
    const en = (await o.c.get('/keys?lang=en')).text;
    expect(en).toContain('<th>Data country</th>');
    expect(countryCell(en, 'lgpd-owner')).toBe('Brazil');
    expect(countryCell(en, 'free-owner')).toBe('Any country');
  });

  it('a country not offered: 400 saying why, no key', async () => {
    const o = await newOwner();
    for (const bad of ['US', 'br', 'Brasil']) {
      const res = await createKey(o.c, `bad-${bad}`, { data_country: bad });
      expect(res.status).toBe(400);
      expect(res.text).toContain('Escolha o país dos dados: qualquer país ou Brasil.');
      expect(await keyRow(o.tenantId, `bad-${bad}`)).toEqual([]);
    }
  });

  it('a developer: no choice offered, sees the column, and one sent anyway is refused (403, no key)', async () => {
    const o = await newOwner();
    const dev = await memberOf(o.tenantId, 'developer');
    const page = await dev.c.get('/keys');
    expect(page.status).toBe(200);
    expect(page.text).not.toContain('name="data_country"');
    expect(page.text).toContain('<th>País dos dados</th>');
    const refused = await createKey(dev.c, 'dev-br', { data_country: 'BR' });
    expect(refused.status).toBe(403);
    expect(refused.text).toContain('Somente proprietários e administradores definem o país dos dados de uma chave.');
    expect(await keyRow(o.tenantId, 'dev-br')).toEqual([]);
    expect((await createKey(dev.c, 'dev-any')).status).toBe(303);
    expect(await keyRow(o.tenantId, 'dev-any')).toEqual([{ data_country: null }]);
    expect(countryCell((await dev.c.get('/keys')).text, 'dev-any')).toBe('Qualquer país');
  });
});
