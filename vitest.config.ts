import { configDefaults, defineConfig } from 'vitest/config';

// Two projects; `npm test` runs both:
//   unit         no services: pure code, tests beside it in src/, workers/ and bench/ (`npm run test:unit`)
//   integration  real NATS (a nats-server of the run's own) and PostgreSQL (a fresh database per
//                run), see test/global-setup.ts; these tests live in test/ (`npm run test:integration`)
// The soak test runs 10 s in `npm test`; `npm run test:soak` runs it alone for SOAK_SECONDS (120).
const shared = {
  testTimeout: 30000,
  hookTimeout: 60000,
  teardownTimeout: 30000,
  // Each test file in its own child process; integration tests spawn gateways and workers, so
  // keep the file-level parallelism modest (sized for a 2-core machine).
  pool: 'forks' as const,
  maxWorkers: 2,
};
const services = { globalSetup: ['test/global-setup.ts'], setupFiles: ['test/setup-env.ts'] };

export default defineConfig({
  test: {
    reporters: ['default'],
    projects: [
      { test: { ...shared, name: 'unit', include: ['src/**/*.test.ts', 'workers/**/*.test.ts', 'bench/**/*.test.ts'] } },
      { test: { ...shared, ...services, name: 'integration', include: ['test/**/*.test.ts'], exclude: [...configDefaults.exclude] } },
    ],
  },
});
