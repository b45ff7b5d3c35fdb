import type { UpstreamKeyCheck } from '../../catalog/upstream-keys.ts';
import type { DeploymentRow } from '../../bus/instances.ts';
import { formatBrl } from '../../billing/money.ts';
import type { DeploymentRecord, ModelRecord } from '../../db/models.ts';
import { dateTime, int, price } from '../../web/format.ts';
import { html, raw, type SafeHtml } from '../../web/html.ts';
import { type CatalogModel, keyCheck, type VendorCost, type WorkerState } from '../catalog.ts';
import { csrfField, table, type ViewCtx } from './layout.ts';

const usd = (c: ViewCtx, micros: bigint) => price(c.lang, micros).replace('R$', 'US$');
const vendorPrice = (c: ViewCtx, v: VendorCost, micros: bigint) => (v.currency === 'USD' ? usd(c, micros) : price(c.lang, micros));
/**
 * A price field's value: the exact decimal without trailing zeros ("" when unset), never three
 * decimals after a non-zero integer (1.125 would be refused as ambiguous when sent back: 1.1250).
 */
export function priceValue(micros: bigint | null | undefined): string {
  if (micros === null || micros === undefined) return '';
  const s = formatBrl(micros).replace(/\.?0+$/, '');
  return /^[1-9]\d*\.\d{3}$/.test(s) ? `${s}0` : s;
}

function healthCell(c: ViewCtx, h: DeploymentRow | undefined, reached: boolean): SafeHtml {
  if (!reached) return html`<span class="muted">${c.t('catalog.no_nats')}</span>`;
  if (!h) return html`<span class="muted">${c.t('catalog.no_calls')}</span>`;
  const ok = h.healthy === h.runners && h.circuits_open === 0;
  return html`<span class="badge s-${ok ? 'CONCLUIDA' : 'EXPIRADA'}" data-testid="health">${c.t('catalog.healthy', { healthy: h.healthy, runners: h.runners })}</span>
<small>${c.t('catalog.served', { served: int(c.lang, h.served), failed: int(c.lang, h.failed) })}${h.circuits_open ? ` · ${c.t('catalog.circuits', { n: h.circuits_open })}` : ''}${h.last_error ? ` · ${h.last_error}` : ''}</small>`;
}

function keyCell(c: ViewCtx, variable: string | null, check: UpstreamKeyCheck | null): SafeHtml {
  if (!variable) return html`<span class="muted">—</span>`;
  if (!check) return html`<code>${variable}</code> <small class="muted">${c.t('catalog.key_unchecked')}</small>`;
  const problems = [
    check.noWorker ? c.t('catalog.key_no_worker') : null,
    check.unlisted.length ? c.t('catalog.key_unlisted', { workers: check.unlisted.join(', ') }) : null,
    check.empty.length ? c.t('catalog.key_empty', { workers: check.empty.join(', ') }) : null,
  ].filter((p): p is string => p !== null);
  return problems.length
    ? html`<code>${variable}</code> <small class="warn" data-testid="key-problem">${problems.join('; ')}</small>`
    : html`<code>${variable}</code> <small data-testid="key-ok">${c.t('catalog.key_ok')}</small>`;
}

function vendorCell(c: ViewCtx, v: VendorCost | null): SafeHtml {
  if (!v) return html`<span class="muted" data-testid="vendor-cost">${c.t('catalog.no_vendor_cost')}</span>`;
  return html`<span data-testid="vendor-cost">${vendorPrice(c, v, v.input_price)} / ${v.cached_input_price === null ? '—' : vendorPrice(c, v, v.cached_input_price)} / ${vendorPrice(c, v, v.output_price)}</span>${
    v.currency === 'USD' ? html`<br><small>${c.t('catalog.rate', { rate: price(c.lang, v.usd_brl_micros ?? 0n) })}</small>` : ''
  }${
    hasBatchPrices(v)
      ? html`<br><small data-testid="vendor-batch-cost">${c.t('catalog.vendor_batch', {
          input: vendorPrice(c, v, v.batch_input_price ?? v.input_price),
          output: vendorPrice(c, v, v.batch_output_price ?? v.output_price),
        })}</small>`
      : ''
  }`;
}

const BATCH_PRICES = ['batch_input_price', 'batch_cached_input_price', 'batch_cache_write_price', 'batch_cache_write_1h_price', 'batch_output_price'] as const;
const hasBatchPrices = (v: VendorCost) => BATCH_PRICES.some((k) => v[k] !== null && v[k] !== undefined);

/** input / cached / cache write / 1 h write / output; — where a price is not set (it falls back). */
function priceList(c: ViewCtx, v: VendorCost, prices: Array<bigint | null | undefined>): string {
  return prices.map((p) => (p === null || p === undefined ? '—' : vendorPrice(c, v, p))).join(' / ');
}

function historyTable(c: ViewCtx, rows: Array<VendorCost & { set_by_email?: string | null }>): SafeHtml {
  return table(
    c,
    'vendor-history',
    [c.t('vendor.valid_from'), c.t('vendor.currency'), c.t('vendor.online'), c.t('vendor.batch'), c.t('vendor.rate'), c.t('vendor.set_by')],
    rows.map(
      (v) => html`<tr data-testid="vendor-history-row" data-id="${v.id}"><td>${dateTime(c.lang, v.valid_from)}</td><td>${v.currency}</td>
<td data-testid="history-online">${priceList(c, v, [v.input_price, v.cached_input_price, v.cache_write_price, v.cache_write_1h_price, v.output_price])}</td>
<td data-testid="history-batch">${priceList(
        c,
        v,
        BATCH_PRICES.map((k) => v[k]),
      )}</td>
<td>${v.usd_brl_micros === null ? '—' : price(c.lang, v.usd_brl_micros)}</td><td>${v.set_by_email ?? v.set_by ?? '—'}</td></tr>`,
    ),
  );
}

function deploymentLine(c: ViewCtx, m: ModelRecord, d: DeploymentRecord | null, ws: WorkerState): SafeHtml {
  const name = d?.name ?? 'primary';
  const health = ws.deployments.find((h) => h.model === m.id && h.deployment === name);
  const variable = d ? d.api_key_env : m.api_key_env;
  return html`<tr class="deployment" data-testid="deployment-row" data-model="${m.id}" data-deployment="${name}"><td>↳ ${name}<br><small>${(d ? d.base_url : m.base_url) ?? ''}</small></td>
<td colspan="2"><small>${c.t('catalog.weight', { n: d ? d.weight : m.weight })}</small></td>
<td class="num">${d?.input_price != null ? price(c.lang, d.input_price) : html`<span class="muted">${c.t('catalog.model_price')}</span>`}</td>
<td class="num">${d?.cached_input_price != null ? price(c.lang, d.cached_input_price) : html`<span class="muted">—</span>`}</td>
<td class="num">${d?.output_price != null ? price(c.lang, d.output_price) : html`<span class="muted">${c.t('catalog.model_price')}</span>`}</td>
<td>${keyCell(c, variable, keyCheck(ws, m.pool, variable))}</td><td>${healthCell(c, health, ws.reached)}</td><td></td></tr>`;
}

export function catalogPage(c: ViewCtx, d: { models: CatalogModel[]; workers: WorkerState }): SafeHtml {
  const rows = d.models.flatMap(({ model: m, deployments, vendorCost }) => [
    html`<tr data-testid="model-row" data-model="${m.id}"><td><strong><code>${m.id}</code></strong><br><small>${m.upstream_model}</small></td>
<td>${m.pool}</td><td>${m.protocol} · ${m.kind}</td>
<td class="num" data-testid="price-input">${price(c.lang, m.input_price)}</td>
<td class="num" data-testid="price-cached">${m.cached_input_price === null ? html`<span class="muted">—</span>` : price(c.lang, m.cached_input_price)}</td>
<td class="num" data-testid="price-output">${price(c.lang, m.output_price)}${
      m.batch_input_price !== null || m.batch_output_price !== null
        ? html`<br><small data-testid="price-batch">${c.t('catalog.vendor_batch', {
            input: price(c.lang, m.batch_input_price ?? m.input_price),
            output: price(c.lang, m.batch_output_price ?? m.output_price),
          })}</small>`
        : ''
    }</td>
<td colspan="2">${vendorCell(c, vendorCost)}</td>
<td><a class="button small" href="/catalog/models/${m.id}">${c.t('catalog.edit')}</a></td></tr>`,
    deploymentLine(c, m, null, d.workers),
    ...deployments.map((dep) => deploymentLine(c, m, dep, d.workers)),
  ]);
  return html`<h1>${c.t('catalog.title')}</h1>
<p class="muted">${c.t('catalog.intro')}</p>
${d.workers.reached ? '' : html`<p class="error">${c.t('catalog.no_nats_long')}</p>`}
<section class="card">${table(
    c,
    'catalog',
    [
      c.t('catalog.model'),
      c.t('catalog.pool'),
      c.t('catalog.protocol'),
      { text: c.t('catalog.input'), num: true },
      { text: c.t('catalog.cached'), num: true },
      { text: c.t('catalog.output'), num: true },
      c.t('catalog.vendor_or_key'),
      c.t('catalog.health'),
      '',
    ],
    rows,
  )}</section>`;
}

export interface ModelPageData {
  model: ModelRecord;
  deployments: DeploymentRecord[];
  vendorCost: VendorCost | null;
  /** the model's vendor costs, newest first */
  history?: Array<VendorCost & { set_by_email?: string | null }>;
  form?: Record<string, string>;
}

export function modelPage(c: ViewCtx, d: ModelPageData): SafeHtml {
  const m = d.model;
  const f = d.form ?? {};
  const v = d.vendorCost;
  const val = (name: string, current: string) => f[name] ?? current;
  const currency = val('currency', v?.currency ?? 'USD');
  return html`<h1><code>${m.id}</code></h1>
<p class="muted">${m.pool} · ${m.protocol} · ${m.upstream_model} · ${c.t('catalog.updated', { when: dateTime(c.lang, m.updated_at) })}</p>
<div class="grid2">
<section class="card"><h2>${c.t('catalog.prices_title')}</h2><p class="muted">${c.t('catalog.prices_text')}</p>
<form method="post" action="/catalog/models/${m.id}" data-testid="prices-form">${csrfField(c)}
<label>${c.t('catalog.input_price')}<input type="text" name="input_price" inputmode="decimal" required value="${val('input_price', priceValue(m.input_price))}"></label>
<label>${c.t('catalog.cached_price')}<input type="text" name="cached_input_price" inputmode="decimal" value="${val('cached_input_price', priceValue(m.cached_input_price))}"><small>${c.t('catalog.cached_hint')}</small></label>
<label>${c.t('catalog.output_price')}<input type="text" name="output_price" inputmode="decimal" required value="${val('output_price', priceValue(m.output_price))}"></label>
<fieldset data-testid="prices-batch"><legend>${c.t('catalog.batch_title')}</legend><p class="muted"><small>${c.t('catalog.batch_text')}</small></p>
<label>${c.t('catalog.batch_input')}<input type="text" name="batch_input_price" inputmode="decimal" value="${val('batch_input_price', priceValue(m.batch_input_price))}"></label>
<label>${c.t('catalog.batch_cached')}<input type="text" name="batch_cached_input_price" inputmode="decimal" value="${val('batch_cached_input_price', priceValue(m.batch_cached_input_price))}"></label>
<label>${c.t('catalog.batch_output')}<input type="text" name="batch_output_price" inputmode="decimal" value="${val('batch_output_price', priceValue(m.batch_output_price))}"></label>
</fieldset>
<label>${c.t('common.reason')}<input type="text" name="reason" maxlength="500" value="${f.reason ?? ''}"></label>
<button type="submit">${c.t('catalog.save_prices')}</button></form></section>
<section class="card"><h2>${c.t('vendor.title')}</h2><p class="muted">${c.t('vendor.text')}</p>
<form method="post" action="/catalog/models/${m.id}/vendor-cost" data-testid="vendor-form">${csrfField(c)}
<label>${c.t('vendor.currency')}<select name="currency"><option value="USD"${currency === 'USD' ? raw(' selected') : ''}>USD</option><option value="BRL"${currency === 'BRL' ? raw(' selected') : ''}>BRL</option></select></label>
<label>${c.t('vendor.input')}<input type="text" name="v_input" inputmode="decimal" required value="${val('v_input', priceValue(v?.input_price))}"></label>
<label>${c.t('vendor.cached')}<input type="text" name="v_cached" inputmode="decimal" value="${val('v_cached', priceValue(v?.cached_input_price))}"></label>
<label>${c.t('vendor.cache_write')}<input type="text" name="v_cache_write" inputmode="decimal" value="${val('v_cache_write', priceValue(v?.cache_write_price))}"></label>
<label>${c.t('vendor.cache_write_1h')}<input type="text" name="v_cache_write_1h" inputmode="decimal" value="${val('v_cache_write_1h', priceValue(v?.cache_write_1h_price))}"></label>
<label>${c.t('vendor.output')}<input type="text" name="v_output" inputmode="decimal" required value="${val('v_output', priceValue(v?.output_price))}"></label>
<label>${c.t('vendor.rate')}<input type="text" name="usd_brl" inputmode="decimal" value="${val('usd_brl', priceValue(v?.usd_brl_micros))}"><small>${c.t('vendor.rate_hint')}</small></label>
<fieldset data-testid="vendor-batch"><legend>${c.t('vendor.batch_title')}</legend><p class="muted"><small>${c.t('vendor.batch_text')}</small></p>
<label>${c.t('vendor.batch_input')}<input type="text" name="v_batch_input" inputmode="decimal" value="${val('v_batch_input', priceValue(v?.batch_input_price))}"></label>
<label>${c.t('vendor.batch_cached')}<input type="text" name="v_batch_cached" inputmode="decimal" value="${val('v_batch_cached', priceValue(v?.batch_cached_input_price))}"></label>
<label>${c.t('vendor.batch_cache_write')}<input type="text" name="v_batch_cache_write" inputmode="decimal" value="${val('v_batch_cache_write', priceValue(v?.batch_cache_write_price))}"></label>
<label>${c.t('vendor.batch_cache_write_1h')}<input type="text" name="v_batch_cache_write_1h" inputmode="decimal" value="${val('v_batch_cache_write_1h', priceValue(v?.batch_cache_write_1h_price))}"></label>
<label>${c.t('vendor.batch_output')}<input type="text" name="v_batch_output" inputmode="decimal" value="${val('v_batch_output', priceValue(v?.batch_output_price))}"></label>
</fieldset>
<button type="submit">${c.t('vendor.save')}</button></form>
${v ? html`<p class="muted"><small>${c.t('vendor.since', { when: dateTime(c.lang, v.valid_from) })}</small></p>` : ''}</section>
</div>
${d.history?.length ? html`<section class="card"><h2>${c.t('vendor.history')}</h2><p class="muted"><small>${c.t('vendor.history_text')}</small></p>${historyTable(c, d.history)}</section>` : ''}
${d.deployments.length ? html`<section class="card"><h2>${c.t('catalog.deployments')}</h2>${d.deployments.map((dep) => deploymentForm(c, dep))}</section>` : ''}
<p><a href="/catalog">${c.t('catalog.back')}</a></p>`;
}

function deploymentForm(c: ViewCtx, d: DeploymentRecord): SafeHtml {
  return html`<form method="post" action="/catalog/deployments/${d.id}" class="deployment-form" data-testid="deployment-form">${csrfField(c)}
<h3>${d.name} <small class="muted">${d.base_url ?? ''}</small></h3>
<div class="row">
<label>${c.t('catalog.input_price')}<input type="text" name="input_price" inputmode="decimal" value="${priceValue(d.input_price)}"></label>
<label>${c.t('catalog.cached_price')}<input type="text" name="cached_input_price" inputmode="decimal" value="${priceValue(d.cached_input_price)}"></label>
<label>${c.t('catalog.output_price')}<input type="text" name="output_price" inputmode="decimal" value="${priceValue(d.output_price)}"></label>
<label>${c.t('catalog.weight_label')}<input type="number" name="weight" min="1" max="1000" required value="${d.weight}"></label>
</div><small>${c.t('catalog.deployment_hint')}</small>
<label>${c.t('common.reason')}<input type="text" name="reason" maxlength="500"></label>
<button type="submit">${c.t('catalog.save_deployment')}</button></form>`;
}
