// Issue 22, item 6 for the CLI: a NUL (or any other control character) in an argument is a usage
// error (exit 2) naming the option, before anything reaches PostgreSQL or NATS — never a failure
// from the database ("invalid byte sequence", exit 1) and never a stored control character.
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import { run } from '../../src/cli/main.ts';
import { createPool } from '../../src/db/pool.ts';

const db = createPool(process.env.DATABASE_URL!, 2);
const cwd = mkdtempSync(join(tmpdir(), 'catraca-cli-ctl-'));
afterAll(async () => {
  await db.end();
  rmSync(cwd, { recursive: true, force: true });
});

const T = 'ten_controlchars';
/** Every command with every option that takes a value, each with otherwise valid arguments. */
const COMMANDS: Array<[string, Record<string, string>]> = [
  ['tenant create', { name: 'Acme' }],
  [
    'key create',
    {
      tenant: T,
      label: 'l',
      models: '*',
      limit: '10',
      'limit-reset': 'daily',
      'rate-limit': '60/1m',
      expires: '30d',
      'max-concurrent': '2',
      tpm: '1000',
      'end-user-limit': '1',
    },
  ],
  ['key list', { tenant: T }],
  ['key revoke', { id: 'key_x' }],
  ['credits grant', { tenant: T, amount: '1.00', note: 'n', 'external-id': 'e' }],
  [
    'model set',
    {
      id: 'v/m',
      pool: 'p',
      protocol: 'openai',
      kind: 'chat',
      'upstream-model': 'm',
      'base-url': 'https://example.com/v1',
      'api-key-env': 'OPENAI_API_KEY',
      'input-price': '1',
      'output-price': '1',
      'max-output-tokens': '100',
      'context-length': '1000',
    },
  ],
  ['model alias add', { alias: 'a', model: 'v/m' }],
  ['model alias remove', { alias: 'a' }],
  [
    'model deployment add',
    { model: 'v/m', name: 'd', 'base-url': 'https://example.com/v1', 'api-key-env': 'OPENAI_API_KEY', 'upstream-model': 'm', protocol: 'openai', weight: '1' },
  ],
  ['model deployment list', { model: 'v/m' }],
  ['model deployment remove', { id: 'dep_x' }],
  ['ledger check', { tenant: T }],
  ['pix pay', { txid: 'a'.repeat(32), valor: '1.00' }],
  ['operator create', { email: 'op@example.com' }],
  ['operator disable', { email: 'op@example.com' }],
  ['operator reset', { email: 'op@example.com' }],
];

async function cli(argv: string[]) {
  let stderr = '';
  let stdout = '';
  const code = await run(argv, {
    cwd,
    env: { DATABASE_URL: process.env.DATABASE_URL, NATS_URL: process.env.NATS_URL },
    stdout: (s) => (stdout += s),
    stderr: (s) => (stderr += s),
  });
  return { code, stdout, stderr };
}

describe('CLI arguments with control characters', () => {
  it('every option of every command: exit 2 naming the option; nothing stored', async () => {
    let checked = 0;
    for (const [command, flags] of COMMANDS) {
      for (const flag of Object.keys(flags)) {
        for (const bad of ['a\u0000b', 'a\u0001b', 'two\nlines', '\u001b[31mred', 'del\u007f']) {
          const args = Object.entries({ ...flags, [flag]: bad }).flatMap(([k, v]) => [`--${k}`, v]);
          const r = await cli([...command.split(' '), ...args]);
          expect(r.code, `${command} --${flag} ${JSON.stringify(bad)}: ${r.stderr}`).toBe(2);
          expect(r.stderr).toContain(`catraca: ${command}: --${flag} must not contain control characters (NUL, line breaks, escapes)`);
          expect(r.stdout).toBe('');
          checked++;
        }
      }
    }
    expect(checked).toBeGreaterThan(200);
    // (other test files create tenants meanwhile: what must not exist is one named by these runs)
    const named = ['a\u0001b', 'two\nlines', '\u001b[31mred', 'del\u007f']; // (PostgreSQL text cannot hold NUL)
    expect((await db.query('select count(*)::int as n from tenants where name = any($1)', [named])).rows[0].n).toBe(0);
    expect((await db.query(`select count(*)::int as n from tenants where name ~ '[[:cntrl:]]'`)).rows[0].n).toBe(0);
  });

  it('the same with --json: one JSON-free usage error', async () => {
    const r = await cli(['tenant', 'create', '--name', 'x\u0000y', '--json']);
    expect(r).toEqual({ code: 2, stdout: '', stderr: expect.stringContaining('--name must not contain control characters') });
  });
});
