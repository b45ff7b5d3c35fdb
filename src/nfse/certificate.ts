import { generateKeyPairSync, X509Certificate } from 'node:crypto';
import forge from 'node-forge';

// The operator's ICP-Brasil A1 certificate: a PKCS#12 file (NFSE_CERT_PFX) and its password
// (NFSE_CERT_PASSWORD), read with node-forge. Its key signs the DPS and the events; it and its
// certificate are the client side of the mTLS connection to Sefin Nacional. The key stays in
// memory; nothing here logs it.

export interface A1Certificate {
  /** PEM of the private key (PKCS#8). A secret: never logged. */
  keyPem: string;
  /** PEM of the certificate, then of the chain the file carries (for TLS). */
  certPem: string;
  chainPem: string[];
  /** base64 of the certificate's DER, as <X509Certificate> carries it. */
  certBase64: string;
  /** The federal document in the certificate: ICP-Brasil puts it after the ':' of the CN ("RAZÃO SOCIAL:CNPJ"). */
  document: string | null;
  notAfter: Date;
}

export class CertificateError extends Error {}

/** Reads a PKCS#12 file's key and certificate (the one whose public key matches the key). */
export function readPkcs12(der: Buffer, password: string): A1Certificate {
  let p12: forge.pkcs12.Pkcs12Pfx;
  try {
    p12 = forge.pkcs12.pkcs12FromAsn1(forge.asn1.fromDer(forge.util.createBuffer(der.toString('binary'))), false, password);
  } catch (err) {
    // forge's message names the cause (a wrong password: "PKCS#12 MAC could not be verified"), never the password
    throw new CertificateError(`NFSE_CERT_PFX could not be read: ${(err as Error).message}`);
  }
  const keyBags = [
    ...(p12.getBags({ bagType: forge.pki.oids.pkcs8ShroudedKeyBag })[forge.pki.oids.pkcs8ShroudedKeyBag] ?? []),
    ...(p12.getBags({ bagType: forge.pki.oids.keyBag })[forge.pki.oids.keyBag] ?? []),
  ];
  const key = keyBags.find((b) => b.key)?.key as forge.pki.rsa.PrivateKey | undefined;
  if (!key) throw new CertificateError('NFSE_CERT_PFX holds no private key');
  const certs = (p12.getBags({ bagType: forge.pki.oids.certBag })[forge.pki.oids.certBag] ?? [])
    .map((b) => b.cert)
    .filter((c): c is forge.pki.Certificate => !!c);
  const own = certs.find((c) => {
    const pub = c.publicKey as forge.pki.rsa.PublicKey;
    return pub.n?.equals(key.n) && pub.e?.equals(key.e);
  });
  if (!own) throw new CertificateError('NFSE_CERT_PFX holds no certificate for its private key');
  const certPem = forge.pki.certificateToPem(own);
  const x509 = new X509Certificate(certPem);
  return {
    keyPem: forge.pki.privateKeyInfoToPem(forge.pki.wrapRsaPrivateKey(forge.pki.privateKeyToAsn1(key))),
    certPem,
    chainPem: certs.filter((c) => c !== own).map((c) => forge.pki.certificateToPem(c)),
    certBase64: x509.raw.toString('base64'),
    document: documentOfCertificate(x509),
    notAfter: new Date(x509.validTo),
  };
}

/** The CNPJ or CPF after the last ':' of the subject's CN (ICP-Brasil's e-CNPJ and e-CPF), or null. */
export function documentOfCertificate(cert: X509Certificate): string | null {
  const cn = /(?:^|\n)CN=([^\n]*)/.exec(cert.subject)?.[1] ?? '';
  const m = /:([0-9A-Z]{14}|\d{11})$/.exec(cn.trim());
  return m ? m[1] : null;
}

/**
 * A self-signed certificate in ICP-Brasil's shape (CN "NAME:CNPJ"), as a PKCS#12 file: what
 * `npm start` and the tests give catraca and the Sefin simulator. Never trusted by the real service.
 */
export function selfSignedPkcs12(o: { name: string; document: string; password: string; days?: number; now?: Date }): { pfx: Buffer; certPem: string } {
  const { privateKey } = generateKeyPairSync('rsa', { modulusLength: 2048 });
  const key = forge.pki.privateKeyFromPem(privateKey.export({ type: 'pkcs1', format: 'pem' }).toString()) as forge.pki.rsa.PrivateKey;
  const cert = forge.pki.createCertificate();
  cert.publicKey = forge.pki.setRsaPublicKey(key.n, key.e);
  cert.serialNumber = `01${Date.now().toString(16)}`;
  const now = o.now ?? new Date();
  cert.validity.notBefore = new Date(now.getTime() - 60_000);
  cert.validity.notAfter = new Date(now.getTime() + (o.days ?? 365) * 86_400_000);
  const attrs = [
    { name: 'countryName', value: 'BR' },
    { name: 'organizationName', value: 'ICP-Brasil' },
    { name: 'commonName', value: `${o.name}:${o.document}` },
  ];
  cert.setSubject(attrs);
  cert.setIssuer(attrs);
  cert.setExtensions([
    { name: 'basicConstraints', cA: false },
    { name: 'keyUsage', digitalSignature: true, nonRepudiation: true, keyEncipherment: true },
    { name: 'extKeyUsage', clientAuth: true, serverAuth: true },
    {
      name: 'subjectAltName',
      altNames: [
        { type: 2, value: 'localhost' },
        { type: 7, ip: '127.0.0.1' },
      ],
    },
  ]);
  cert.sign(key, forge.md.sha256.create());
  const asn1 = forge.pkcs12.toPkcs12Asn1(key, [cert], o.password, { algorithm: '3des', friendlyName: o.name });
  return { pfx: Buffer.from(forge.asn1.toDer(asn1).getBytes(), 'binary'), certPem: forge.pki.certificateToPem(cert) };
}
