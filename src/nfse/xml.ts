// A minimal writer of the national layout's XML: elements in the default namespace, no prefixes,
// no whitespace between tags (the manual's rule), text escaped. Elements whose value is undefined
// are left out, so optional fields are written by passing them or not.

export type Node = { name: string; attrs?: Record<string, string>; children: Child[] };
export type Child = Node | string;

export function el(name: string, ...children: (Child | undefined | null | false)[]): Node {
  return { name, children: children.filter((c): c is Child => c !== undefined && c !== null && c !== false) };
}

/** An element with attributes. */
export function ela(name: string, attrs: Record<string, string>, ...children: (Child | undefined | null | false)[]): Node {
  return { ...el(name, ...children), attrs };
}

/** `<name>value</name>`, or nothing when value is undefined. */
export function leaf(name: string, value: string | undefined | null): Node | undefined {
  return value === undefined || value === null ? undefined : { name, children: [value] };
}

export function escapeXml(s: string): string {
  return s.replace(/[&<>"']/g, (c) => ({ '&': '&amp;', '<': '&lt;', '>': '&gt;', '"': '&quot;', "'": '&apos;' })[c] as string);
}

export function render(n: Child): string {
  if (typeof n === 'string') return escapeXml(n);
  const attrs = Object.entries(n.attrs ?? {})
    .map(([k, v]) => ` ${k}="${escapeXml(v)}"`)
    .join('');
  return `<${n.name}${attrs}>${n.children.map(render).join('')}</${n.name}>`;
}

export const XML_DECLARATION = '<?xml version="1.0" encoding="UTF-8"?>';
export const NFSE_NS = 'http://www.sped.fazenda.gov.br/nfse';
