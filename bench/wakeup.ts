import { fork } from 'node:child_process';
import net from 'node:net';

// What one wake-up of an idle Node process costs on this machine, with no catraca code at all:
//   timer         a 1 ms setInterval that does nothing: CPU per callback
//   loopback      one byte sent to a child process over loopback TCP every ms and echoed back:
//                 this process's CPU per send + receive
// A streamed request wakes every process on its path once per token; at low load no two requests
// share a wake-up, so these figures set the floor of CPU per request at 100 req/s.

const SECONDS = Number(process.argv[3] ?? 5);

function timer(): Promise<string> {
  return new Promise((resolve) => {
    let n = 0;
    const c0 = process.cpuUsage();
    const t = setInterval(() => n++, 1);
    setTimeout(() => {
      clearInterval(t);
      const u = process.cpuUsage(c0);
      resolve(
        `timer     ${n} wake-ups: ${((u.user + u.system) / n).toFixed(1)} µs CPU each (user ${(u.user / n).toFixed(1)}, system ${(u.system / n).toFixed(1)})`,
      );
    }, SECONDS * 1000);
  });
}

function loopback(): Promise<string> {
  return new Promise((resolve) => {
    const server = net.createServer((sock) => {
      let n = 0;
      const c0 = process.cpuUsage();
      const t = setInterval(() => {
        sock.write('x');
        n++;
      }, 1);
      setTimeout(() => {
        clearInterval(t);
        const u = process.cpuUsage(c0);
        child.kill();
        server.close();
        resolve(`loopback  ${n} messages: ${((u.user + u.system) / n).toFixed(1)} µs CPU per send + echo received`);
      }, SECONDS * 1000);
    });
    let child: ReturnType<typeof fork>;
    server.listen(0, '127.0.0.1', () => {
      child = fork(process.argv[1]!, ['echo', String((server.address() as net.AddressInfo).port)], { execArgv: process.execArgv });
    });
  });
}

if (process.argv[2] === 'echo') {
  const sock = net.connect(Number(process.argv[3]), '127.0.0.1');
  sock.on('data', (d) => sock.write(d));
  sock.on('error', () => process.exit(0));
} else {
  process.stdout.write(`${await timer()}\n${await loopback()}\n`);
  process.exit(0);
}
