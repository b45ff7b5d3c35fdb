import { startPtaxSimulator } from '../../../src/fx/simulator.ts';

// The BCB's PTAX open-data service for the deploy test's console (bundled by scripts/deploy-test.sh,
// run from the project image on the console's network): the console fetches the dollar's rate
// here, never from olinda.bcb.gov.br.
const sim = await startPtaxSimulator({ host: '0.0.0.0', port: 9200 });
console.log(JSON.stringify({ url: sim.url }));
for (const signal of ['SIGTERM', 'SIGINT'] as const) process.on(signal, () => void sim.close().then(() => process.exit(0)));
