// The logger: JSON lines, no secret in any line, errors with their stacks, LOG_LEVEL, crashes.
import { execFile } from 'node:child_process';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { afterEach, describe, expect, test } from 'vitest';
import { generateApiKey } from './auth/keys.ts';
import { configureLogging, createLogger, prettyLine } from './log.ts';

const ROOT = join(dirname(fileURLToPath(import.meta.url)), '..');

function capture(level: 'debug' | 'info' | 'warn' | 'error' = 'debug') {
  const lines: string[] = [];
  configureLogging({ format: 'json', level, write: (l) => void lines.push(l) });
  return { lines, parsed: () => lines.map((l) => JSON.parse(l) as Record<string, any>) };
}
afterEach(() => configureLogging({ format: undefined, level: undefined, write: undefined }));

describe('JSON lines', () => {
  test('level as a string, time, component, msg and the fields; a child logger carries request_id on every line', () => {
    const out = capture();
    const log = createLogger('gateway');
    log.info('front door listening', { port: 8080, host: '0.0.0.0', big: 12n });
    const req = log.child({ request_id: 'gen-abc' });
    req.warn('worker refused the job', { reason: 'busy' });
    req.error('request failed', { msg: 'not the message', level: 'not the level' });
    expect(out.lines.every((l) => l.endsWith('\n') && l.split('\n').length === 2)).toBe(true);
    const [a, b, c] = out.parsed();
    expect(a).toEqual({
      level: 'info',
      time: expect.stringMatching(/^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}\.\d{3}Z$/),
      component: 'gateway',
      port: 8080,
      host: '0.0.0.0',
      big: '12',
      msg: 'front door listening',
    });
    expect(out.lines[0]).toContain('"port":8080'); // test/helpers/stack.ts reads the port this way
    expect(b).toMatchObject({ level: 'warn', component: 'gateway', request_id: 'gen-abc', reason: 'busy', msg: 'worker refused the job' });
    expect(c).toMatchObject({ level: 'error', request_id: 'gen-abc', msg: 'request failed', field_msg: 'not the message', field_level: 'not the level' });
  });
});

describe('redaction', () => {
  test('no key or secret in any line, whether in the message, a field, a header, an error or a URL', () => {
    const out = capture();
    const log = createLogger('test');
    const ours = generateApiKey();
    const openai = 'sk-proj-Ab3dEf6hIj9kLm2nOp5qRs8tUv1wXy4z';
    const anthropic = 'sk-ant-api03-ZYXWVUTSRQPONMLKJIHGFEDCBA0123456789';
    const plain = 'correct-horse-battery-staple';
    const secrets = [ours, openai, anthropic, plain, ours.slice(10), 'hunter2hunter2', 'c2VjcmV0LWJhc2ljLWF1dGg='];
    log.info(`authenticated ${ours} for tenant`, { key_id: 'key_123' });
    log.warn('upstream call', {
      headers: { authorization: `Bearer ${openai}`, 'x-api-key': anthropic, 'content-type': 'application/json' },
      key: ours,
      api_key: plain,
      password: 'hunter2hunter2',
      PIX_CLIENT_SECRET: plain,
      nested: { deeper: { upstream_key: openai, note: `uses ${anthropic}` } },
      list: [`Authorization: Basic c2VjcmV0LWJhc2ljLWF1dGg=`, { token: plain }],
      url: `postgres://catraca:${plain}@db:5432/catraca`,
    });
    const cause = Object.assign(new Error(`vendor said: invalid key ${openai}`), { code: 'E_UPSTREAM' });
    log.error('request failed', { request_id: 'gen-1', err: new Error(`bad key ${ours}`, { cause }) });
    const text = out.lines.join('');
    for (const s of secrets) expect(text).not.toContain(s);
    expect(text).not.toMatch(/sk-cat-v1-[0-9a-f]{8}/);
    const [a, b, c] = out.parsed();
    expect(a).toMatchObject({ msg: 'authenticated sk-…[redacted] for tenant', key_id: 'key_123' });
    expect(b.headers).toEqual({ authorization: '[redacted]', 'x-api-key': '[redacted]', 'content-type': 'application/json' });
    expect([b.key, b.api_key, b.password, b.PIX_CLIENT_SECRET, b.nested.deeper.upstream_key]).toEqual(Array(5).fill('[redacted]'));
    expect(b.nested.deeper.note).toBe('uses sk-…[redacted]');
    expect(b.list).toEqual(['Authorization: Basic [redacted]', { token: '[redacted]' }]);
    expect(b.url).toBe('postgres://catraca:***@db:5432/catraca');
    expect(c.err.message).toBe('bad key sk-…[redacted]');
    expect(c.err.cause.message).toBe('vendor said: invalid key sk-…[redacted]');
  });

  test('ids, counts and variable names are not mistaken for secrets', () => {
    const out = capture();
    createLogger('test').info('ok', { key_id: 'key_1', api_key_env: 'OPENAI_API_KEY', tokens: 12, prompt_tokens: 3, keys: 2, monkey: 'banana' });
    expect(out.parsed()[0]).toMatchObject({ key_id: 'key_1', api_key_env: 'OPENAI_API_KEY', tokens: 12, prompt_tokens: 3, keys: 2, monkey: 'banana' });
  });
});

describe('errors', () => {
  test('an error keeps its type, message, code, stack and cause chain (under err, error or any field)', () => {
    const out = capture();
    const log = createLogger('metering');
    const root = Object.assign(new Error('connect ECONNREFUSED 127.0.0.1:5432'), { code: 'ECONNREFUSED', errno: -111 });
    const err = new TypeError('settlement failed', { cause: root });
    log.error('settlement failed; will be redelivered', { err });
    log.error('stop step failed', { error: new RangeError('out of range') });
    const [a, b] = out.parsed();
    expect(a.err).toMatchObject({ type: 'TypeError', message: 'settlement failed', stack: expect.stringContaining('TypeError: settlement failed\n    at ') });
    expect(a.err.stack).toContain('log.test.ts');
    expect(a.err.cause).toMatchObject({
      type: 'Error',
      message: 'connect ECONNREFUSED 127.0.0.1:5432',
      code: 'ECONNREFUSED',
      errno: -111,
      stack: expect.stringContaining('log.test.ts'),
    });
    expect(b.error).toMatchObject({ type: 'RangeError', message: 'out of range', stack: expect.stringContaining('RangeError: out of range') });
  });

  test('a circular structure does not throw', () => {
    const out = capture();
    const o: Record<string, unknown> = { a: 1 };
    o.self = o;
    createLogger('t').info('circular', { o });
    expect(out.parsed()[0].o).toEqual({ a: 1, self: '[circular]' });
  });
});

/** Runs a snippet in a child process (TypeScript through tsx) with the given environment. */
function runSnippet(code: string, env: Record<string, string> = {}): Promise<{ code: number | null; stderr: string; stdout: string }> {
  return new Promise((resolve) => {
    execFile(
      process.execPath,
      ['--import', 'tsx', '--input-type=module', '-e', code],
      { cwd: ROOT, env: { ...process.env, LOG_FORMAT: '', ...env }, timeout: 20000 },
      (err, stdout, stderr) => {
        resolve({ code: err ? ((err as { code?: number }).code ?? null) : 0, stdout, stderr });
      },
    );
  });
}

const LOG_TS = JSON.stringify(join(ROOT, 'src/log.ts'));

describe('LOG_LEVEL', () => {
  test.each([
    ['debug', ['debug', 'info', 'warn', 'error']],
    ['info', ['info', 'warn', 'error']],
    ['warn', ['warn', 'error']],
    ['error', ['error']],
    ['silent', []],
    ['nonsense', ['info', 'warn', 'error']],
  ])('LOG_LEVEL=%s prints %j', async (level, expected) => {
    const r = await runSnippet(
      `import { createLogger } from ${LOG_TS}; const l = createLogger('lvl'); for (const m of ['debug','info','warn','error']) l[m](m + ' line');`,
      { LOG_LEVEL: level },
    );
    expect(r.code).toBe(0);
    const lines = r.stderr.trim()
      ? r.stderr
          .trim()
          .split('\n')
          .map((l) => JSON.parse(l))
      : [];
    expect(lines.map((l) => l.level)).toEqual(expected);
    expect(lines.map((l) => l.msg)).toEqual(expected.map((m) => `${m} line`));
  });
});

describe('crashes', () => {
  test.each([
    ['an uncaught exception', `setTimeout(() => { throw new Error('kaboom ${'sk-proj-Ab3dEf6hIj9kLm2nOp5q'}'); }, 1);`, 'uncaught exception'],
    ['an unhandled rejection', `Promise.reject(new Error('kaboom'));`, 'unhandled rejection'],
    ['a rejected top-level await (an entry point failing to connect at start-up)', `await Promise.reject(new Error('kaboom'));`, 'unhandled rejection'],
  ])('%s is logged as one JSON line with its stack, then exit 1', async (_name, crash, msg) => {
    const r = await runSnippet(`import { createLogger, logCrashes } from ${LOG_TS}; logCrashes(createLogger('crashy')); ${crash}`);
    expect(r.code).toBe(1);
    const lines = r.stderr.trim().split('\n');
    const last = JSON.parse(lines[lines.length - 1]);
    expect(last).toMatchObject({
      level: 'error',
      component: 'crashy',
      msg,
      err: { type: 'Error', message: expect.stringMatching(/^kaboom/), stack: expect.stringContaining('Error: kaboom') },
    });
    expect(r.stderr).not.toContain('sk-proj-Ab3dEf6hIj9kLm2nOp5q');
  });
});

describe('pretty', () => {
  test('a JSON line becomes time, level, component, message and fields; the stack goes below; other lines pass', () => {
    const json = JSON.stringify({
      level: 'error',
      time: '2026-01-02T03:04:05.678Z',
      component: 'gateway',
      request_id: 'gen-1',
      err: { type: 'Error', message: 'x', stack: 'Error: x\n    at f (a.ts:1:1)' },
      msg: 'request failed',
    });
    expect(prettyLine(json)).toBe(
      '03:04:05.678 ERROR gateway request failed request_id=gen-1 err={"type":"Error","message":"x"}\n    Error: x\n        at f (a.ts:1:1)',
    );
    expect(prettyLine('not json')).toBe('not json');
    expect(prettyLine('{"a":1}')).toBe('{"a":1}');
  });

  test('LOG_FORMAT=pretty prints readable lines', async () => {
    const r = await runSnippet(`import { createLogger } from ${LOG_TS}; createLogger('portal').info('portal ready', { url: 'http://127.0.0.1:8081' });`, {
      LOG_FORMAT: 'pretty',
    });
    expect(r.stderr).toMatch(/^\d{2}:\d{2}:\d{2}\.\d{3} INFO {2}portal portal ready url=http:\/\/127\.0\.0\.1:8081\n$/);
  });
});
