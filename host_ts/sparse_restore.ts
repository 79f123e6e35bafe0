/**
 * A sparse restore of Pyodide's memory snapshot: while `load` runs, Pyodide's copy of the image into wasm memory
 * (one `HEAP8.set` of the whole image) leaves out the memory pages (4 KiB, the OS's) that are zero in the image and
 * still zero in memory. The result is the same, but those pages (the unused C stack, free heap: ~17 MB here) are
 * never written, so the OS never gives them memory. The snapshot builder zeroes the heap's free memory for it.
 */

export const PAGE = 4096;
const LARGE = 1 << 24; // only a copy this large is taken for the snapshot image

/** Whether `bytes` are all zero (8 at a time where the view is aligned for it). */
export function allZero(bytes: Uint8Array): boolean {
  if (bytes.byteOffset % 8 === 0 && bytes.length % 8 === 0) {
    const words = new BigUint64Array(bytes.buffer, bytes.byteOffset, bytes.length / 8);
    for (let i = 0; i < words.length; i++) if (words[i] !== 0n) return false;
    return true;
  }
  for (let i = 0; i < bytes.length; i++) if (bytes[i] !== 0) return false;
  return true;
}

/** Copy `source` to the start of `target`, writing only the pages that are not zero on both sides; returns how many
 * pages it wrote. Runs of pages to write are copied at once. */
export function copySparsely(target: Uint8Array, source: Uint8Array): number {
  let written = 0;
  let run = -1; // where the run of pages to write began, -1: none
  for (let at = 0; at < source.length; at += PAGE) {
    const write = !allZero(source.subarray(at, at + PAGE)) || !allZero(target.subarray(at, at + PAGE));
    if (write) {
      written++;
      if (run < 0) run = at;
    } else if (run >= 0) {
      target.set(source.subarray(run, at), run);
      run = -1;
    }
  }
  if (run >= 0) target.set(source.subarray(run), run);
  return written;
}

export async function restoringSparsely<T>(load: () => Promise<T>): Promise<T> {
  const proto = Int8Array.prototype;
  const original = proto.set;
  const own = Object.hasOwn(proto, "set");
  proto.set = function (this: Int8Array, source: ArrayLike<number> | ArrayLike<bigint>, offset?: number) {
    if (!offset && source instanceof Uint8Array && source.length >= LARGE && source.length <= this.length) {
      copySparsely(new Uint8Array(this.buffer, this.byteOffset, this.length), source);
      return;
    }
    return original.call(this, source as ArrayLike<number>, offset);
  } as typeof original;
  try {
    return await load();
  } finally {
    if (own) proto.set = original;
    else delete (proto as { set?: unknown }).set;
  }
}
