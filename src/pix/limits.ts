// Top-up limits, in one place (documented in docs/api.md and shown on the top-up page).
/** Minimum top-up: R$ 5,00. */
export const TOPUP_MIN_MICROS = 5_000_000n;
/** Maximum top-up: R$ 5.000,00. */
export const TOPUP_MAX_MICROS = 5_000_000_000n;
/** Pix moves whole centavos. */
export const CENTAVO_MICROS = 10_000n;
/** Default lifetime of a charge (calendario.expiracao), seconds. */
export const DEFAULT_CHARGE_EXPIRY_S = 3600;
/** Open (ATIVA, unexpired) charges a tenant may have at once; the next top-up is refused. */
export const MAX_OPEN_CHARGES = 5;
