import type { Prestador } from './dps.ts';
import { localDateTime } from './time.ts';
import { el, ela, leaf, NFSE_NS, render, XML_DECLARATION } from './xml.ts';

// The cancellation event (e101101, "Cancelamento de NFS-e") as a pedido de registro de evento
// (pedRegEvento v1.01, tiposEventos_v1.01.xsd TCPedRegEvt): Id = "PRE" + access key (50) + event
// code (6); the author is the prestador (CNPJAutor); signed like the DPS (infPedReg).

export const CANCEL_EVENT = '101101';

/** cMotivo of a cancellation: 1 erro na emissão, 2 serviço não prestado, 9 outros. */
export type CancelReason = '1' | '2' | '9';

export function buildCancelRequest(
  p: Pick<Prestador, 'ambiente' | 'cnpj' | 'appVersion'>,
  o: { accessKey: string; at: Date; reason: CancelReason; text: string },
): { id: string; xml: string } {
  const id = `PRE${o.accessKey}${CANCEL_EVENT}`;
  const text = o.text.length < 15 ? o.text.padEnd(15, '.') : o.text.slice(0, 255);
  const inf = ela(
    'infPedReg',
    { Id: id },
    leaf('tpAmb', p.ambiente),
    leaf('verAplic', p.appVersion),
    leaf('dhEvento', localDateTime(new Date(o.at.getTime() - 30_000))),
    leaf('CNPJAutor', p.cnpj),
    leaf('chNFSe', o.accessKey),
    el(`e${CANCEL_EVENT}`, leaf('xDesc', 'Cancelamento de NFS-e'), leaf('cMotivo', o.reason), leaf('xMotivo', text)),
  );
  return { id, xml: XML_DECLARATION + render(ela('pedRegEvento', { xmlns: NFSE_NS, versao: '1.01' }, inf)) };
}
