import type { DbClient } from '../../db/pool.ts';
import { httpRequest } from '../http.ts';
import { getSetting, SETTINGS } from '../settings.ts';

/**
 * Development helper behind `catraca pix pay --txid X` and the portal's dev-mode button: asks
 * the running simulator (its URL and credentials are recorded in portal_settings by the portal
 * that hosts it) to pay a charge, which then calls our webhook like a real PSP would. A recurring
 * charge (Pix Automático cobr) settles its scheduled attempt at once, as on its due date.
 */
export async function paySimulatedCharge(
  db: DbClient,
  a: { txid: string; valor?: string /** defaults to the URL the last started portal recorded */; simulatorUrl?: string },
): Promise<{ ok: boolean; status: number; endToEndId?: string; delivered?: boolean; error?: string }> {
  const url = a.simulatorUrl ?? (await getSetting(db, SETTINGS.simulatorUrl));
  const clientId = await getSetting(db, SETTINGS.simulatorClientId);
  const clientSecret = await getSetting(db, SETTINGS.simulatorClientSecret);
  if (!url || !clientId || !clientSecret) return { ok: false, status: 0, error: 'no Pix simulator is running (start the portal with PIX_PROVIDER=simulator)' };
  // a Pix Automático charge (cobr) settles its scheduled attempt now instead of on its due date
  const { rows } = await db.query('select id_rec from pix_charges where txid = $1', [a.txid]);
  const recurring = !!rows[0]?.id_rec;
  if (recurring && a.valor) return { ok: false, status: 0, error: 'a recurring charge is paid at its own amount (no --valor)' };
  const res = await httpRequest(`${url}/sim/${recurring ? 'cobr' : 'cob'}/${encodeURIComponent(a.txid)}/pagar`, {
    method: 'POST',
    headers: { authorization: `Basic ${Buffer.from(`${clientId}:${clientSecret}`).toString('base64')}`, 'content-type': 'application/json' },
    body: JSON.stringify(a.valor ? { valor: a.valor } : {}),
  });
  const j = (res.json ?? {}) as { endToEndId?: string; delivered?: boolean; title?: string; detail?: string };
  if (res.status !== 200) return { ok: false, status: res.status, error: [j.title, j.detail].filter(Boolean).join(': ') || `HTTP ${res.status}` };
  return { ok: true, status: 200, endToEndId: j.endToEndId, delivered: j.delivered };
}
