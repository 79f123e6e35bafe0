/** What the sandbox's memory snapshot holds, shared by the snapshot builder and the worker. */

/** Where the guest's extracted wheels (IPython, ...) and its own package are mounted inside Pyodide. */
export const GUEST_SITE = "/lib/sandbox-site";
export const GUEST_CODE = "/lib/sandbox-guest";
/** Where SandboxKernel.packages (unpacked once on the host) are mounted, read-only: not in the snapshot, which is the
 * same for every set of packages; on sys.path just after site-packages (what %pip installs comes first). */
export const PACKAGES_SITE = "/lib/sandbox-packages";
/** Standard-library modules that Pyodide leaves out and the sandbox provides (dbm), importable by their names. */
export const GUEST_STDLIB = `${GUEST_CODE}/stdlib`;

/** Modules imported before the snapshot is taken: only third-party code, nothing that holds JS objects. */
export const PREIMPORT = `
import sys
for folder in (${JSON.stringify(GUEST_SITE)}, ${JSON.stringify(GUEST_CODE)}, ${JSON.stringify(GUEST_STDLIB)}):
    if folder not in sys.path:
        sys.path.append(folder)
import asyncio, base64, json, platform, getpass, posix, shlex, traceback, re, io
import IPython
from IPython.core import interactiveshell, completer, oinspect, displayhook, displaypub, magic, error, page
from IPython.core import formatters, display, ultratb, inputtransformer2, payloadpage
from IPython.utils import tokenutil
import IPython.display
import jedi, jedi.api, parso, pygments, pygments.lexers, stack_data, traitlets
import pyodide.code, pyodide.ffi, pyodide.http
import urllib.request, importlib.util, errno, builtins, itertools, dataclasses, codecs
import sandbox_guest.api, sandbox_guest.device, sandbox_guest.guards, sandbox_guest.pkgs, sandbox_guest.checkpoint
sandbox_guest.api.boot()
sandbox_guest.api.warm_up()
`;

/** Mount the guest's folders read-only (again after a restore: the file system is not in the snapshot). */
// deno-lint-ignore no-explicit-any
export function mountGuestFolders(pyodide: any, site: string, code: string): void {
  for (const [guest, host] of [[GUEST_SITE, site], [GUEST_CODE, code]]) {
    pyodide.FS.mkdirTree(guest);
    pyodide.mountNodeFS(guest, host);
  }
}
