// After `npm test` in .ci/run: reads vitest's JSON report and fails CI unless
//   - every suite that needs a program besides NATS and PostgreSQL (the test files that call
//     `describeWith`, test/helpers/tools.ts: Chromium, docker-compose) ran, every test passed;
//   - no test anywhere was skipped or left to do (under CI a missing tool is a failure, never a skip).
// It prints those suites' counts, so CI's log shows that the browser walks and the compose checks ran.
// Usage: node .ci/suites.mjs <vitest JSON report>
import { readdirSync, readFileSync } from 'node:fs';
import { join, relative, resolve } from 'node:path';

const ROOT = resolve(import.meta.dirname, '..');
const report = JSON.parse(readFileSync(process.argv[2], 'utf8'));
const say = (line) => process.stderr.write(`[ci] ${line}\n`);

function testFiles(dir) {
  return readdirSync(dir, { withFileTypes: true }).flatMap((e) =>
    e.isDirectory() ? testFiles(join(dir, e.name)) : e.name.endsWith('.test.ts') ? [join(dir, e.name)] : [],
  );
}
const needingTools = testFiles(join(ROOT, 'test'))
  .filter((f) => /\bdescribeWith\(/.test(readFileSync(f, 'utf8')))
  .map((f) => relative(ROOT, f))
  .sort();

const byFile = new Map(report.testResults.map((r) => [relative(ROOT, r.name), r]));
const problems = [];
say('the suites that need Chromium or docker-compose (test/helpers/tools.ts), as vitest reported them:');
for (const file of needingTools) {
  const r = byFile.get(file);
  if (!r) {
    say(`  ${file}: did not run`);
    problems.push(`${file} did not run`);
    continue;
  }
  const count = (status) => r.assertionResults.filter((a) => a.status === status).length;
  const passed = count('passed');
  const others = r.assertionResults.length - passed;
  say(`  ${file}: ${r.assertionResults.length} tests, ${passed} passed${others ? `, ${others} not passed` : ''} (file ${r.status})`);
  if (passed === 0 || others > 0 || r.status !== 'passed') problems.push(`${file}: ${passed} of ${r.assertionResults.length} tests passed`);
}

const notRun = report.testResults.flatMap((r) =>
  r.assertionResults.filter((a) => a.status !== 'passed' && a.status !== 'failed').map((a) => `${relative(ROOT, r.name)} > ${a.fullName} (${a.status})`),
);
for (const t of notRun) problems.push(`not run: ${t}`);
say(
  `whole run: ${report.numTotalTests} tests, ${report.numPassedTests} passed, ${report.numFailedTests} failed, ${report.numPendingTests} skipped, ${report.numTodoTests} todo`,
);

if (problems.length > 0) {
  for (const p of problems) say(`FAIL ${p}`);
  process.exit(1);
}
