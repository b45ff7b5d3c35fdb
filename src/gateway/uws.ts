// The only module that imports uWebSockets.js, so the build can be swapped:
//   - `uWebSockets.js` (the official uNetworking/uWebSockets.js, installed from its GitHub release:
//     Node 20/22/24, but its binaries need glibc ≥ 2.38) when it is installed;
//   - otherwise @trufflesuite/uws-js-unofficial, whose binaries load on Debian 12 (glibc 2.36) but
//     exist only for Node ≤ 20 (ABI 115). On any other Node it silently falls back to a slow
//     JavaScript shim built on node:http.
// The front door must never serve on that shim: App() refuses, and src/gateway/main.ts checks
// uwsRuntime first to stop with a clear message (see docs/operations.md, "Node 22 and 24").
import { createRequire } from 'node:module';

import type * as UwsModuleType from '@trufflesuite/uws-js-unofficial';
export type { HttpRequest, HttpResponse, TemplatedApp, us_listen_socket } from '@trufflesuite/uws-js-unofficial';

type UwsModule = typeof UwsModuleType;

export const OFFICIAL_PACKAGE = 'uWebSockets.js';
export const UNOFFICIAL_PACKAGE = '@trufflesuite/uws-js-unofficial';

export interface UwsRuntime {
  module: UwsModule;
  /** Which package was loaded. */
  package: typeof OFFICIAL_PACKAGE | typeof UNOFFICIAL_PACKAGE;
  /** The C++ addon (true) or the JavaScript fallback (false). */
  native: boolean;
  /** Why the official package was not used although it is installed (e.g. glibc too old). */
  officialError?: string;
  /** What the unofficial loader printed when it fell back (the dlopen error). */
  fallbackReason?: string;
}

/**
 * Whether a loaded uWebSockets.js module is the C++ addon. The addon's functions are native
 * (`function App() { [native code] }`); the fallback's are JavaScript, whose source shows.
 */
export function isNativeUws(mod: unknown): boolean {
  const app = (mod as { App?: unknown } | null)?.App;
  if (typeof app !== 'function') return false;
  return /\{\s*\[native code\]\s*\}\s*$/.test(Function.prototype.toString.call(app));
}

type Loader = (specifier: string) => unknown;
const requireHere = createRequire(import.meta.url);

/**
 * Loads the official package when installed, else the unofficial one (whose console warnings on
 * falling back are captured into `fallbackReason` instead of printed as non-JSON lines).
 */
export function loadUws(load: Loader = requireHere): UwsRuntime {
  let officialError: string | undefined;
  try {
    const mod = load(OFFICIAL_PACKAGE) as UwsModule;
    return { module: mod, package: OFFICIAL_PACKAGE, native: isNativeUws(mod) };
  } catch (err) {
    const e = err as NodeJS.ErrnoException;
    const missing = e.code === 'MODULE_NOT_FOUND' && String(e.message).includes(`'${OFFICIAL_PACKAGE}'`);
    if (!missing) officialError = e.message;
  }
  const printed: string[] = [];
  const { warn, log } = console;
  console.warn = (...args: unknown[]) => void printed.push(args.map(String).join(' '));
  console.log = console.warn;
  let mod: UwsModule;
  try {
    mod = load(UNOFFICIAL_PACKAGE) as UwsModule;
  } finally {
    console.warn = warn;
    console.log = log;
  }
  const native = isNativeUws(mod);
  const fallbackReason = printed.join(' ').replace(/\s+/g, ' ').trim() || undefined;
  return {
    module: mod,
    package: UNOFFICIAL_PACKAGE,
    native,
    ...(officialError ? { officialError } : {}),
    ...(!native && fallbackReason ? { fallbackReason } : {}),
  };
}

/** The message the front door stops with when uWebSockets.js is not native. */
export function notNativeMessage(
  rt: Pick<UwsRuntime, 'package' | 'officialError' | 'fallbackReason'>,
  versions = process.versions,
  platform = `${process.platform}-${process.arch}`,
): string {
  return [
    `the front door needs uWebSockets.js loaded natively, but ${rt.package} did not load a native build on Node ${versions.node} (ABI ${versions.modules}, ${platform}) and fell back to its JavaScript shim, which catraca refuses to serve on.`,
    rt.officialError ? `The official ${OFFICIAL_PACKAGE} is installed but did not load: ${rt.officialError}.` : '',
    rt.fallbackReason ? `(${rt.fallbackReason})` : '',
    `Run the front door on Node 20, or install the official build (${OFFICIAL_PACKAGE} from github.com/uNetworking/uWebSockets.js, a release that ships a binary for ABI ${versions.modules}; it needs glibc ≥ 2.38): see docs/operations.md, "Node 22 and 24".`,
  ]
    .filter(Boolean)
    .join(' ');
}

export const uwsRuntime: UwsRuntime = loadUws();

/** Throws unless uWebSockets.js is native (the check the front door runs before anything else). */
export function assertNativeUws(rt: UwsRuntime = uwsRuntime): void {
  if (!rt.native) throw new Error(notNativeMessage(rt));
}

const uws = uwsRuntime.module;
export const App = ((...args: Parameters<UwsModule['App']>) => {
  assertNativeUws();
  return uws.App(...args);
}) as UwsModule['App'];
export const closeListenSocket = uws.us_listen_socket_close;
export const localPort = uws.us_socket_local_port as (socket: unknown) => number;
