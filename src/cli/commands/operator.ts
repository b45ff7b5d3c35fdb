import QRCode from 'qrcode';
import { createOperator, disableOperator, MIN_OPERATOR_PASSWORD, type OperatorSetup, resetOperator } from '../../console/auth.ts';
import { parseFlags, str } from '../args.ts';
import { CliError, type CliContext, UsageError } from '../context.ts';
import { plainTable, withDb } from './shared.ts';

// `catraca operator create|list|disable|reset`: the accounts of the operator's console
// (src/console/). The first operator can only be made here. What an operator needs to sign in —
// the password, the TOTP secret (as an otpauth URL and a QR code) and ten recovery codes — is
// printed once and never stored in a form that can be shown again.

async function readPassword(flagGiven: boolean, cmd: string): Promise<string | undefined> {
  if (!flagGiven) return undefined;
  const chunks: Buffer[] = [];
  for await (const chunk of process.stdin) chunks.push(chunk as Buffer);
  const password = Buffer.concat(chunks)
    .toString('utf8')
    .replace(/\r?\n$/, '');
  if (password.length < MIN_OPERATOR_PASSWORD || password.length > 1024)
    throw new UsageError(`${cmd}: the password on stdin must be ${MIN_OPERATOR_PASSWORD} to 1024 characters`);
  return password;
}

async function printSetup(ctx: CliContext, verb: string, s: OperatorSetup, generated: boolean): Promise<void> {
  const qr = ctx.json ? '' : await QRCode.toString(s.otpauthUrl, { type: 'terminal', small: true });
  ctx.out(
    {
      id: s.operator.id,
      email: s.operator.email,
      ...(generated ? { password: s.password } : {}),
      totp_secret: s.totpSecret,
      otpauth_url: s.otpauthUrl,
      recovery_codes: s.recoveryCodes,
    },
    [
      `${verb} operator ${s.operator.id} (${s.operator.email})`,
      ...(generated ? [`  password:       ${s.password}`] : []),
      `  TOTP secret:    ${s.totpSecret}`,
      `  otpauth URL:    ${s.otpauthUrl}`,
      '  Scan this with the authenticator app (or type the secret):',
      qr.replace(/^/gm, '    '),
      '  Recovery codes (each works once, instead of a TOTP code):',
      ...s.recoveryCodes.map((c) => `    ${c}`),
      '',
      '  This is the only time these are shown: only hashes are stored. Sign in at the console:',
      `  ${ctx.stack?.console_url ?? 'CONSOLE_HOST:CONSOLE_PORT, http://127.0.0.1:8082 by default'} (through an SSH tunnel or a VPN: docs/console.md).`,
    ].join('\n'),
  );
}

export async function operatorCreate(ctx: CliContext, args: string[]): Promise<void> {
  const cmd = 'operator create';
  const flags = parseFlags(args, { values: ['email'], booleans: ['password-stdin'], required: ['email'] }, cmd);
  const password = await readPassword(flags['password-stdin'] === true, cmd);
  // audited (operator_create, from `cli`) in the creation's transaction
  const res = await withDb(ctx, (db) => createOperator(db, { email: str(flags, 'email')!, createdBy: null, password, ip: 'cli' }));
  if (!res.ok) {
    if (res.error === 'taken') throw new CliError(`${cmd}: an operator with that e-mail exists (catraca operator reset --email … gives it new credentials)`);
    throw new UsageError(`${cmd}: ${res.error === 'bad_email' ? '--email must be a valid e-mail address' : 'the password is too short'}`);
  }
  await printSetup(ctx, 'created', res.setup, password === undefined);
}

export async function operatorReset(ctx: CliContext, args: string[]): Promise<void> {
  const cmd = 'operator reset';
  const flags = parseFlags(args, { values: ['email'], booleans: ['password-stdin'], required: ['email'] }, cmd);
  const password = await readPassword(flags['password-stdin'] === true, cmd);
  // audited (operator_reset, from `cli`) in the reset's transaction
  const setup = await withDb(ctx, (db) => resetOperator(db, str(flags, 'email')!, password));
  if (!setup) throw new CliError(`${cmd}: no operator with e-mail ${JSON.stringify(str(flags, 'email'))}`);
  await printSetup(ctx, 'reset', setup, password === undefined);
}

export async function operatorList(ctx: CliContext, args: string[]): Promise<void> {
  parseFlags(args, { values: [] }, 'operator list');
  const rows = await withDb(
    ctx,
    async (db) => (await db.query('select id, email, created_at, created_by, disabled_at from operators order by created_at, id')).rows,
  );
  const operators = rows.map((o) => ({
    id: o.id as string,
    email: o.email as string,
    created_at: (o.created_at as Date).toISOString(),
    created_by: (o.created_by as string | null) ?? 'cli',
    disabled: o.disabled_at !== null,
  }));
  ctx.out(
    { operators },
    plainTable(
      ['ID', 'E-MAIL', 'CREATED', 'BY', 'STATUS'],
      operators.map((o) => [o.id, o.email, o.created_at.slice(0, 19) + 'Z', o.created_by, o.disabled ? 'disabled' : 'active']),
      [],
      '(no operators; create the first with catraca operator create --email …)',
    ),
  );
}

export async function operatorDisable(ctx: CliContext, args: string[]): Promise<void> {
  const cmd = 'operator disable';
  const flags = parseFlags(args, { values: ['email'], required: ['email'] }, cmd);
  const email = str(flags, 'email')!.trim().toLowerCase();
  const id = await withDb(ctx, async (db) => {
    const { rows } = await db.query('select id from operators where email = $1', [email]);
    if (!rows[0]) return null;
    // disabled, sessions ended and audited (operator_disable, from `cli`) in one transaction
    await disableOperator(db, rows[0].id, { operatorId: null, ip: 'cli' });
    return rows[0].id as string;
  });
  if (!id) throw new CliError(`${cmd}: no operator with e-mail ${JSON.stringify(email)}`);
  ctx.out({ id, email, disabled: true }, `disabled operator ${id} (${email}); their sessions ended`);
}
