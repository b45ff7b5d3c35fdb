// Line charts as standalone SVG, written by hand (no plotting dependency): one chart, any number
// of series over a shared x axis, axes with "nice" ticks, a legend. Good enough for the soak's
// RSS / lag / holds / subscriptions over time.

export interface Series {
  name: string;
  points: Array<[number, number]>;
}

export interface ChartOptions {
  title: string;
  xLabel: string;
  yLabel: string;
  series: Series[];
  width?: number;
  height?: number;
  /** y axis starts at 0 (default true) */
  zeroBased?: boolean;
}

const COLORS = ['#1f77b4', '#d62728', '#2ca02c', '#ff7f0e', '#9467bd', '#8c564b', '#e377c2', '#17becf', '#7f7f7f', '#bcbd22'];

const esc = (s: string) => s.replace(/&/g, '&amp;').replace(/</g, '&lt;').replace(/>/g, '&gt;').replace(/"/g, '&quot;');

/** About `count` round tick values covering [lo, hi]. */
export function niceTicks(lo: number, hi: number, count = 6): number[] {
  if (!Number.isFinite(lo) || !Number.isFinite(hi)) return [0, 1];
  if (hi <= lo) hi = lo + 1;
  const raw = (hi - lo) / count;
  const mag = 10 ** Math.floor(Math.log10(raw));
  const step = [1, 2, 2.5, 5, 10].map((m) => m * mag).find((s) => s >= raw) ?? 10 * mag;
  const ticks: number[] = [];
  for (let v = Math.floor(lo / step) * step; v <= hi + step * 1e-9; v += step) ticks.push(Math.round(v / step) * step);
  if (ticks[ticks.length - 1]! < hi) ticks.push(ticks[ticks.length - 1]! + step);
  return ticks;
}

const fmt = (v: number) => (Math.abs(v) >= 1000 ? String(Math.round(v)) : String(Math.round(v * 100) / 100));

export function lineChart(o: ChartOptions): string {
  const W = o.width ?? 900;
  const H = o.height ?? 380;
  const m = { left: 70, right: 190, top: 40, bottom: 50 };
  const pw = W - m.left - m.right;
  const ph = H - m.top - m.bottom;
  const all = o.series.flatMap((s) => s.points).filter(([x, y]) => Number.isFinite(x) && Number.isFinite(y));
  const xs = all.map(([x]) => x);
  const ys = all.map(([, y]) => y);
  const xt = niceTicks(xs.length ? Math.min(...xs) : 0, xs.length ? Math.max(...xs) : 1);
  const yt = niceTicks(o.zeroBased === false && ys.length ? Math.min(...ys) : 0, ys.length ? Math.max(...ys, 0) : 1, 5);
  const [x0, x1] = [xt[0]!, xt[xt.length - 1]!];
  const [y0, y1] = [yt[0]!, yt[yt.length - 1]!];
  const sx = (x: number) => m.left + ((x - x0) / (x1 - x0 || 1)) * pw;
  const sy = (y: number) => m.top + ph - ((y - y0) / (y1 - y0 || 1)) * ph;
  const out: string[] = [];
  out.push(`<svg xmlns="http://www.w3.org/2000/svg" width="${W}" height="${H}" viewBox="0 0 ${W} ${H}" font-family="sans-serif" font-size="12">`);
  out.push(`<rect width="${W}" height="${H}" fill="#fff"/>`);
  out.push(`<text x="${m.left}" y="22" font-size="15" font-weight="bold">${esc(o.title)}</text>`);
  for (const t of yt) {
    out.push(`<line x1="${m.left}" x2="${m.left + pw}" y1="${sy(t).toFixed(1)}" y2="${sy(t).toFixed(1)}" stroke="#e5e5e5"/>`);
    out.push(`<text x="${m.left - 6}" y="${(sy(t) + 4).toFixed(1)}" text-anchor="end">${fmt(t)}</text>`);
  }
  for (const t of xt) {
    out.push(`<line x1="${sx(t).toFixed(1)}" x2="${sx(t).toFixed(1)}" y1="${m.top}" y2="${m.top + ph}" stroke="#f0f0f0"/>`);
    out.push(`<text x="${sx(t).toFixed(1)}" y="${m.top + ph + 16}" text-anchor="middle">${fmt(t)}</text>`);
  }
  out.push(`<rect x="${m.left}" y="${m.top}" width="${pw}" height="${ph}" fill="none" stroke="#888"/>`);
  out.push(`<text x="${m.left + pw / 2}" y="${H - 10}" text-anchor="middle">${esc(o.xLabel)}</text>`);
  out.push(`<text transform="translate(16 ${m.top + ph / 2}) rotate(-90)" text-anchor="middle">${esc(o.yLabel)}</text>`);
  o.series.forEach((s, i) => {
    const color = COLORS[i % COLORS.length];
    const pts = s.points.filter(([x, y]) => Number.isFinite(x) && Number.isFinite(y));
    if (pts.length) {
      const d = pts.map(([x, y], j) => `${j ? 'L' : 'M'}${sx(x).toFixed(1)} ${sy(y).toFixed(1)}`).join(' ');
      out.push(`<path d="${d}" fill="none" stroke="${color}" stroke-width="1.6"/>`);
    }
    const ly = m.top + 10 + i * 18;
    out.push(`<line x1="${m.left + pw + 12}" x2="${m.left + pw + 34}" y1="${ly}" y2="${ly}" stroke="${color}" stroke-width="3"/>`);
    out.push(`<text x="${m.left + pw + 40}" y="${ly + 4}">${esc(s.name)}</text>`);
  });
  out.push('</svg>');
  return out.join('\n') + '\n';
}
