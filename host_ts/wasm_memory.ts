/**
 * The Pyodide interpreter's WebAssembly memory, for the worker: grown before Pyodide makes its views of it, and
 * its size read through getters captured when this module loads (before any guest code runs).
 */
/** The interpreter's WebAssembly memory, captured when it is instantiated (before any guest code runs). */
let wasmMemory: WebAssembly.Memory | null = null;
// Read through getters captured now: guest code can reach Pyodide's module (and its HEAP8) and the prototypes.
const memoryBuffer = Function.prototype.call.bind(
  Object.getOwnPropertyDescriptor(WebAssembly.Memory.prototype, "buffer")!.get!,
) as (memory: WebAssembly.Memory) => ArrayBuffer;
const bufferBytes = Function.prototype.call.bind(
  Object.getOwnPropertyDescriptor(ArrayBuffer.prototype, "byteLength")!.get!,
) as (buffer: ArrayBuffer) => number;

/** Keep the first memory a WebAssembly instance exports (Pyodide's interpreter is the first instantiated). */
function captureMemory(instance: WebAssembly.Instance): void {
  const memory = instance.exports?.memory;
  if (wasmMemory === null && memory instanceof WebAssembly.Memory) wasmMemory = memory;
}

/**
 * Run `load` with WebAssembly memory grown to `bytes` before Pyodide makes its views of it. The module's bytes
 * (~10 MB), which V8 has copied by then and Pyodide's loader keeps for good, are released once instantiated.
 */
export async function withMemoryAtLeast<T>(bytes: number, load: () => Promise<T>): Promise<T> {
  const wasm = WebAssembly as unknown as Record<string, (...args: unknown[]) => Promise<unknown>>;
  const originals = { instantiate: wasm.instantiate, instantiateStreaming: wasm.instantiateStreaming };
  for (const name of ["instantiate", "instantiateStreaming"] as const) {
    const original = originals[name];
    wasm[name] = async (...args: unknown[]) => {
      const result = (await original.apply(WebAssembly, args)) as { instance?: WebAssembly.Instance };
      const source = args[0];
      if (source instanceof Uint8Array && source.byteLength === source.buffer.byteLength) {
        (source.buffer as ArrayBuffer).transfer(0);
      }
      const instance = (result.instance ?? result) as WebAssembly.Instance;
      captureMemory(instance);
      const memory = instance.exports?.memory as WebAssembly.Memory | undefined;
      if (memory && memory.buffer.byteLength < bytes) {
        memory.grow(Math.ceil((bytes - memory.buffer.byteLength) / 65536));
      }
      return result;
    };
  }
  try {
    return await load();
  } finally {
    Object.assign(wasm, originals);
  }
}

/** The interpreter's memory (null before it is instantiated). */
export const interpreterMemory = (): WebAssembly.Memory | null => wasmMemory;
/** The size of `memory` now, read through the getters captured before any guest code ran. */
export const memoryBytes = (memory: WebAssembly.Memory): number => bufferBytes(memoryBuffer(memory));
/** The size of the interpreter's memory now (0 before it is instantiated). */
export const wasmBytes = (): number => (wasmMemory ? memoryBytes(wasmMemory) : 0);
