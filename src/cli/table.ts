/** A plain text table, one string a line: columns padded to their widest cell, `numeric` columns right-aligned. */
export function textTable(head: string[], rows: string[][], numeric: Iterable<number>): string[] {
  const right = new Set(numeric);
  const all = [head, ...rows];
  const w = head.map((_, i) => Math.max(...all.map((r) => r[i].length)));
  return all.map((r) =>
    r
      .map((c, i) => (right.has(i) ? c.padStart(w[i]) : c.padEnd(w[i])))
      .join('  ')
      .trimEnd(),
  );
}
