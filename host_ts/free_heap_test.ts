import assert from "node:assert/strict";
import { type Heap, zeroFreeHeap } from "./free_heap.ts";

/** A first-fit allocator over `memory` (no headers): free ranges in a list, the heap's end grows for what fits none. */
function fakeHeap(memory: Uint8Array, end: number, free: [number, number][]): Heap & { live: Set<number> } {
  const sizes = new Map<number, number>();
  const live = new Set<number>();
  let brk = end;
  return {
    live,
    malloc(bytes) {
      const i = free.findIndex(([, size]) => size >= bytes);
      let pointer: number;
      if (i >= 0) {
        pointer = free[i][0];
        free[i] = [pointer + bytes, free[i][1] - bytes];
      } else {
        if (brk + bytes > memory.length) return 0;
        pointer = brk;
        brk += bytes;
      }
      sizes.set(pointer, bytes);
      live.add(pointer);
      return pointer;
    },
    free(pointer) {
      free.push([pointer, sizes.get(pointer)!]);
      live.delete(pointer);
    },
    sbrk: (increment) => (brk += increment) - increment,
    memory: () => memory,
  };
}

Deno.test("free blocks below the heap's end are zeroed, live data and the memory above are not touched", () => {
  const memory = new Uint8Array(1 << 22).fill(7);
  const heap = fakeHeap(memory, 3 << 20, [[4096, 1 << 20], [(2 << 20) + 100, 5000]]);
  const zeroed = zeroFreeHeap(heap);
  assert.deepStrictEqual(memory.subarray(4096, 4096 + (1 << 20)).every((b) => b === 0), true);
  assert.deepStrictEqual(memory.subarray((2 << 20) + 100, (2 << 20) + 100 + 4096 + 512).every((b) => b === 0), true);
  assert.deepStrictEqual(zeroed, (1 << 20) + 4096 + 3 * 256); // 5000 bytes: one page, three of the smallest blocks
  assert.deepStrictEqual(memory[4095], 7); // live
  assert.deepStrictEqual(memory[(2 << 20) + 99], 7); // live
  assert.deepStrictEqual(memory.subarray(3 << 20).every((b) => b === 7), true); // above the heap's end
  assert.deepStrictEqual(heap.live.size, 0); // every block taken was given back
});

Deno.test("a heap with no free block is left as it was", () => {
  const memory = new Uint8Array(1 << 16).fill(7);
  const heap = fakeHeap(memory, 1 << 16, []);
  assert.deepStrictEqual(zeroFreeHeap(heap), 0);
  assert.deepStrictEqual(memory.every((b) => b === 7), true);
  assert.deepStrictEqual(heap.live.size, 0);
});
