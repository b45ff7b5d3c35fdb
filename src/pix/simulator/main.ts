import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { z } from 'zod';
import { createLogger } from '../../log.ts';
import { startPixSimulator } from './server.ts';

// `node dist/src/pix/simulator/main.js <dir>`: the PSP simulator as a process of its own, over
// mTLS, standing in for a PSP's BCB API Pix where none can be reached (scripts/deploy-test.sh runs
// it as a container of the production compose file). <dir> holds psp.json
// {"port", "clientId", "clientSecret"} and the PEM files server-cert.pem, server-key.pem and ca.pem
// (the CA whose client certificates it accepts). Secrets come from those files, never from argv.

const log = createLogger('pix-sim');
const dir = process.argv[2];
if (!dir) {
  process.stderr.write('usage: node dist/src/pix/simulator/main.js <dir with psp.json, server-cert.pem, server-key.pem, ca.pem>\n');
  process.exit(2);
}
const Config = z.object({
  port: z.number().int().min(1).max(65535),
  host: z.string().default('0.0.0.0'),
  clientId: z.string().min(1),
  clientSecret: z.string().min(1),
});
const config = Config.parse(JSON.parse(readFileSync(join(dir, 'psp.json'), 'utf8')));
const sim = await startPixSimulator({
  ...config,
  tls: {
    cert: readFileSync(join(dir, 'server-cert.pem')),
    key: readFileSync(join(dir, 'server-key.pem')),
    ca: readFileSync(join(dir, 'ca.pem')),
  },
});
log.info('PSP simulator listening (mTLS)', { url: sim.url });
const stop = () => void sim.close().then(() => process.exit(0));
process.on('SIGTERM', stop);
process.on('SIGINT', stop);
