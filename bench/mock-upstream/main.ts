import { startMockUpstream } from './server.ts';

// `tsx bench/mock-upstream/main.ts` — env MOCK_PORT (default 9100), MOCK_HOST, MOCK_FIRST_TOKEN_MS,
// MOCK_TOKENS_PER_SECOND, MOCK_OUTPUT_TOKENS, and the batch APIs' timing MOCK_BATCH_VALIDATE_MS,
// MOCK_BATCH_LINE_MS, MOCK_BATCH_FINALIZE_MS (batch.ts). Prints {"url": "...", "port": N} on stdout.
const num = (v: string | undefined, d: number) => (v !== undefined && v !== '' && Number.isFinite(Number(v)) ? Number(v) : d);
const mock = await startMockUpstream({
  port: num(process.env.MOCK_PORT, 9100),
  host: process.env.MOCK_HOST ?? '127.0.0.1',
  firstTokenMs: num(process.env.MOCK_FIRST_TOKEN_MS, 0),
  tokensPerSecond: num(process.env.MOCK_TOKENS_PER_SECOND, 0),
  outputTokens: num(process.env.MOCK_OUTPUT_TOKENS, 16),
  batch: {
    validateMs: num(process.env.MOCK_BATCH_VALIDATE_MS, 0),
    lineMs: num(process.env.MOCK_BATCH_LINE_MS, 0),
    finalizeMs: num(process.env.MOCK_BATCH_FINALIZE_MS, 0),
  },
});
process.stdout.write(JSON.stringify({ url: mock.url, port: mock.port }) + '\n');
const stop = () => void mock.close().then(() => process.exit(0));
process.on('SIGTERM', stop);
process.on('SIGINT', stop);
