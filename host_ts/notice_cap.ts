/**
 * At most a few "stays inside the sandbox" notices per cell (rwfs.ts tells them once per file): a loop writing a
 * thousand files prints five, then one line counting the rest when the cell ends.
 */
export const NOTICES_PER_CELL = 5;

export interface NoticeCap {
  say(text: string): void; // a notice line (with its newline) for the current cell
  end(): void; // the cell is over: the count of the notices left out, if any
}

/** `write` puts a line on the current cell's stderr; `cell` names the cell being served now. */
export function noticeCap(write: (text: string) => void, cell: () => number): NoticeCap {
  let current = -1;
  let shown = 0;
  let more = 0;
  const end = () => {
    if (more) {
      write(
        `sandbox: and ${more} more file${more === 1 ? "" : "s"} stayed inside the sandbox, not in the host ` +
          "folder (as the notices above say: only plain data files reach it; download a file to take it out).\n",
      );
    }
    shown = 0;
    more = 0;
  };
  return {
    say(text: string) {
      if (cell() !== current) {
        end();
        current = cell();
      }
      if (shown < NOTICES_PER_CELL) {
        shown++;
        write(text);
      } else more++;
    },
    end,
  };
}
