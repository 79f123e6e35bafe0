/**
 * `ls` on a terminal: GNU ls lists names in columns when its output is a terminal, one per line otherwise.
 * ipykernel runs `!ls` on a pseudo-terminal 80 columns wide, so notebooks show columns; the sandbox's `ls` writes
 * one name per line. For a top-level `ls` whose output goes to the cell (shell_stream.ts marks it), the shell runs
 * `ls` and lays its names out here exactly as GNU coreutils' ls.c does (calculate_columns, print_many_per_line,
 * indent with 8-column tabs).
 */

export const TERMINAL_WIDTH = 80; // a pseudo-terminal's default width (ipykernel's pexpect)
const MIN_COLUMN_WIDTH = 3; // ls.c: 1 character of name and 2 of separation
const TAB_SIZE = 8;

// Options after which `ls` prints something other than a plain list of names (long listings, recursion, one per
// line, help): their output stays as it is.
const KEEPS_ITS_FORMAT = /^-(?:-(?:help|recursive)$|[^-]*[l1R])/;

/** Whether `ls args` lists plain names that a terminal would show in columns (at most one folder operand). */
export function columnsApply(args: string[]): boolean {
  const operands = args.filter((a) => !a.startsWith("-") || a === "-");
  return operands.length <= 1 && !args.some((a) => KEEPS_ITS_FORMAT.test(a));
}

/** The names `ls` printed one per line, in columns `width` wide; undefined when GNU would quote one of them
 * (a space, a quote, a control character: its quoting is not reproduced here) or there is nothing to lay out. */
export function inColumns(listing: string, width = TERMINAL_WIDTH): string | undefined {
  if (!listing.endsWith("\n")) return undefined;
  const names = listing.slice(0, -1).split("\n");
  // deno-lint-ignore no-control-regex
  if (names.some((name) => name === "" || /[\s'"\\\x00-\x1f\x7f$`!*?&;|<>()[\]{}#~]/.test(name))) return undefined;
  const lengths = names.map((name) => [...name].length);
  const widths = columnWidths(lengths, width);
  const rows = Math.ceil(names.length / widths.length);
  const lines: string[] = [];
  for (let row = 0; row < rows; row++) {
    let line = "";
    let pos = 0;
    for (let file = row, col = 0;; col++) {
      line += names[file];
      const end = pos + widths[col];
      const nameEnd = pos + lengths[file];
      file += rows;
      if (file >= names.length) break;
      line += indent(nameEnd, end);
      pos = end;
    }
    lines.push(line);
  }
  return lines.join("\n") + "\n";
}

/** ls.c's calculate_columns (by columns): the widths of the most columns whose line stays under `width`. */
function columnWidths(lengths: number[], width: number): number[] {
  const n = lengths.length;
  const maxCols = Math.max(1, Math.min(Math.floor(width / MIN_COLUMN_WIDTH), n));
  const info = Array.from({ length: maxCols }, (_, i) => ({
    valid: true,
    lineLength: (i + 1) * MIN_COLUMN_WIDTH,
    widths: new Array<number>(i + 1).fill(MIN_COLUMN_WIDTH),
  }));
  lengths.forEach((length, file) => {
    info.forEach((column, i) => {
      if (!column.valid) return;
      const idx = Math.floor(file / Math.floor((n + i) / (i + 1)));
      const real = length + (idx === i ? 0 : 2);
      if (column.widths[idx] < real) {
        column.lineLength += real - column.widths[idx];
        column.widths[idx] = real;
        column.valid = column.lineLength < width;
      }
    });
  });
  let cols = maxCols;
  while (cols > 1 && !info[cols - 1].valid) cols--;
  return info[cols - 1].widths;
}

/** ls.c's indent: from column `from` to `to`, with tabs where a tab stop lies between. */
function indent(from: number, to: number): string {
  let out = "";
  while (from < to) {
    if (Math.floor(to / TAB_SIZE) > Math.floor((from + 1) / TAB_SIZE)) {
      out += "\t";
      from += TAB_SIZE - (from % TAB_SIZE);
    } else {
      out += " ";
      from++;
    }
  }
  return out;
}
