import { parseFlags, str } from '../args.ts';
import type { CliContext } from '../context.ts';
import { ledgerCheck } from '../../billing/ledger-check.ts';
import { withDb } from './shared.ts';

export async function ledgerCheckCommand(ctx: CliContext, args: string[]): Promise<number> {
  const flags = parseFlags(args, { values: ['tenant'] }, 'ledger check');
  const result = await withDb(ctx, (db) => ledgerCheck(db, { tenantId: str(flags, 'tenant') }));
  const human = result.ok
    ? `ledger OK: ${result.tenants_checked} tenant(s) checked, balances match the ledger`
    : [
        `ledger MISMATCH: ${result.mismatches.length} problem(s) in ${result.tenants_checked} tenant(s) checked`,
        ...result.mismatches.map(
          (m) =>
            `  ${m.tenant} ${m.check}${m.key_id ? ` key ${m.key_id}` : ''}${m.request_id ? ` request ${m.request_id} ×${m.count}` : ''}${m.expected !== undefined ? ` expected ${m.expected}` : ''}${m.actual !== undefined ? ` actual ${m.actual}` : ''}`,
        ),
      ].join('\n');
  ctx.out({ ...result }, human);
  return result.ok ? 0 : 1;
}
