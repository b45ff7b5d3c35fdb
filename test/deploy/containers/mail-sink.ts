import http from 'node:http';
import { startMailSink } from '../../../src/mail/sink.ts';

// The deploy test's SMTP server (bundled by scripts/deploy-test.sh, run from the project image on
// the compose network): accepts every message the portal sends and shows them to the test on
// GET /messages (JSON: [{to, subject, text}]), published on the host's loopback only.

const sink = await startMailSink({ host: '0.0.0.0', port: 2525 });
const server = http.createServer((req, res) => {
  if (req.url !== '/messages') return void res.writeHead(404).end();
  const body = JSON.stringify(sink.messages());
  res.writeHead(200, { 'content-type': 'application/json' }).end(body);
});
server.listen(8025, '0.0.0.0');
const stop = () => void sink.close().then(() => server.close(() => process.exit(0)));
process.on('SIGTERM', stop);
process.on('SIGINT', stop);
