/**
 * Pyodide takes Deno for Node, and some of its Node paths call what the worker's permissions refuse: `os.getuid()`
 * reads `process.getuid()` (sys access to "uid"), a listening socket makes a `ws` server (env, then net listen).
 * A refusal thrown there passes through WebAssembly, where no Python code can catch it, or in a callback, and ends
 * the worker with the session's state. Here the sandbox answers as Pyodide in a browser does instead, without any
 * new permission: uid 0 (the owner of every file in Emscripten's file system, and the gid it reports), no
 * environment variables, no sockets.
 */

/** Node's `process` as Deno's Node compatibility provides it (the same object Pyodide's Node paths use). */
interface NodeProcess {
  env?: unknown;
  getuid?: () => number;
}

/** The uid Emscripten reports in a browser (and the gid it reports here): the owner of its files. */
export const BROWSER_UID = 0;

/** Node's `process.env` as an empty object: npm modules (ws, just-bash's minimatch and debug) read variables as
 * they load, and the sandbox has no env permission (Deno.env stays refused; the shell has its own environment). */
export function quietProcessEnv(): void {
  const process = (globalThis as { process?: NodeProcess }).process;
  if (process === undefined) return;
  const empty = new Proxy({}, {
    get: () => undefined,
    has: () => false,
    ownKeys: () => [],
    getOwnPropertyDescriptor: () => undefined,
  });
  Object.defineProperty(process, "env", { value: empty, configurable: true, writable: true });
}

/** Before Pyodide loads: what its Node paths read of `process` is answered without a permission. */
export function answerAsBrowser(): void {
  quietProcessEnv();
  const process = (globalThis as { process?: NodeProcess }).process;
  if (process !== undefined) {
    Object.defineProperty(process, "getuid", { value: () => BROWSER_UID, configurable: true, writable: true });
  }
}

/** Emscripten's socket layer, as Pyodide exports it (`Module.SOCKFS`). */
interface SockFS {
  websocket_sock_ops: { createPeer: (...args: unknown[]) => unknown; listen: (...args: unknown[]) => unknown };
}
interface EmModule {
  SOCKFS?: SockFS;
  FS: { ErrnoError: new (errno: number) => Error };
  ERRNO_CODES: Record<string, number>;
}

/**
 * After Pyodide loads: Python's sockets, which Emscripten makes of WebSockets (the `ws` module under Node), fail at
 * once instead: `connect()` and `sendto()` with EHOSTUNREACH (no peer is made; the answer they had while Deno
 * refused `ws` its environment variables), `listen()` with EOPNOTSUPP, as in a browser (a `ws` server would be
 * refused the net permission in a callback, which ends the worker). The network is pyfetch's, within allow_net.
 */
export function refuseSockets(module: EmModule): void {
  const ops = module.SOCKFS?.websocket_sock_ops;
  if (ops === undefined) throw new Error("Pyodide's SOCKFS is missing: cannot refuse sockets");
  const { ErrnoError } = module.FS;
  const { EHOSTUNREACH, EOPNOTSUPP } = module.ERRNO_CODES;
  ops.createPeer = () => {
    throw new ErrnoError(EHOSTUNREACH);
  };
  ops.listen = () => {
    throw new ErrnoError(EOPNOTSUPP);
  };
}
