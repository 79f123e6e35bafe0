/**
 * One memory budget for the sandbox: the interpreter's wasm memory and the bytes of its in-memory file system
 * (MEMFS: /tmp, /home/pyodide, the overlay's upper layers, installed packages), together at most
 * SandboxKernel.memory_limit_mb. MEMFS keeps file contents in JS ArrayBuffers, outside wasm memory and V8's heap,
 * which no V8 flag bounds: past the budget a write or truncate fails with ENOSPC, and wasm memory does not grow
 * (Python's MemoryError).
 *
 * The running total of file bytes only over-counts (what a deleted file held is still in it); when it says a change
 * does not fit, the files are counted exactly (the tree, and the open streams of deleted files) before refusing.
 * Everything here is installed before guest code runs; a guest that tampers with the JS side meets the process's
 * hard limits instead (docs/security.md).
 */

import { memoryBytes } from "./wasm_memory.ts";

/** What one MEMFS node (a file, folder or link) is counted as: its JS object, its name and its table entries. */
export const NODE_BYTES = 512;
/** A file's storage of this size or more grows in place (a resizable ArrayBuffer): no second copy while it grows. */
export const IN_PLACE_BYTES = 1 << 20;
const MIB = 1 << 20;

/** The budget's arithmetic, apart from the file system it watches. */
export class MemoryBudget {
  /** Bytes the files hold, or more (never less). */
  files: number;
  /** Why the last change was refused (the guest's error shows it), until taken. */
  private refusal: string | undefined;

  constructor(
    readonly limitBytes: number,
    private readonly wasmBytes: () => number,
    private readonly countFiles: () => number,
  ) {
    this.files = countFiles();
  }

  /** Count `bytes` more for files (less, when negative); false (and nothing counted) when they do not fit. */
  takeForFiles(bytes: number): boolean {
    if (bytes <= 0 || this.files + bytes + this.wasmBytes() <= this.limitBytes) {
      this.files = Math.max(0, this.files + bytes);
      return true;
    }
    this.files = this.countFiles();
    if (this.files + bytes + this.wasmBytes() <= this.limitBytes) {
      this.files += bytes;
      return true;
    }
    this.refusal = this.fullMessage();
    return false;
  }

  /** The bytes the files hold, counted exactly now. */
  filesNow(): number {
    return (this.files = this.countFiles());
  }

  /** The bytes the budget holds now: the files (counted exactly) and wasm memory. */
  usedNow(): number {
    return this.filesNow() + this.wasmBytes();
  }

  /** Whether `bytes` more for files fit as counted now (no recount). */
  fitsNow(bytes: number): boolean {
    return this.files + bytes + this.wasmBytes() <= this.limitBytes;
  }

  /** Whether wasm memory may grow to `bytes` in all. */
  mayGrowWasm(bytes: number): boolean {
    if (bytes + this.files <= this.limitBytes) return true;
    this.files = this.countFiles();
    return bytes + this.files <= this.limitBytes;
  }

  /** The ENOSPC error's text: what holds the budget, and the setting that sets it. */
  fullMessage(): string {
    const mib = (bytes: number) => Math.round(bytes / MIB);
    return `the sandbox's in-memory files are full: files hold ${mib(this.files)} MiB and Python's memory ` +
      `${mib(this.wasmBytes())} MiB of SandboxKernel.memory_limit_mb=${mib(this.limitBytes)} (delete files in ` +
      "/tmp or /home/pyodide, or raise the limit)";
  }

  /** The reason for the last refusal, once (undefined: none since it was last taken). */
  takeRefusal(): string | undefined {
    const message = this.refusal;
    this.refusal = undefined;
    return message;
  }
}

/** The parts of an Emscripten FS node the budget reads and changes. */
export interface MemNode {
  mode: number;
  mount: { type: unknown };
  mounted?: { root: MemNode } | null;
  contents?: Uint8Array | Record<string, MemNode>;
  usedBytes?: number;
  mtime?: number;
  ctime?: number;
}

/** The parts of Emscripten's MEMFS the budget replaces (Pyodide 314's, checked in memory_budget_test.ts). */
export interface MemFS {
  ops_table: { file: { stream: Record<string, unknown> } } | null;
  stream_ops: Record<string, unknown>;
  createNode: (parent: MemNode | null, name: string, mode: number, dev: number) => MemNode;
  expandFileStorage: (node: MemNode, capacity: number) => void;
  resizeFileStorage: (node: MemNode, size: number) => void;
}

/** The parts of Emscripten's FS the budget needs. */
export interface BudgetFS {
  root: MemNode;
  streams: ({ node: MemNode } | null | undefined)[];
  isDir(mode: number): boolean;
  isFile(mode: number): boolean;
  ErrnoError: new (errno: number) => Error;
  filesystems: { MEMFS: MemFS };
}

type Bytes = Uint8Array | Int8Array;
const resizable = (buffer: ArrayBufferLike): buffer is ArrayBuffer => buffer instanceof ArrayBuffer && buffer.resizable;

/** The bytes MEMFS holds for files: every MEMFS node reachable from the root (through mounts), and open ones. */
export function countMemfs(FS: BudgetFS): number {
  const MEMFS = FS.filesystems.MEMFS;
  const seen = new Set<MemNode>();
  const buffers = new Set<ArrayBufferLike>();
  let bytes = 0;
  const stack: MemNode[] = [FS.root];
  for (const stream of FS.streams) if (stream?.node) stack.push(stream.node);
  while (stack.length) {
    const node = stack.pop()!;
    if (seen.has(node)) continue;
    seen.add(node);
    if (node.mounted?.root) stack.push(node.mounted.root);
    if (node.mount?.type !== MEMFS) continue;
    bytes += NODE_BYTES;
    const contents = node.contents;
    if (FS.isDir(node.mode) && contents && !ArrayBuffer.isView(contents)) {
      for (const name in contents) stack.push((contents as Record<string, MemNode>)[name]);
    } else if (FS.isFile(node.mode) && ArrayBuffer.isView(contents) && !buffers.has(contents.buffer)) {
      buffers.add(contents.buffer);
      bytes += contents.buffer.byteLength;
    }
  }
  return bytes;
}

/**
 * Put MEMFS under `budget`: file storage is taken from it as it grows (and given back as it shrinks), a file of
 * IN_PLACE_BYTES or more grows in place, and each new node is counted. A change that does not fit throws ENOSPC.
 */
export function budgetMemfs(FS: BudgetFS, budget: MemoryBudget, enospc: number): void {
  const MEMFS = FS.filesystems.MEMFS;
  const ours = new WeakSet<ArrayBufferLike>(); // storage made here: what it held is given back when it changes
  const full = () => new FS.ErrnoError(enospc);
  const held = (contents: Uint8Array) => contents.buffer.byteLength;

  /** Storage of `capacity` bytes holding the first `keep` bytes of `old`. */
  function storage(old: Uint8Array, capacity: number, keep: number): Uint8Array {
    if (ours.has(old.buffer) && resizable(old.buffer) && capacity >= IN_PLACE_BYTES) {
      if (capacity <= old.buffer.maxByteLength) {
        old.buffer.resize(capacity); // in place: new bytes are zero
        return old;
      }
    }
    let made: Uint8Array;
    try {
      made = capacity >= IN_PLACE_BYTES
        ? new Uint8Array(new ArrayBuffer(capacity, { maxByteLength: Math.max(budget.limitBytes, capacity) }))
        : new Uint8Array(capacity);
    } catch {
      made = new Uint8Array(capacity); // no address space left for a reservation: a plain buffer
    }
    made.set(old.subarray(0, keep));
    ours.add(made.buffer);
    return made;
  }

  /** Set `node`'s storage to `capacity` bytes, keeping `keep`; counted, or ENOSPC. */
  function setCapacity(node: MemNode, capacity: number, keep: number): void {
    const old = node.contents as Uint8Array;
    const before = ours.has(old.buffer) ? held(old) : 0; // another's buffer: the recount sees when it is freed
    if (!budget.takeForFiles(capacity - before)) throw full();
    try {
      node.contents = storage(old, capacity, keep);
    } catch {
      budget.takeForFiles(before - capacity);
      throw full(); // the process could not allocate it (a RangeError): ENOSPC, not a crash
    }
  }

  /**
   * Make room for `needed` bytes in `node`: with slack as MEMFS's own growth while that fits as counted, else exactly
   * (near the limit the files are then recounted only when even that does not fit, not at every write).
   */
  function expand(node: MemNode, needed: number): void {
    const contents = node.contents as Uint8Array;
    const capacity = contents.length;
    if (capacity >= needed) return;
    const slack = Math.max(needed, (capacity * (capacity < IN_PLACE_BYTES ? 2 : 1.125)) >>> 0, capacity ? 256 : 0);
    const before = ours.has(contents.buffer) ? held(contents) : 0;
    setCapacity(node, budget.fitsNow(slack - before) ? slack : needed, node.usedBytes ?? 0);
  }

  /** truncate/ftruncate (and open's O_TRUNC): the storage is exactly `size` bytes after it, as in MEMFS. */
  function resize(node: MemNode, size: number): void {
    if (node.usedBytes === size) return;
    setCapacity(node, size, Math.min(size, node.usedBytes ?? 0));
    node.usedBytes = size;
  }

  /** MEMFS's write, with its storage from the budget (always copied: MEMFS may own the caller's buffer). */
  function write(
    stream: { node: MemNode },
    buffer: Bytes,
    offset: number,
    length: number,
    position: number,
  ): number {
    if (!length) return 0;
    const node = stream.node;
    node.mtime = node.ctime = Date.now();
    const end = position + length;
    expand(node, end);
    (node.contents as Uint8Array).set(new Uint8Array(buffer.buffer, buffer.byteOffset + offset, length), position);
    if (end > (node.usedBytes ?? 0)) node.usedBytes = end;
    return length;
  }

  const createNode = MEMFS.createNode;
  MEMFS.createNode = (parent, name, mode, dev) => {
    if (!budget.takeForFiles(NODE_BYTES)) throw full();
    return createNode(parent, name, mode, dev);
  };
  MEMFS.expandFileStorage = expand;
  MEMFS.resizeFileStorage = resize;
  MEMFS.stream_ops.write = write;
  if (MEMFS.ops_table) MEMFS.ops_table.file.stream.write = write; // the table existing files' streams use
}

const memoryGrow = WebAssembly.Memory.prototype.grow; // captured before any guest code runs
const call = Function.prototype.call;

/**
 * Let `memory` (the interpreter's) grow only within `budget`: a growth that does not fit throws a RangeError, as
 * the memory's own maximum would, and Emscripten's malloc then returns NULL (Python: MemoryError).
 */
export function budgetWasmGrow(memory: WebAssembly.Memory, budget: MemoryBudget): void {
  Object.defineProperty(memory, "grow", {
    value(pages: number): number {
      const now = memoryBytes(memory);
      if (!budget.mayGrowWasm(now + Number(pages) * 65536)) {
        throw new RangeError(`WebAssembly.Memory.grow(): ${budget.fullMessage()}`);
      }
      return call.call(memoryGrow, memory, pages) as number;
    },
    writable: false,
    configurable: false,
  });
}
