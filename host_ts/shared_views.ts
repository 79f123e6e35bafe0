/**
 * Shared memory as the worker's glue touches it (the ring, the reply slot, the file channel).
 *
 * Guest code shares the worker's realm and may replace any built-in that the glue would look up at the time of a
 * call: a typed array's `set` or `slice`, its `length` or `buffer` getter, the species constructor that `slice`
 * and `subarray` consult, Atomics' functions. A replacement called on a view of shared memory would be handed that
 * memory. What is here was captured as this module loaded, before guest code ran; views of shared memory are made
 * here directly (never through a species constructor), and nothing is looked up on them.
 */

const reflectApply = Reflect.apply;
const Bytes = Uint8Array;
const typedArraySet = Object.getPrototypeOf(Uint8Array.prototype).set as (source: ArrayLike<number>) => void;

/** Atomics' functions, as they were before guest code ran. */
export const { load, store, add, exchange, notify, wait, waitAsync } = Atomics;

/** A copy (not shared) of `count` bytes of `buffer` from `offset`. */
export function copyOut(buffer: SharedArrayBuffer, offset: number, count: number): Uint8Array {
  const copy = new Bytes(count);
  reflectApply(typedArraySet, copy, [new Bytes(buffer, offset, count)]);
  return copy;
}

/** Put `bytes` (not shared) into `buffer` at `offset`. */
export function copyIn(buffer: SharedArrayBuffer, offset: number, bytes: Uint8Array): void {
  reflectApply(typedArraySet, new Bytes(buffer, offset, bytes.length), [bytes]);
}
