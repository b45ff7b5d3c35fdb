import { readFileSync } from 'node:fs';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { validateXML } from 'xmllint-wasm';

// Validation against the national schemas (src/nfse/schema, vendored data): libxml2's XSD
// validation compiled to WebAssembly (xmllint-wasm), offline. Used by the Sefin simulator (what
// the real service checks first) and the tests. About 1–2 s of CPU per document: it compiles the
// schemas each time, which is fine for a few notes a minute and nowhere near the request path.

const SCHEMA_DIR = join(dirname(fileURLToPath(import.meta.url)), 'schema');
const SHARED = ['tiposComplexos_v1.01.xsd', 'tiposSimples_v1.01.xsd', 'tiposEventos_v1.01.xsd', 'xmldsig-core-schema.xsd'];

export type SchemaName = 'DPS_v1.01.xsd' | 'NFSe_v1.01.xsd' | 'pedRegEvento_v1.01.xsd' | 'evento_v1.01.xsd';

let files: Map<string, string> | null = null;
const schemaFile = (name: string): string => {
  files ??= new Map();
  let text = files.get(name);
  if (text === undefined) {
    text = readFileSync(join(SCHEMA_DIR, name), 'utf8');
    files.set(name, text);
  }
  return text;
};

/** The schema's complaints (empty: valid). */
export async function validateAgainst(schema: SchemaName, xml: string): Promise<string[]> {
  const r = await validateXML({
    xml: [{ fileName: 'document.xml', contents: xml }],
    schema: [{ fileName: schema, contents: schemaFile(schema) }],
    preload: SHARED.map((f) => ({ fileName: f, contents: schemaFile(f) })),
  });
  return r.valid ? [] : r.errors.map((e) => e.message.replace(/^Schemas validity error : /, '').trim());
}
