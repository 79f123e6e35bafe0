/**
 * Builds the memory snapshot of an initialised Pyodide with IPython imported.
 *
 * Run by the kernel (never with guest code): deno run ... snapshot.ts <guest site> <guest code> <output file>.
 * The kernel restores it in each sandbox start instead of initialising Python from scratch.
 */
import { loadPyodide } from "pyodide";
import { zeroFreeHeap } from "./free_heap.ts";
import { mountGuestFolders, PREIMPORT } from "./snapshot_layout.ts";

const [guestSite, guestCode, output] = Deno.args;
// deno-lint-ignore no-explicit-any
const pyodide: any = await loadPyodide({ _makeSnapshot: true, env: { HOME: "/home/pyodide" } } as any);
mountGuestFolders(pyodide, guestSite, guestCode);
const privately = { globals: pyodide.toPy({}) }; // not in __main__: that is the user namespace
pyodide.runPython(PREIMPORT, privately);
// The warm-up's garbage freed, and all free memory zeroed: a restore does not hold memory for it.
pyodide.runPython("import gc; gc.collect()", privately);
const module = pyodide._module;
const zeroed = zeroFreeHeap({
  malloc: (bytes) => module._malloc(bytes),
  free: (pointer) => module._free(pointer),
  sbrk: (increment) => module._sbrk(increment),
  memory: () => new Uint8Array(module.HEAP8.buffer),
});
const snapshot: Uint8Array = pyodide.makeMemorySnapshot();
Deno.writeFileSync(`${output}.part`, snapshot);
Deno.renameSync(`${output}.part`, output);
console.log(`snapshot: ${snapshot.length} bytes (${zeroed} bytes of free memory zeroed)`);
