/**
 * Zeroes the free memory of the interpreter's heap before the snapshot is taken (snapshot.ts only, never with guest
 * code), so that the sparse restore (sparse_restore.ts) leaves it out: a restored sandbox then holds no memory for
 * it. Free blocks keep whatever the allocator's earlier users left in them (~4.5 MB after the warm-up, measured).
 *
 * The heap is Emscripten's malloc. Every free block it can hand out without growing the heap is taken, largest
 * sizes first, zeroed, and given back once all are taken: the allocator's own state stays its own to keep.
 */

/** What this needs of the interpreter's allocator and memory (Pyodide's Emscripten module gives it). */
export interface Heap {
  malloc(bytes: number): number; // 0: none
  free(pointer: number): void;
  sbrk(increment: number): number; // sbrk(0): the heap's current end
  memory(): Uint8Array; // the whole wasm memory, as it is now
}

/** The block sizes taken, largest first: a free block smaller than the smallest (one page) holds no whole page. */
const SIZES = [1 << 20, 1 << 18, 1 << 16, 1 << 14, 1 << 12, 1 << 10, 1 << 8];

/** Zero every free block of `heap` that lies below the heap's current end; returns how many bytes it zeroed. */
export function zeroFreeHeap(heap: Heap): number {
  const end = heap.sbrk(0);
  const size = heap.memory().length;
  const taken: number[] = [];
  let zeroed = 0;
  try {
    for (const bytes of SIZES) {
      for (;;) {
        const pointer = heap.malloc(bytes);
        if (pointer === 0) break;
        taken.push(pointer);
        if (pointer + bytes > end || heap.memory().length !== size) break; // the heap grew for it: no longer free
        heap.memory().fill(0, pointer, pointer + bytes);
        zeroed += bytes;
      }
    }
  } finally {
    for (const pointer of taken) heap.free(pointer);
  }
  return zeroed;
}
