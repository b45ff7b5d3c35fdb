import { defineConfig } from 'vitest/config';

export default defineConfig({
  test: {
    include: ['src/**/*.test.ts', 'workers/**/*.test.ts', 'test/**/*.test.ts', 'bench/**/*.test.ts'],
    // Real NATS (own nats-server per run) and PostgreSQL (fresh database per run): see test/global-setup.ts.
    globalSetup: ['test/global-setup.ts'],
    setupFiles: ['test/setup-env.ts'],
    testTimeout: 30000,
    hookTimeout: 60000,
    teardownTimeout: 30000,
    // Each test file in its own child process; integration tests spawn gateways and workers, so
    // keep the file-level parallelism modest (sized for a 2-core machine).
    pool: 'forks',
    maxWorkers: 2,
    reporters: ['default'],
  },
});
