/**
 * Builds the memory snapshot of an initialised Pyodide with IPython imported.
 *
 * Run by the kernel (never with guest code): deno run ... snapshot.ts <guest site> <guest code> <output file>.
 * The kernel restores it in each sandbox start instead of initialising Python from scratch.
 */
import { loadPyodide } from "pyodide";
import { mountGuestFolders, PREIMPORT } from "./snapshot_layout.ts";

const [guestSite, guestCode, output] = Deno.args;
// deno-lint-ignore no-explicit-any
const pyodide: any = await loadPyodide({ _makeSnapshot: true, env: { HOME: "/home/pyodide" } } as any);
mountGuestFolders(pyodide, guestSite, guestCode);
pyodide.runPython(PREIMPORT, { globals: pyodide.toPy({}) }); // not in __main__: that is the user namespace
const snapshot: Uint8Array = pyodide.makeMemorySnapshot();
Deno.writeFileSync(`${output}.part`, snapshot);
Deno.renameSync(`${output}.part`, output);
console.log(`snapshot: ${snapshot.length} bytes`);
