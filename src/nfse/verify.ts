import { X509Certificate } from 'node:crypto';
import { DOMParser } from '@xmldom/xmldom';
import { SignedXml } from 'xml-crypto';
import { C14N, ENVELOPED, RSA_SHA256, SHA256 } from './sign.ts';

// Checking a signature of the national layout, as Sefin does: exactly one <Signature> as the last
// child of the root, RSA-SHA256 over C14N, one Reference whose URI is the Id of the signed group,
// and the certificate in its KeyInfo — which must verify the signature (xml-crypto). The caller
// compares that certificate with whom it expects (the mTLS client, the prestador).

const DSIG_NS = 'http://www.w3.org/2000/09/xmldsig#';

export type SignatureCheck = { ok: true; cert: X509Certificate } | { ok: false; reason: string; missing?: boolean };

export function checkEnveloped(xml: string, signed: string): SignatureCheck {
  let doc: Document;
  try {
    doc = new DOMParser({
      onError: (level, msg) => {
        if (level !== 'warning') throw new Error(msg);
      },
    }).parseFromString(xml, 'text/xml') as unknown as Document;
  } catch (err) {
    return { ok: false, reason: `not well-formed: ${(err as Error).message}` };
  }
  const root = doc.documentElement;
  if (!root) return { ok: false, reason: 'no root element' };
  // the root's own signature (an NFS-e also carries the DPS's, inside it)
  const sigs = Array.from(root.childNodes).filter((n) => n.nodeType === 1 && (n as Element).localName === 'Signature') as Element[];
  if (sigs.length === 0) return { ok: false, reason: 'no signature', missing: true };
  if (sigs.length > 1) return { ok: false, reason: 'more than one signature' };
  const sigNode = sigs[0];
  if (sigNode.namespaceURI !== DSIG_NS) return { ok: false, reason: 'the signature is not in the XMLDSig namespace' };
  if (root.lastChild !== sigNode) return { ok: false, reason: 'the signature is not the last child of the root' };
  const group = Array.from(root.childNodes).find((n) => n.nodeType === 1 && (n as Element).localName === signed) as Element | undefined;
  const id = group?.getAttribute('Id');
  if (!group || !id) return { ok: false, reason: `no ${signed} with an Id` };
  const certText = sigNode.getElementsByTagNameNS(DSIG_NS, 'X509Certificate')[0]?.textContent?.replace(/\s+/g, '');
  if (!certText) return { ok: false, reason: 'no X509Certificate in KeyInfo' };
  let cert: X509Certificate;
  try {
    cert = new X509Certificate(Buffer.from(certText, 'base64'));
  } catch {
    return { ok: false, reason: 'the X509Certificate cannot be read' };
  }
  const method = (name: string) => sigNode.getElementsByTagNameNS(DSIG_NS, name)[0]?.getAttribute('Algorithm');
  if (method('SignatureMethod') !== RSA_SHA256) return { ok: false, reason: `SignatureMethod is not ${RSA_SHA256}` };
  if (method('CanonicalizationMethod') !== C14N) return { ok: false, reason: `CanonicalizationMethod is not ${C14N}` };
  if (method('DigestMethod') !== SHA256) return { ok: false, reason: `DigestMethod is not ${SHA256}` };
  const refs = sigNode.getElementsByTagNameNS(DSIG_NS, 'Reference');
  if (refs.length !== 1 || refs[0].getAttribute('URI') !== `#${id}`) return { ok: false, reason: `the reference is not to #${id}` };
  const transforms = Array.from(refs[0].getElementsByTagNameNS(DSIG_NS, 'Transform')).map((t) => t.getAttribute('Algorithm'));
  if (transforms.join(' ') !== `${ENVELOPED} ${C14N}`) return { ok: false, reason: 'the transforms are not enveloped-signature and C14N' };
  const verifier = new SignedXml({ publicCert: cert.toString(), getCertFromKeyInfo: () => null });
  try {
    verifier.loadSignature(sigNode as unknown as Node);
    if (!verifier.checkSignature(xml)) return { ok: false, reason: 'the signature does not verify' };
  } catch (err) {
    return { ok: false, reason: `the signature does not verify: ${(err as Error).message}` };
  }
  return { ok: true, cert };
}
