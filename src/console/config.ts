// The console's startup checks, apart from its server so that `npm start` can run them before
// starting anything.

/** A refusal to start, with what to change. */
export class ConsoleConfigError extends Error {
  constructor(message: string) {
    super(message);
    this.name = 'ConsoleConfigError';
  }
}

/** Refuses a port the front door or the portal listens on: the console is never on the tenants' public address. */
export function checkConsolePort(port: number, reserved: Array<{ name: string; port: number }>): void {
  const taken = reserved.find((r) => r.port === port && port !== 0);
  if (taken)
    throw new ConsoleConfigError(
      `CONSOLE_PORT=${port} is the ${taken.name}'s port: the console listens on a port of its own, on a private address (CONSOLE_HOST, 127.0.0.1 by default), reached through a VPN or an SSH tunnel`,
    );
}
