/**
 * Compiles the modules of SandboxKernel.packages, unpacked on the host, to bytecode with the guest's own Python, once:
 * sandboxes mount that folder read-only, where Python cannot write its __pycache__, so without this every sandbox
 * would compile every module it imports again.
 *
 * Run by the kernel (never with guest code) before the folder is first used: deno run ... compile_site.ts <folder>,
 * allowed to write only that folder. The folder is mounted where sandboxes mount it, so the bytecode names the paths
 * the guest sees. Compiling runs no code of the packages. Prints one JSON line: {"compiled": true|false}.
 */
import { loadPyodide } from "pyodide";
import { PACKAGES_SITE } from "./snapshot_layout.ts";

const [folder] = Deno.args;
const pyodide = await loadPyodide({ env: { HOME: "/home/pyodide" } });
pyodide.FS.mkdirTree(PACKAGES_SITE);
pyodide.mountNodeFS(PACKAGES_SITE, folder);
// Unchecked hash-based bytecode: the folder never changes once made (the kernel checks it against its manifest), so
// an import need not compare each module with its source.
const compiled = pyodide.runPython(`
import compileall, py_compile
compileall.compile_dir(
    ${JSON.stringify(PACKAGES_SITE)}, quiet=2, workers=1,
    invalidation_mode=py_compile.PycInvalidationMode.UNCHECKED_HASH,
)
`);
console.log(JSON.stringify({ compiled: Boolean(compiled) }));
