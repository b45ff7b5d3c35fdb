// Runs in every test worker before the test file: the services of test/global-setup.ts.
import { inject } from 'vitest';

Object.assign(process.env, inject('testEnv'));
