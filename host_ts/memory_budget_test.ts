import assert from "node:assert/strict";
import {
  type BudgetFS,
  budgetMemfs,
  budgetWasmGrow,
  countMemfs,
  IN_PLACE_BYTES,
  type MemFS,
  type MemNode,
  MemoryBudget,
  NODE_BYTES,
} from "./memory_budget.ts";

const MIB = 1 << 20;
const ENOSPC = 51;
const DIR = 0o40000;
const FILE = 0o100000;

class ErrnoError extends Error {
  constructor(readonly errno: number) {
    super(`errno ${errno}`);
  }
}

/** A file system shaped as Emscripten's MEMFS is (the parts the budget touches), with its real write path. */
function fakeFS(): BudgetFS & { MEMFS: MemFS; make(parent: MemNode, name: string, mode: number): MemNode } {
  const MEMFS = {} as MemFS;
  const mount = { type: MEMFS };
  const root: MemNode = { mode: DIR, mount, contents: {} };
  const original = (stream: { node: MemNode }, buffer: Uint8Array, offset: number, length: number, at: number) => {
    const node = stream.node;
    MEMFS.expandFileStorage(node, at + length);
    (node.contents as Uint8Array).set(buffer.subarray(offset, offset + length), at);
    node.usedBytes = Math.max(node.usedBytes!, at + length);
    return length;
  };
  Object.assign(MEMFS, {
    stream_ops: { write: original },
    ops_table: { file: { stream: { write: original } } },
    createNode(parent: MemNode | null, name: string, mode: number): MemNode {
      const node: MemNode = mode === DIR
        ? { mode, mount, contents: {} }
        : { mode, mount, contents: new Uint8Array(0), usedBytes: 0 };
      if (parent) (parent.contents as Record<string, MemNode>)[name] = node;
      return node;
    },
    expandFileStorage() {
      throw new Error("replaced by the budget");
    },
    resizeFileStorage() {
      throw new Error("replaced by the budget");
    },
  });
  return {
    MEMFS,
    root,
    streams: [],
    isDir: (mode) => mode === DIR,
    isFile: (mode) => mode === FILE,
    ErrnoError,
    filesystems: { MEMFS },
    make: (parent, name, mode) => MEMFS.createNode(parent, name, mode, 0),
  };
}

function budgeted(limitMib: number, wasm = 0) {
  const FS = fakeFS();
  const counted = { times: 0 };
  const budget = new MemoryBudget(limitMib * MIB, () => wasm, () => (counted.times++, countMemfs(FS)));
  budgetMemfs(FS, budget, ENOSPC);
  const write = (node: MemNode, bytes: number, at = node.usedBytes ?? 0) =>
    (FS.MEMFS.ops_table!.file.stream.write as (...args: unknown[]) => number)(
      { node },
      new Uint8Array(bytes).fill(7),
      0,
      bytes,
      at,
    );
  return { FS, budget, write, counted };
}

/** The errno of the ErrnoError `f` throws. */
function errnoOf(f: () => unknown): number {
  try {
    f();
  } catch (err) {
    assert.ok(err instanceof ErrnoError, String(err));
    return err.errno;
  }
  throw new Error("no error");
}

Deno.test("a write that fits is counted; one past the limit fails with ENOSPC and names the setting", () => {
  const { FS, budget, write } = budgeted(64, 16 * MIB);
  const file = FS.make(FS.root, "a", FILE);
  assert.deepEqual(write(file, 30 * MIB), 30 * MIB);
  assert.deepEqual(countMemfs(FS), 2 * NODE_BYTES + 30 * MIB);
  assert.ok(budget.files >= countMemfs(FS));
  assert.deepEqual(errnoOf(() => write(file, 20 * MIB)), ENOSPC); // 16 wasm + 30 + 20 > 64
  assert.deepEqual(file.usedBytes, 30 * MIB); // nothing of the refused write landed
  assert.deepEqual(
    budget.takeRefusal(),
    "the sandbox's in-memory files are full: files hold 30 MiB and Python's memory 16 MiB of " +
      "SandboxKernel.memory_limit_mb=64 (delete files in /tmp or /home/pyodide, or raise the limit)",
  );
  assert.deepEqual(budget.takeRefusal(), undefined); // once
});

Deno.test("what a deleted file held is found by the recount, not while it is still open", () => {
  const { FS, write } = budgeted(64);
  const a = FS.make(FS.root, "a", FILE);
  write(a, 40 * MIB);
  const b = FS.make(FS.root, "b", FILE);
  assert.deepEqual(errnoOf(() => write(b, 40 * MIB)), ENOSPC);
  FS.streams.push({ node: a }); // deleted while open: still held
  delete (FS.root.contents as Record<string, MemNode>).a;
  assert.deepEqual(errnoOf(() => write(b, 40 * MIB)), ENOSPC);
  FS.streams.length = 0; // closed: freed
  assert.deepEqual(write(b, 40 * MIB), 40 * MIB);
});

Deno.test("a large file grows in place and gives storage back when truncated", () => {
  const { FS, budget, write } = budgeted(64);
  const file = FS.make(FS.root, "big", FILE);
  write(file, IN_PLACE_BYTES);
  const buffer = (file.contents as Uint8Array).buffer as ArrayBuffer;
  assert.ok(buffer.resizable);
  for (let i = 0; i < 40; i++) write(file, MIB);
  assert.deepEqual((file.contents as Uint8Array).buffer, buffer); // never copied
  assert.deepEqual(file.usedBytes, 41 * MIB);
  assert.deepEqual((file.contents as Uint8Array)[41 * MIB - 1], 7);
  const before = budget.files;
  FS.MEMFS.resizeFileStorage(file, 2 * MIB);
  assert.deepEqual(buffer.byteLength, 2 * MIB);
  assert.deepEqual(budget.files, before - (before - 2 * NODE_BYTES - 2 * MIB)); // exact after the shrink
  FS.MEMFS.resizeFileStorage(file, 10);
  assert.deepEqual(file.usedBytes, 10);
  assert.ok(!((file.contents as Uint8Array).buffer as ArrayBuffer).resizable); // small again: a plain buffer
  assert.deepEqual(Array.from((file.contents as Uint8Array).subarray(0, 10)), new Array(10).fill(7));
});

Deno.test("a truncate past the limit fails with ENOSPC; growing near the limit takes exactly what is needed", () => {
  const { FS, write } = budgeted(8);
  const file = FS.make(FS.root, "t", FILE);
  assert.deepEqual(errnoOf(() => FS.MEMFS.resizeFileStorage(file, 9 * MIB)), ENOSPC);
  assert.deepEqual(file.usedBytes, 0);
  write(file, 7.5 * MIB);
  write(file, MIB / 4); // MEMFS's 1/8 more (8.4 MiB) would not fit: exactly the bytes asked for do
  assert.deepEqual((file.contents as Uint8Array).length, 7.75 * MIB);
});

Deno.test("every new node is counted: a flood of empty files ends in ENOSPC", () => {
  const { FS } = budgeted(1);
  let made = 0;
  assert.deepEqual(
    errnoOf(() => {
      for (;;) FS.make(FS.root, `f${made++}`, FILE);
    }),
    ENOSPC,
  );
  assert.deepEqual(made - 1, MIB / NODE_BYTES - 1); // the root is one
});

Deno.test("wasm memory grows only within what the files leave of the budget", () => {
  const memory = new WebAssembly.Memory({ initial: 16, maximum: 1024 }); // 1 MiB
  let files = 2 * MIB;
  const budget = new MemoryBudget(4 * MIB, () => memory.buffer.byteLength, () => files);
  budgetWasmGrow(memory, budget);
  assert.deepEqual(memory.grow(16), 16); // 2 MiB of wasm + 2 of files
  assert.throws(() => memory.grow(1), (err: Error) => err instanceof RangeError && err.message.includes("=4"));
  files = MIB; // the recount finds files deleted
  assert.deepEqual(memory.grow(16), 32);
  assert.deepEqual(memory.buffer.byteLength, 3 * MIB);
});

Deno.test("filling the files to the limit counts them exactly once, when the last write does not fit", () => {
  const { FS, write, counted } = budgeted(32);
  const file = FS.make(FS.root, "fill", FILE);
  const more = FS.make(FS.root, "more", FILE);
  assert.equal(counted.times, 1); // at the start
  let written = 0;
  assert.deepEqual(
    errnoOf(() => {
      for (;;) written += write(file, MIB / 4);
    }),
    ENOSPC,
  );
  assert.equal(counted.times, 2);
  assert.equal(written, 32 * MIB - MIB / 4); // all but the last quarter: the nodes take 1.5 KiB of it
  assert.equal(write(more, MIB / 8), MIB / 8); // what is left still takes a smaller write
});
