import { createDynamicPix, hasError, parsePix } from 'pix-utils';
import QRCode from 'qrcode';

/**
 * BR Code of a dynamic charge: merchant account information carries the PSP's `location`
 * (payload URL), the amount lives in the payload the payer's bank fetches. Built and CRC'd by
 * pix-utils; `crc16` below is an independent check (BCB's example ends in 63041D3D).
 */
export function buildDynamicBrCode(a: { location: string; merchantName: string; merchantCity: string }): string {
  const pix = createDynamicPix({
    merchantName: a.merchantName.slice(0, 25),
    merchantCity: a.merchantCity.slice(0, 15),
    url: a.location.replace(/^https?:\/\//, ''),
    oneTime: true, // point of initiation 12: a charge's QR is paid once
  });
  if (hasError(pix)) throw new Error(`cannot build BR Code: ${(pix as { message?: string }).message ?? 'invalid'}`);
  return (pix as { toBRCode(): string }).toBRCode();
}

/** CRC16/CCITT-FALSE (poly 0x1021, init 0xFFFF) as the BR Code specifies, 4 upper-case hex digits. */
export function crc16(payload: string): string {
  let crc = 0xffff;
  for (const byte of Buffer.from(payload, 'utf8')) {
    crc ^= byte << 8;
    for (let i = 0; i < 8; i++) crc = crc & 0x8000 ? ((crc << 1) ^ 0x1021) & 0xffff : (crc << 1) & 0xffff;
  }
  return crc.toString(16).toUpperCase().padStart(4, '0');
}

/** True when the payload ends in a CRC field (6304XXXX) matching its content. */
export function hasValidCrc(brCode: string): boolean {
  const m = /^(.*6304)([0-9A-F]{4})$/.exec(brCode);
  return !!m && crc16(m[1]) === m[2];
}

/** Parses a BR Code with pix-utils; false when it is not a valid Pix payload. */
export function isValidBrCode(brCode: string): boolean {
  return hasValidCrc(brCode) && !hasError(parsePix(brCode));
}

/** QR image of a BR Code as an SVG document (inline in the charge page). */
export async function qrSvg(brCode: string): Promise<string> {
  return QRCode.toString(brCode, { type: 'svg', errorCorrectionLevel: 'M', margin: 2 });
}

/** QR image of a BR Code as a PNG data URL. */
export async function qrDataUrl(brCode: string): Promise<string> {
  return QRCode.toDataURL(brCode, { errorCorrectionLevel: 'M', margin: 2, width: 280 });
}

/** QR image of a BR Code as PNG bytes (inline in an e-mail, `cid:`). */
export async function qrPng(brCode: string): Promise<Buffer> {
  return QRCode.toBuffer(brCode, { type: 'png', errorCorrectionLevel: 'M', margin: 2, width: 280 });
}

/** One EMV field: id, two-digit length, value. */
const tlv = (id: string, value: string) => `${id}${String(value.length).padStart(2, '0')}${value}`;

/**
 * BR Code of a Pix Automático recurrence (the QR the payer's bank reads to authorize it): field 80
 * carries the recurrence's location (GUI br.gov.bcb.pix, sub-field 25). With `cobBrCode` it is the
 * composite QR of journey 3 (that one-off charge paid, and the recurrence authorized, in one scan);
 * without, the QR of journey 2 (authorization alone: no amount, field 26 only the GUI).
 */
export function buildRecurrenceBrCode(a: { recLocation: string; merchantName: string; merchantCity: string; cobBrCode?: string }): string {
  const field80 = tlv('80', tlv('00', 'br.gov.bcb.pix') + tlv('25', a.recLocation.replace(/^https?:\/\//, '')));
  let head: string;
  if (a.cobBrCode) {
    if (!hasValidCrc(a.cobBrCode)) throw new Error('not a BR Code');
    head = a.cobBrCode.slice(0, -8);
  } else {
    head =
      tlv('00', '01') +
      tlv('26', tlv('00', 'br.gov.bcb.pix')) +
      tlv('52', '0000') +
      tlv('53', '986') +
      tlv('58', 'BR') +
      tlv('59', a.merchantName.slice(0, 25)) +
      tlv('60', a.merchantCity.slice(0, 15)) +
      tlv('62', tlv('05', '***'));
  }
  const payload = `${head}${field80}6304`;
  return payload + crc16(payload);
}
