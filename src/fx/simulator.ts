import http from 'node:http';
import type { AddressInfo } from 'node:net';

// A simulator of the BCB's PTAX OData service (Olinda, "PTAX/versao/v1/odata"), for `npm start` and
// the tests: CotacaoDolarDia(dataCotacao=@dataCotacao) and
// CotacaoDolarPeriodo(dataInicial=@dataInicial,dataFinalCotacao=@dataFinalCotacao), dates as
// 'MM-DD-YYYY' in the query, $format=json, $top and $orderby on dataHoraCotacao; one closing rate
// per business day (Monday to Friday), published at 13:10 São Paulo time. Rates are the ones set
// (setRate), else a fixed one (defaultSell). `down` answers 503 like the service when it is out.

export interface PtaxSimulator {
  url: string;
  setRate(date: string, sell: number, buy?: number): void;
  /** The rate of every business day not set. */
  defaultSell: number;
  down: boolean;
  close(): Promise<void>;
}

const DATE_PARAM = /^'(\d{2})-(\d{2})-(\d{4})'$/;
const spNow = () => {
  const parts = new Intl.DateTimeFormat('en-CA', {
    timeZone: 'America/Sao_Paulo',
    hourCycle: 'h23',
    year: 'numeric',
    month: '2-digit',
    day: '2-digit',
    hour: '2-digit',
    minute: '2-digit',
  }).formatToParts(new Date());
  const get = (t: string) => parts.find((p) => p.type === t)!.value;
  return { date: `${get('year')}-${get('month')}-${get('day')}`, minutes: Number(get('hour')) * 60 + Number(get('minute')) };
};

export async function startPtaxSimulator(o: { host?: string; port?: number; defaultSell?: number } = {}): Promise<PtaxSimulator> {
  const rates = new Map<string, { sell: number; buy: number }>();
  const state = { defaultSell: o.defaultSell ?? 5.4321, down: false };
  const param = (q: URLSearchParams, name: string): string | null => {
    const m = DATE_PARAM.exec(q.get(`@${name}`) ?? '');
    return m ? `${m[3]}-${m[1]}-${m[2]}` : null;
  };
  const rowsBetween = (from: string, to: string) => {
    const now = spNow();
    const out: { cotacaoCompra: number; cotacaoVenda: number; dataHoraCotacao: string }[] = [];
    for (let t = Date.parse(`${from}T00:00:00Z`); t <= Date.parse(`${to}T00:00:00Z`); t += 86_400_000) {
      const d = new Date(t);
      const date = d.toISOString().slice(0, 10);
      const weekday = d.getUTCDay();
      if (weekday === 0 || weekday === 6) continue;
      if (date > now.date || (date === now.date && now.minutes < 13 * 60 + 10)) continue; // not published yet
      const r = rates.get(date) ?? { sell: state.defaultSell, buy: Number((state.defaultSell - 0.0006).toFixed(4)) };
      out.push({ cotacaoCompra: r.buy, cotacaoVenda: r.sell, dataHoraCotacao: `${date} 13:09:40.608` });
    }
    return out;
  };
  const odataError = (res: http.ServerResponse, status: number, message: string) => {
    res.writeHead(status, { 'content-type': 'application/json;charset=utf-8' }).end(JSON.stringify({ error: { code: String(status), message } }));
  };
  const server = http.createServer((req, res) => {
    if (state.down) return odataError(res, 503, 'Serviço indisponível');
    const url = new URL(req.url ?? '/', 'http://ptax');
    const fn = /\/(CotacaoDolarDia|CotacaoDolarPeriodo)\(([^)]*)\)$/.exec(decodeURIComponent(url.pathname));
    if (req.method !== 'GET' || !fn) return odataError(res, 404, 'Recurso não encontrado');
    let rows: ReturnType<typeof rowsBetween>;
    if (fn[1] === 'CotacaoDolarDia') {
      const d = param(url.searchParams, 'dataCotacao');
      if (!d || fn[2] !== 'dataCotacao=@dataCotacao') return odataError(res, 400, "Parâmetro dataCotacao inválido: use 'MM-DD-AAAA'");
      rows = rowsBetween(d, d);
    } else {
      const a = param(url.searchParams, 'dataInicial');
      const b = param(url.searchParams, 'dataFinalCotacao');
      if (!a || !b || fn[2] !== 'dataInicial=@dataInicial,dataFinalCotacao=@dataFinalCotacao')
        return odataError(res, 400, "Parâmetros dataInicial e dataFinalCotacao inválidos: use 'MM-DD-AAAA'");
      rows = rowsBetween(a, b);
    }
    if (/desc$/i.test(url.searchParams.get('$orderby') ?? '')) rows.reverse();
    const top = Number(url.searchParams.get('$top') ?? NaN);
    if (Number.isInteger(top) && top >= 0) rows = rows.slice(0, top);
    const format = url.searchParams.get('$format') ?? 'json';
    if (format !== 'json') return odataError(res, 400, 'Formato não suportado pelo simulador (use $format=json)');
    const body = JSON.stringify({ '@odata.context': `${url.origin}/olinda/servico/PTAX/versao/v1/odata$metadata#_${fn[1]}`, value: rows });
    res.writeHead(200, { 'content-type': 'application/json;odata.metadata=minimal;charset=utf-8' }).end(body);
  });
  await new Promise<void>((resolve, reject) => {
    server.once('error', reject);
    server.listen(o.port ?? 0, o.host ?? '127.0.0.1', () => resolve());
  });
  const port = (server.address() as AddressInfo).port;
  return {
    url: `http://${o.host ?? '127.0.0.1'}:${port}/olinda/servico/PTAX/versao/v1/odata`,
    setRate: (date, sell, buy) => rates.set(date, { sell, buy: buy ?? Number((sell - 0.0006).toFixed(4)) }),
    get defaultSell() {
      return state.defaultSell;
    },
    set defaultSell(v: number) {
      state.defaultSell = v;
    },
    get down() {
      return state.down;
    },
    set down(v: boolean) {
      state.down = v;
    },
    close: () =>
      new Promise<void>((resolve) => {
        server.close(() => resolve());
        server.closeAllConnections();
      }),
  };
}
