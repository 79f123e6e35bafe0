import assert from "node:assert/strict";
import { allZero, copySparsely, PAGE, restoringSparsely } from "./sparse_restore.ts";

function image(pages: number, zeroPages: number[]): Uint8Array {
  const bytes = new Uint8Array(pages * PAGE);
  for (let i = 0; i < bytes.length; i++) bytes[i] = (i * 7 + 3) & 0xff || 1;
  for (const p of zeroPages) bytes.fill(0, p * PAGE, (p + 1) * PAGE);
  return bytes;
}

Deno.test("allZero, aligned and not", () => {
  const bytes = new Uint8Array(64);
  assert.deepStrictEqual(allZero(bytes), true);
  assert.deepStrictEqual(allZero(bytes.subarray(3, 40)), true);
  bytes[39] = 1;
  assert.deepStrictEqual(allZero(bytes), false);
  assert.deepStrictEqual(allZero(bytes.subarray(3, 40)), false);
  assert.deepStrictEqual(allZero(bytes.subarray(40)), true);
});

Deno.test("the copy equals the image; pages zero on both sides are not written", () => {
  const source = image(6, [1, 2, 5]);
  const target = new Uint8Array(8 * PAGE);
  target[2 * PAGE + 17] = 9; // memory already holds data where the image is zero: it must be cleared
  target[7 * PAGE] = 4; // beyond the image: untouched
  const written = copySparsely(target, source);
  assert.deepStrictEqual(target.subarray(0, source.length), source);
  assert.deepStrictEqual(target[7 * PAGE], 4);
  assert.deepStrictEqual(written, 4); // pages 0, 2 (cleared), 3, 4; not 1 or 5
});

Deno.test("runs of pages are copied whole, and every page is the OS's (4 KiB), not wasm's (64 KiB)", () => {
  const source = image(20, [0, 3, 4, 5, 19]);
  const target = new Uint8Array(20 * PAGE);
  assert.deepStrictEqual(PAGE, 4096);
  assert.deepStrictEqual(copySparsely(target, source), 15);
  assert.deepStrictEqual(target, source);
});

Deno.test("a partial last page", () => {
  const source = image(2, []).subarray(0, PAGE + 100);
  const target = new Uint8Array(2 * PAGE);
  copySparsely(target, source);
  assert.deepStrictEqual(target.subarray(0, source.length), source);
});

Deno.test("only during the load, only the large whole-image copy, and Int8Array.prototype is left as it was", async () => {
  const source = image(4200, [5, 6, 7]); // over 16 MiB
  const memory = new Int8Array(4200 * PAGE + PAGE);
  const small = new Int8Array(4);
  await restoringSparsely(() => {
    memory.set(source);
    small.set([1, 2], 1);
    return Promise.resolve();
  });
  assert.deepStrictEqual(new Uint8Array(memory.buffer, 0, source.length), source);
  assert.deepStrictEqual([...small], [0, 1, 2, 0]);
  assert.deepStrictEqual(Object.hasOwn(Int8Array.prototype, "set"), false);
});
