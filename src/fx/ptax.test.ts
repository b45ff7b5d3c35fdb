import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { brlFromUsd, fetchLastPtax, parseMarkup, PtaxError, toMillionths } from './ptax.ts';
import { startPtaxSimulator, type PtaxSimulator } from './simulator.ts';

describe('USD prices sold in BRL', () => {
  it('BRL = ceil(USD × PTAX × markup) to the micro-real (the examples of docs/billing.md)', () => {
    expect(brlFromUsd(3_000_000n, 5_432_100n, 1_300_000n)).toBe(21_185_190n);
    expect(brlFromUsd(300_000n, 5_432_100n, 1_300_000n)).toBe(2_118_519n);
    expect(brlFromUsd(1n, 5_432_100n, 1_300_000n)).toBe(8n);
    expect(brlFromUsd(15_000_000n, 5_000_000n, 1_000_000n)).toBe(75_000_000n);
    expect(brlFromUsd(0n, 5_432_100n, 1_300_000n)).toBe(0n);
  });
  it('reads markups and published rates exactly', () => {
    expect(parseMarkup('1.30')).toBe(1_300_000n);
    expect(parseMarkup('1,3')).toBe(1_300_000n);
    expect(parseMarkup('1')).toBe(1_000_000n);
    expect(parseMarkup('0.9')).toBeNull();
    expect(parseMarkup('1.3000001')).toBeNull();
    expect(parseMarkup('abc')).toBeNull();
    expect(toMillionths(5.4321)).toBe(5_432_100n);
    expect(toMillionths(5.4278)).toBe(5_427_800n);
    expect(toMillionths(0.1 + 0.2)).toBe(300_000n);
  });
});

describe('PTAX client against the simulator (Olinda OData wire format)', () => {
  let sim: PtaxSimulator;
  beforeAll(async () => {
    sim = await startPtaxSimulator({ defaultSell: 5.1 });
  });
  afterAll(() => sim?.close());

  it('takes the last business day published on or before the date', async () => {
    sim.setRate('2026-11-20', 5.3512, 5.3506); // a Friday
    // Saturday and Sunday have none: the Friday's
    expect(await fetchLastPtax(sim.url, '2026-11-22')).toEqual({
      sellMicros: 5_351_200n,
      buyMicros: 5_350_600n,
      date: '2026-11-20',
      publishedAt: '2026-11-20 13:09:40.608',
    });
    const raw = await fetch(`${sim.url}/CotacaoDolarDia(dataCotacao=@dataCotacao)?@dataCotacao='11-20-2026'&$format=json`);
    expect(await raw.json()).toMatchObject({ value: [{ cotacaoCompra: 5.3506, cotacaoVenda: 5.3512, dataHoraCotacao: '2026-11-20 13:09:40.608' }] });
    expect((await fetch(`${sim.url}/CotacaoDolarDia(dataCotacao=@dataCotacao)?@dataCotacao='2026-11-20'`)).status).toBe(400);
  });

  it('fails as the service fails', async () => {
    sim.down = true;
    await expect(fetchLastPtax(sim.url, '2026-11-22')).rejects.toThrow(PtaxError);
    await expect(fetchLastPtax(sim.url, '2026-11-22')).rejects.toThrow('HTTP 503');
    sim.down = false;
    await expect(fetchLastPtax('http://127.0.0.1:9', '2026-11-22')).rejects.toThrow('unreachable');
  });
});
