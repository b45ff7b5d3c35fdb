#!/usr/bin/env node
// The admin CLI (`npx catraca …`). Registers tsx so the TypeScript sources run without a build.
import { register } from 'tsx/esm/api';

register();
const { main } = await import('../src/cli/main.ts');
await main();
