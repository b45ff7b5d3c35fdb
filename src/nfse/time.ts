// Dates in the layout: dhEmi and dhEvento are local times with their ±hh:mm offset
// (AAAA-MM-DDThh:mm:ssTZD), dCompet a date. catraca writes them in America/Sao_Paulo (Brasília
// time), whatever the machine's time zone.

export const FISCAL_TIME_ZONE = 'America/Sao_Paulo';

const parts = (d: Date, timeZone: string) => {
  const f = new Intl.DateTimeFormat('en-US', {
    timeZone,
    hourCycle: 'h23',
    year: 'numeric',
    month: '2-digit',
    day: '2-digit',
    hour: '2-digit',
    minute: '2-digit',
    second: '2-digit',
    timeZoneName: 'longOffset',
  });
  const p = Object.fromEntries(f.formatToParts(d).map((x) => [x.type, x.value]));
  // "GMT-03:00"; "GMT" for a zero offset
  const off = p.timeZoneName === 'GMT' ? '+00:00' : p.timeZoneName.slice(3);
  return { date: `${p.year}-${p.month}-${p.day}`, time: `${p.hour}:${p.minute}:${p.second}`, offset: off };
};

/** 2026-11-27T18:22:05-03:00 */
export function localDateTime(d: Date, timeZone = FISCAL_TIME_ZONE): string {
  const p = parts(d, timeZone);
  return `${p.date}T${p.time}${p.offset}`;
}

/** 2026-11-27 (the date in Brasília at that instant) */
export function localDate(d: Date, timeZone = FISCAL_TIME_ZONE): string {
  return parts(d, timeZone).date;
}
