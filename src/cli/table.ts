/** A cell of a text table: a number is right-aligned unless the caller says otherwise. */
export type Cell = string | number;

/**
 * Rows of cells as lines of text: every column padded to its widest cell and joined by two spaces,
 * trailing blanks trimmed. `right(cell, column, row)` says which cells are right-aligned.
 */
export function alignLines(rows: Cell[][], right: (cell: Cell, column: number, row: number) => boolean): string[] {
  const w: number[] = [];
  for (const r of rows) for (let i = 0; i < r.length; i++) w[i] = Math.max(w[i] ?? 0, String(r[i]).length);
  return rows.map((r, y) =>
    r
      .map((c, i) => (right(c, i, y) ? String(c).padStart(w[i]) : String(c).padEnd(w[i])))
      .join('  ')
      .trimEnd(),
  );
}

/** A plain text table, one string a line: columns padded to their widest cell, `numeric` columns right-aligned. */
export function textTable(head: string[], rows: string[][], numeric: Iterable<number>): string[] {
  const right = new Set(numeric);
  return alignLines([head, ...rows], (_, i) => right.has(i));
}

/** A plain text table with its head as the first row: numbers right-aligned, text left (the benchmarks' reports). */
export function table(rows: Cell[][]): string {
  return alignLines(rows, (c) => typeof c === 'number').join('\n');
}
