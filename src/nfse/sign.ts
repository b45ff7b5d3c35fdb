import { SignedXml } from 'xml-crypto';
import type { A1Certificate } from './certificate.ts';

// XMLDSig of the national layout (manual, "Padrão de assinatura digital"): enveloped, one
// Reference to the Id of the signed group (infDPS, infPedReg), transforms enveloped-signature and
// canonical XML 1.0 (C14N, without comments), RSA with SHA-256, SHA-256 digest, and the signer's
// certificate in KeyInfo/X509Data; the <Signature> is the last child of the root (DPS,
// pedRegEvento) in the XMLDSig namespace without a prefix. The work is xml-crypto's.

export const C14N = 'http://www.w3.org/TR/2001/REC-xml-c14n-20010315';
export const ENVELOPED = 'http://www.w3.org/2000/09/xmldsig#enveloped-signature';
export const RSA_SHA256 = 'http://www.w3.org/2001/04/xmldsig-more#rsa-sha256';
export const SHA256 = 'http://www.w3.org/2001/04/xmlenc#sha256';

/** The document with the signature of its element `signed` (by local name) appended to its root `root`. */
export function signEnveloped(xml: string, signed: string, root: string, cert: Pick<A1Certificate, 'keyPem' | 'certPem'>): string {
  const sig = new SignedXml({
    privateKey: cert.keyPem,
    publicCert: cert.certPem,
    signatureAlgorithm: RSA_SHA256,
    canonicalizationAlgorithm: C14N,
  });
  sig.addReference({ xpath: `/*[local-name(.)='${root}']/*[local-name(.)='${signed}']`, transforms: [ENVELOPED, C14N], digestAlgorithm: SHA256 });
  sig.computeSignature(xml, { location: { reference: `/*[local-name(.)='${root}']`, action: 'append' } });
  return sig.getSignedXml();
}
