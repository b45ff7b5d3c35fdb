import { existsSync, readdirSync, readFileSync, statSync } from 'node:fs';
import { dirname, join, relative, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';
import { describe, expect, it } from 'vitest';
import { SYNOPSES } from './cli/main.ts';
import { ConfigSchema, PortalEnvSchema } from './config.ts';

// The documentation against the repository: (a) every relative link of the README, docs/ and the
// other pages below points to a file that exists, and every #anchor to a heading of its page
// (GitHub's slugs); (b) the configuration table of docs/operations.md names exactly the variables
// of the settings schema (src/config.ts: ConfigSchema, which extends the portal's PortalEnvSchema),
// and .env.example neither names a variable the docs do not know nor holds a value the schema
// refuses; (c) the admin CLI's commands there are `catraca --help`'s. No services: a unit test.

const ROOT = resolve(dirname(fileURLToPath(import.meta.url)), '..');
const read = (path: string) => readFileSync(join(ROOT, path), 'utf8');

/** The pages checked: the front page, everything in docs/, and the READMEs and changelog they lean on. */
const PAGES = [
  'README.md',
  ...readdirSync(join(ROOT, 'docs'))
    .filter((f) => f.endsWith('.md'))
    .map((f) => `docs/${f}`),
  'bench/README.md',
  'workers/README.md',
  'CHANGELOG.md',
];

/** The page without fenced code blocks (their lines kept empty, so line numbers still hold). */
function prose(markdown: string): string[] {
  let fence: string | null = null;
  return markdown.split('\n').map((line) => {
    const m = /^\s*(`{3,}|~{3,})/.exec(line);
    if (m) {
      if (fence === null) fence = m[1][0];
      else if (m[1][0] === fence) fence = null;
      return '';
    }
    return fence === null ? line : '';
  });
}

/** A line without its inline code spans (a link inside backticks is text, not a link). */
const withoutCode = (line: string) => line.replace(/(`+)[^`]*?\1/g, '');

/**
 * GitHub's anchor for a heading (github-slugger): the rendered text, lower-cased, every character
 * that is not a letter, a mark, a digit, a connector (`_`), a hyphen or a space removed, spaces
 * turned into hyphens. Repeated headings get -1, -2, … .
 */
function slug(heading: string): string {
  const text = heading
    .replace(/!?\[([^\]]*)\]\([^)]*\)/g, '$1') // links and images: their text
    .replace(/`([^`]*)`/g, '$1') // code spans: their content
    .replace(/(\*\*|__)(.+?)\1/g, '$2') // bold
    .replace(/(^|[^\p{L}\p{N}])[*_]([^*_]+)[*_](?=$|[^\p{L}\p{N}])/gu, '$1$2'); // emphasis
  return text
    .trim()
    .toLowerCase()
    .replace(/[^\p{L}\p{M}\p{N}\p{Pc}\- ]/gu, '')
    .replace(/ /g, '-');
}

/** The anchors of a markdown page, in GitHub's way. */
function anchors(markdown: string): Set<string> {
  const seen = new Map<string, number>();
  const out = new Set<string>();
  for (const line of prose(markdown)) {
    const m = /^#{1,6}\s+(.*?)\s*#*\s*$/.exec(line);
    if (!m) continue;
    const base = slug(m[1]);
    const n = seen.get(base) ?? 0;
    seen.set(base, n + 1);
    out.add(n === 0 ? base : `${base}-${n}`);
  }
  return out;
}

interface Link {
  page: string;
  line: number;
  target: string;
}

/** Inline links and images `[text](target)` and reference definitions `[name]: target`, outside code. */
function links(page: string): Link[] {
  const out: Link[] = [];
  prose(read(page)).forEach((raw, i) => {
    const line = withoutCode(raw);
    for (const m of line.matchAll(/!?\[[^\]]*\]\(\s*<?([^)\s>]+)>?(?:\s+"[^"]*")?\s*\)/g)) out.push({ page, line: i + 1, target: m[1] });
    const def = /^\s{0,3}\[[^\]]+\]:\s*<?(\S+?)>?(?:\s+.*)?$/.exec(line);
    if (def) out.push({ page, line: i + 1, target: def[1] });
  });
  return out;
}

/** What is wrong with one link, or null: a missing file, or an anchor its page does not have. */
function brokenLink(link: Link): string | null {
  const { target } = link;
  if (/^[a-z][a-z0-9+.-]*:/i.test(target)) return null; // https:, mailto:, …: not ours to check
  const hash = target.indexOf('#');
  const pathPart = decodeURIComponent(hash < 0 ? target : target.slice(0, hash)).replace(/\?.*$/, '');
  const anchor = hash < 0 ? null : decodeURIComponent(target.slice(hash + 1));
  const file = pathPart === '' ? join(ROOT, link.page) : resolve(ROOT, dirname(link.page), pathPart);
  const where = `${link.page}:${link.line}: ${target}`;
  if (!existsSync(file)) return `${where} → no such file ${relative(ROOT, file)}`;
  if (anchor === null || !file.endsWith('.md') || statSync(file).isDirectory()) return null;
  const known = anchors(readFileSync(file, 'utf8'));
  return known.has(anchor) ? null : `${where} → ${relative(ROOT, file)} has no heading #${anchor}`;
}

/** The rows of the first table after the heading `heading` (up to the next heading of its level or above). */
function tableAfter(markdown: string, heading: string): string[][] {
  const lines = markdown.split('\n');
  const start = lines.findIndex((l) => l.trim() === heading);
  if (start < 0) return [];
  const level = heading.indexOf(' ');
  const rows: string[][] = [];
  for (let i = start + 1; i < lines.length; i++) {
    const line = lines[i];
    const h = /^(#+)\s/.exec(line);
    if (h && h[1].length <= level) break;
    if (!line.trim().startsWith('|')) {
      if (rows.length) break;
      continue;
    }
    rows.push(splitRow(line));
  }
  return rows.filter((cells) => !cells.every((c) => /^:?-+:?$/.test(c))).slice(1); // no separator, no header
}

/** The cells of a table row; a `|` inside backticks is not a separator. */
function splitRow(line: string): string[] {
  const cells: string[] = [];
  let cell = '';
  let code = false;
  const body = line.trim().replace(/^\|/, '').replace(/\|$/, '');
  for (const ch of body) {
    if (ch === '`') code = !code;
    if (ch === '|' && !code) {
      cells.push(cell.trim());
      cell = '';
    } else cell += ch;
  }
  cells.push(cell.trim());
  return cells;
}

/** The variable names a table's first column gives, each in backticks. */
const variablesOf = (rows: string[][]) => rows.flatMap((cells) => [...cells[0].matchAll(/`([A-Z][A-Z0-9_]*)`/g)].map((m) => m[1]));

const SCHEMA_VARIABLES = new Set([...Object.keys(ConfigSchema.shape), ...Object.keys(PortalEnvSchema.shape)]);
const OPERATIONS = read('docs/operations.md');
const CONFIG_HEADING = '## Configuration (environment)';
const OTHER_HEADING = '### Variables outside the schema';

describe('documentation links', () => {
  it('checks the pages it means to', () => {
    for (const page of PAGES) expect(existsSync(join(ROOT, page)), page).toBe(true);
    expect(PAGES.length).toBeGreaterThan(6);
  });

  it('every relative link points to an existing file, and every #anchor to a heading of its page', () => {
    const all = PAGES.flatMap(links);
    expect(all.length).toBeGreaterThan(50);
    const broken = all.map(brokenLink).filter((b): b is string => b !== null);
    expect(broken, `broken links:\n  ${broken.join('\n  ')}`).toEqual([]);
  });

  it('makes anchors the way GitHub does', () => {
    expect(slug('In-process pools (`GATEWAY_LOCAL_POOLS`)')).toBe('in-process-pools-gateway_local_pools');
    expect(slug('Worker pools (`workers/main.ts`)')).toBe('worker-pools-workersmaints');
    expect(slug('Admin CLI (`npx catraca …`)')).toBe('admin-cli-npx-catraca-');
    expect(slug('Dispatch: a bounded, fair wait')).toBe('dispatch-a-bounded-fair-wait');
    expect(slug('Node 22 and 24')).toBe('node-22-and-24');
    expect([...anchors('# A\n## B\n```\n# not a heading\n```\n## B\n')]).toEqual(['a', 'b', 'b-1']);
  });
});

describe('configuration reference', () => {
  const table = variablesOf(tableAfter(OPERATIONS, CONFIG_HEADING));
  const others = variablesOf(tableAfter(OPERATIONS, OTHER_HEADING));

  it(`docs/operations.md "${CONFIG_HEADING}" names exactly the variables of the settings schema`, () => {
    expect(table.length, `no table under "${CONFIG_HEADING}" in docs/operations.md`).toBeGreaterThan(0);
    const documented = new Set(table);
    const undocumented = [...SCHEMA_VARIABLES].filter((v) => !documented.has(v)).sort();
    const unknown = [...documented].filter((v) => !SCHEMA_VARIABLES.has(v)).sort();
    const twice = table.filter((v, i) => table.indexOf(v) !== i);
    expect(
      { undocumented, unknown, twice },
      `in the schema (src/config.ts) but not in the table: ${undocumented.join(', ') || 'none'}; ` +
        `in the table but not in the schema: ${unknown.join(', ') || 'none'}; in the table twice: ${twice.join(', ') || 'none'}`,
    ).toEqual({ undocumented: [], unknown: [], twice: [] });
  });

  it('the variables outside the schema are not schema variables, and something in the repository reads them', () => {
    expect(others.length).toBeGreaterThan(0);
    const inSchema = others.filter((v) => SCHEMA_VARIABLES.has(v));
    expect(inSchema, `in "${OTHER_HEADING}" but read through the schema: move them to the configuration table`).toEqual([]);
    const sources = ['src', 'workers', 'bin', 'scripts', 'deploy']
      .flatMap((dir) => filesUnder(join(ROOT, dir)))
      .filter((f) => !f.endsWith('.test.ts') && !f.endsWith('.md'))
      .concat(['docker-compose.yml', '.env.example', 'Dockerfile'].map((f) => join(ROOT, f)))
      .map((f) => readFileSync(f, 'utf8'))
      .join('\n');
    // a name, or its tail after a template's `${…}` (`${name.toUpperCase()}_METRICS_PORT`)
    const named = (v: string) => new RegExp(`\\b${v}\\b`).test(sources) || sources.includes(`}${v.slice(v.indexOf('_'))}`);
    const unread = others.filter((v) => !named(v));
    expect(unread, `documented in "${OTHER_HEADING}" but named nowhere in the code, compose or deploy/`).toEqual([]);
  });

  it('.env.example names only documented variables, with values the schema accepts', () => {
    const documented = new Set([...table, ...others]);
    const shape = ConfigSchema.shape as Record<string, { safeParse(v: unknown): { success: boolean } }>;
    const problems: string[] = [];
    for (const [i, line] of read('.env.example').split('\n').entries()) {
      const m = /^([A-Z][A-Z0-9_]*)=(.*)$/.exec(line.trim());
      if (!m) continue;
      const [, name, value] = m;
      if (!documented.has(name)) problems.push(`.env.example:${i + 1}: ${name} is not in docs/operations.md`);
      else if (value !== '' && shape[name] && !shape[name].safeParse(value).success)
        problems.push(`.env.example:${i + 1}: ${name}=${value} is refused by the schema`);
    }
    expect(problems, problems.join('\n')).toEqual([]);
  });
});

describe('the admin CLI in docs/operations.md', () => {
  it('lists every command exactly as `catraca --help` does', () => {
    const page = read('docs/operations.md');
    const start = page.indexOf('```\n', page.indexOf('The commands, as `catraca --help` prints them')) + 4;
    expect(page.slice(start, page.indexOf('\n```', start))).toBe(SYNOPSES);
  });
});

function filesUnder(dir: string): string[] {
  return readdirSync(dir, { withFileTypes: true }).flatMap((e) => {
    const path = join(dir, e.name);
    if (e.isDirectory()) return e.name === 'node_modules' || e.name === 'static' ? [] : filesUnder(path);
    return [path];
  });
}
