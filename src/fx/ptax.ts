import { z } from 'zod';

// The dollar's PTAX rate from the Banco Central's open data service (Olinda, OData v4):
//   GET {PTAX_URL}/CotacaoDolarPeriodo(dataInicial=@dataInicial,dataFinalCotacao=@dataFinalCotacao)
//       ?@dataInicial='MM-DD-YYYY'&@dataFinalCotacao='MM-DD-YYYY'&$format=json
//   → {"@odata.context": …, "value": [{"cotacaoCompra": 5.4272, "cotacaoVenda": 5.4278, "dataHoraCotacao": "2025-09-08 13:09:40.608"}, …]}
// One row per business day (the closing PTAX), oldest first; none on weekends and holidays. The
// selling rate (cotacaoVenda) has 4 decimals: kept exactly as micro-BRL per USD.
// And USD prices sold in BRL (docs/billing.md, "Prices in dollars"):
//   BRL price (micro-BRL per 1M tokens) = ceil(USD price (micro-USD per 1M tokens) × rate (micro-BRL per USD) × markup (ppm) / 10^12)

export const DEFAULT_PTAX_URL = 'https://olinda.bcb.gov.br/olinda/servico/PTAX/versao/v1/odata';

export interface PtaxQuote {
  /** micro-BRL per USD (cotacaoVenda × 10^6). */
  sellMicros: bigint;
  buyMicros: bigint;
  /** The quote's date (São Paulo), YYYY-MM-DD. */
  date: string;
  /** dataHoraCotacao as published (São Paulo local time). */
  publishedAt: string;
}

const RowSchema = z.object({
  cotacaoCompra: z.number().positive(),
  cotacaoVenda: z.number().positive(),
  dataHoraCotacao: z.string().regex(/^\d{4}-\d{2}-\d{2} \d{2}:\d{2}:\d{2}(\.\d{1,3})?$/),
});
const BodySchema = z.object({ value: z.array(RowSchema) });

/** A decimal number as published (up to 6 decimals) → millionths, exactly (no float arithmetic on the digits). */
export function toMillionths(n: number): bigint {
  const text = n.toFixed(6);
  const [int, frac] = text.split('.');
  return BigInt(int) * 1_000_000n + BigInt(frac);
}

/** "MM-DD-YYYY", the OData function parameters' date format. */
const odataDate = (isoDate: string) => `${isoDate.slice(5, 7)}-${isoDate.slice(8, 10)}-${isoDate.slice(0, 4)}`;

export class PtaxError extends Error {
  constructor(message: string) {
    super(message);
    this.name = 'PtaxError';
  }
}

/** The last PTAX published on or before `untilDate` (looking back 10 days: weekends and holidays have none). */
export async function fetchLastPtax(baseUrl: string, untilDate: string, timeoutMs = 10_000): Promise<PtaxQuote> {
  const from = new Date(Date.parse(`${untilDate}T00:00:00Z`) - 10 * 86_400_000).toISOString().slice(0, 10);
  const url =
    `${baseUrl.replace(/\/+$/, '')}/CotacaoDolarPeriodo(dataInicial=@dataInicial,dataFinalCotacao=@dataFinalCotacao)` +
    `?@dataInicial='${odataDate(from)}'&@dataFinalCotacao='${odataDate(untilDate)}'&$format=json&$orderby=dataHoraCotacao%20desc&$top=1`;
  let json: unknown;
  try {
    const res = await fetch(url, { headers: { accept: 'application/json' }, signal: AbortSignal.timeout(timeoutMs) });
    if (res.status !== 200) throw new PtaxError(`PTAX service answered HTTP ${res.status}`);
    json = await res.json().catch(() => null);
  } catch (err) {
    if (err instanceof PtaxError) throw err;
    throw new PtaxError(`PTAX service unreachable: ${(err as Error).message}`);
  }
  const body = BodySchema.safeParse(json);
  if (!body.success) throw new PtaxError(`PTAX answer not understood: ${body.error.issues[0]?.message}`);
  const last = [...body.data.value].sort((a, b) => a.dataHoraCotacao.localeCompare(b.dataHoraCotacao)).at(-1);
  if (!last) throw new PtaxError(`no PTAX published between ${from} and ${untilDate}`);
  return {
    sellMicros: toMillionths(last.cotacaoVenda),
    buyMicros: toMillionths(last.cotacaoCompra),
    date: last.dataHoraCotacao.slice(0, 10),
    publishedAt: last.dataHoraCotacao,
  };
}

/** 1.30 → 1_300_000 (parts per million); up to 6 decimals, from 1 to 100. */
export function parseMarkup(text: string): bigint | null {
  const m = /^(\d{1,3})(?:[.,](\d{1,6}))?$/.exec(String(text ?? '').trim());
  if (!m) return null;
  const ppm = BigInt(m[1]) * 1_000_000n + BigInt((m[2] ?? '').padEnd(6, '0'));
  return ppm >= 1_000_000n && ppm <= 100_000_000n ? ppm : null;
}

/** The BRL price of a USD price: ceil(usd × rate × markup / 10^12), micro-BRL per 1M tokens. */
export function brlFromUsd(usdMicros: bigint, rateMicros: bigint, markupPpm: bigint): bigint {
  const p = usdMicros * rateMicros * markupPpm;
  const d = 1_000_000_000_000n;
  return (p + d - 1n) / d;
}
