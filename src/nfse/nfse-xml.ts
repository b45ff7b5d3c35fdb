import { DOMParser } from '@xmldom/xmldom';

// What catraca reads from an NFS-e that Sefin returned (it stores the document itself byte for
// byte): the access key (the infNFSe Id without "NFS"), the number, when it was processed, the
// DPS it came from, and the amounts for the DANFSe.

export interface NfseSummary {
  accessKey: string;
  number: string;
  processedAt: string;
  dpsId: string;
  verificationCode?: string;
}

const text = (parent: Element | Document, name: string): string | undefined => parent.getElementsByTagNameNS('*', name)[0]?.textContent ?? undefined;

export function parseXml(xml: string): Document {
  return new DOMParser({
    onError: (level, msg) => {
      if (level !== 'warning') throw new Error(msg);
    },
  }).parseFromString(xml, 'text/xml') as unknown as Document;
}

/** The summary of an NFS-e document; throws when it is not one. */
export function summarizeNfse(xml: string): NfseSummary {
  const doc = parseXml(xml);
  const inf = doc.getElementsByTagNameNS('*', 'infNFSe')[0];
  const id = inf?.getAttribute('Id') ?? '';
  if (!/^NFS[0-9A-Z]{50}$/.test(id)) throw new Error('not an NFS-e: no infNFSe with an Id NFS + 50 characters');
  const infDps = inf.getElementsByTagNameNS('*', 'infDPS')[0];
  return {
    accessKey: id.slice(3),
    number: text(inf, 'nNFSe') ?? '',
    processedAt: text(inf, 'dhProc') ?? '',
    dpsId: infDps?.getAttribute('Id') ?? '',
  };
}

/** Every element's text by local name, first occurrence (for the DANFSe). */
export function fieldsOf(xml: string, names: string[]): Record<string, string | undefined> {
  const doc = parseXml(xml);
  return Object.fromEntries(names.map((n) => [n, text(doc, n)]));
}
