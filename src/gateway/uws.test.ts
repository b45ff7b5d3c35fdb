// The front door's refusal to serve on the JavaScript fallback of uWebSockets.js.
import { execFile } from 'node:child_process';
import { createRequire } from 'node:module';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { describe, expect, test } from 'vitest';
import { assertNativeUws, isNativeUws, loadUws, notNativeMessage, OFFICIAL_PACKAGE, UNOFFICIAL_PACKAGE, uwsRuntime, type UwsRuntime } from './uws.ts';

const require = createRequire(import.meta.url);
const notFound = (name: string) => Object.assign(new Error(`Cannot find module '${name}'`), { code: 'MODULE_NOT_FOUND' });
/** A function whose source reads `[native code]`, as the addon's do. */
const nativeFn = function App() {}.bind(null);
const jsFn = function App() {
  return {};
};

describe('isNativeUws', () => {
  test('a module whose App is native code is native; a JavaScript App, none, or no module is not', () => {
    expect(isNativeUws({ App: nativeFn })).toBe(true);
    expect(isNativeUws({ App: jsFn })).toBe(false);
    expect(isNativeUws({ App: () => ({}) })).toBe(false);
    expect(isNativeUws({})).toBe(false);
    expect(isNativeUws(null)).toBe(false);
  });

  test("the unofficial package's real JavaScript fallback is recognised as not native", () => {
    const fallback = require('@trufflesuite/uws-js-unofficial/dist/index');
    expect(typeof fallback.App).toBe('function');
    expect(isNativeUws(fallback)).toBe(false);
  });

  test.runIf(process.versions.modules === '115')('on Node 20 this process loaded the native addon', () => {
    expect(uwsRuntime).toMatchObject({ native: true });
    expect(() => assertNativeUws()).not.toThrow();
  });
});

describe('loadUws', () => {
  test('takes the official uWebSockets.js when it is installed', () => {
    const official = { App: nativeFn };
    const rt = loadUws((name) => (name === OFFICIAL_PACKAGE ? official : { App: jsFn }));
    expect(rt).toEqual({ module: official, package: OFFICIAL_PACKAGE, native: true });
  });

  test('without it, the unofficial package; its fallback warning is captured, not printed', () => {
    const fallback = { App: jsFn };
    const printed: unknown[] = [];
    const warn = console.warn;
    console.warn = (...a: unknown[]) => void printed.push(a);
    try {
      const rt = loadUws((name) => {
        if (name === OFFICIAL_PACKAGE) throw notFound(name);
        console.warn('This version of µWS is not compatible with your Node.js build:\n\nError: NODE_MODULE_VERSION 115 vs 127');
        return fallback;
      });
      expect(rt).toEqual({
        module: fallback,
        package: UNOFFICIAL_PACKAGE,
        native: false,
        fallbackReason: 'This version of µWS is not compatible with your Node.js build: Error: NODE_MODULE_VERSION 115 vs 127',
      });
    } finally {
      console.warn = warn;
    }
    expect(printed).toEqual([]);
  });

  test('an official package that is installed but fails to load (old glibc) is reported, and the unofficial one used', () => {
    const rt = loadUws((name) => {
      if (name === OFFICIAL_PACKAGE) throw new Error('This version of µWS is not compatible with your Node.js build.');
      return { App: nativeFn };
    });
    expect(rt).toMatchObject({ package: UNOFFICIAL_PACKAGE, native: true, officialError: 'This version of µWS is not compatible with your Node.js build.' });
  });
});

describe('assertNativeUws', () => {
  test('refuses the fallback with a message naming the Node version, its ABI and the build, and what to do', () => {
    const rt: UwsRuntime = { module: { App: jsFn } as never, package: UNOFFICIAL_PACKAGE, native: false, fallbackReason: 'NODE_MODULE_VERSION 115 vs 127' };
    expect(() => assertNativeUws(rt)).toThrow(/needs uWebSockets\.js loaded natively/);
    const msg = notNativeMessage(rt, { ...process.versions, node: '22.11.0', modules: '127' }, 'linux-x64');
    expect(msg).toContain(
      '@trufflesuite/uws-js-unofficial did not load a native build on Node 22.11.0 (ABI 127, linux-x64) and fell back to its JavaScript shim',
    );
    expect(msg).toContain('(NODE_MODULE_VERSION 115 vs 127)');
    expect(msg).toContain(
      'Run the front door on Node 20, or install the official build (uWebSockets.js from github.com/uNetworking/uWebSockets.js, a release that ships a binary for ABI 127; it needs glibc ≥ 2.38)',
    );
    expect(() => assertNativeUws({ ...rt, native: true })).not.toThrow();
  });
});

test('the front door process stops at once, exit 1, when uWebSockets.js runs its fallback (forced with UWS_USE_FALLBACK=1)', async () => {
  const root = join(dirname(fileURLToPath(import.meta.url)), '..', '..');
  const r = await new Promise<{ code: number | null; stderr: string }>((resolve) => {
    const env = {
      ...process.env,
      UWS_USE_FALLBACK: '1',
      GATEWAY_PORT: '0',
      NATS_URL: 'nats://127.0.0.1:1',
      DATABASE_URL: 'postgres://nobody@127.0.0.1:1/none',
    };
    execFile(process.execPath, ['--import', 'tsx', join(root, 'src/gateway/main.ts')], { cwd: root, env, timeout: 20000 }, (err, _stdout, stderr) => {
      resolve({ code: err ? ((err as { code?: number }).code ?? null) : 0, stderr });
    });
  });
  expect(r.code).toBe(1);
  expect(r.stderr).toContain(
    `catraca front door: the front door needs uWebSockets.js loaded natively, but @trufflesuite/uws-js-unofficial did not load a native build on Node ${process.versions.node}`,
  );
  expect(r.stderr).toContain('"msg":"refusing to start"');
  expect(r.stderr).not.toContain('front door listening');
});
