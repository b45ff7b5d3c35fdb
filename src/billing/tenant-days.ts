// Every day a tenant sees — GET /v1/activity, the portal's dashboard and exports, the operator's
// money views — is a day in São Paulo time: a debit at 02:30 UTC belongs to the previous day. In
// SQL a row's day is `(created_at at time zone TENANT_TIME_ZONE)::date`.

export const TENANT_TIME_ZONE = 'America/Sao_Paulo';

/** Today's date (YYYY-MM-DD) in São Paulo. */
export function todayInSaoPaulo(now: Date = new Date()): string {
  // en-CA formats as YYYY-MM-DD
  return new Intl.DateTimeFormat('en-CA', { timeZone: TENANT_TIME_ZONE, year: 'numeric', month: '2-digit', day: '2-digit' }).format(now);
}
