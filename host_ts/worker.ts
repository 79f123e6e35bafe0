/// <reference no-default-lib="true" />
/// <reference lib="deno.worker" />
/**
 * Pyodide worker of the sandbox host. Guest code runs here.
 *
 * Everything the guest produces goes through the shared ring as records tagged
 * with the id of the request being served; the supervisor frames them for the
 * kernel. References the glue needs are captured before any guest code runs.
 */
import { loadPyodide } from "pyodide";
import { RingWriter } from "./ring.ts";
import { AnswerReader } from "./reply_slot.ts";
import {
  exchange as atomicsExchange,
  load as atomicsLoad,
  notify as atomicsNotify,
  store as atomicsStore,
  wait as atomicsWait,
} from "./shared_views.ts";
import { BLOB, GUEST_EVENT, type GuestEventType, STDERR, STDOUT, type WorkerEventType } from "./protocol.ts";
import { mountGuestFolders, PACKAGES_SITE, PREIMPORT } from "./snapshot_layout.ts";
import { restoringSparsely } from "./sparse_restore.ts";
import { FileClient } from "./file_channel.ts";
import { noticeCap } from "./notice_cap.ts";
import { type EmFS, type EmNode, type MountOpts, OVERLAY_ROOT, writableFS } from "./rwfs.ts";
import type { FromWorker, Progress, ToWorker, WorkerInit } from "./messages.ts";
import { interpreterMemory, wasmBytes, withMemoryAtLeast } from "./wasm_memory.ts";
import { type BudgetFS, budgetMemfs, budgetWasmGrow, countMemfs, MemoryBudget } from "./memory_budget.ts";
import { type PythonCommand, Shell, type ShellRequest } from "./shell.ts";
import { shellBytes } from "./shell_limits.ts";
import { COMMAND_PATH, type CommandFilesFS, installCommandFiles } from "./shell_commands.ts";
import { answerAsBrowser, refuseSockets } from "./node_paths.ts";

const post: (message: FromWorker) => void = self.postMessage.bind(self);
const realSetTimeout = setTimeout;
const realSetInterval = setInterval;
const stringify = JSON.stringify; // captured before guest code can replace it
const utf8 = new TextEncoder();
/** Whether `e` is Python's KeyboardInterrupt as Pyodide hands it to JS (a PythonError). */
const isInterrupt = (e: unknown) => (e as { type?: unknown } | null)?.type === "KeyboardInterrupt";
/** The glue's reply is a plain str, whose conversion to JS fails only when an interrupt lands inside it (seen ~1 in
 * 800 interrupts racing a cell's start under load: Pyodide reports a ConversionError with no message). */
const isLostReply = (e: unknown) => (e as { type?: unknown } | null)?.type === "ConversionError";
const now = performance.now.bind(performance);
const READY: WorkerEventType = "ready"; // the worker's one event: Python is up
const IOPUB: GuestEventType = "iopub"; // an interrupt's error, when it landed in the glue (written here, for the glue)

// Messages that arrive before the interpreter is ready wait here. The listener is
// installed before the first await, as Deno requires for worker messages.
const early: ToWorker[] = [];
/** The shell, once loaded, and how many of its runs are under way (an interrupt is then theirs to take). */
const shellState: { shell?: Promise<Shell>; running: number } = { running: 0 };
let deliver: ((m: ToWorker) => void) | null = null;
self.addEventListener("message", (e: MessageEvent<ToWorker>) => {
  if (!e.isTrusted) return; // dispatched by guest code, not posted by the supervisor
  if (deliver) deliver(e.data);
  else early.push(e.data);
});

function fatal(message: string): void {
  post({ type: "fatal", message });
}

/** The glue's links to the supervisor, made from the init message before Pyodide loads (before any guest code). */
interface Links {
  init: WorkerInit;
  ring: RingWriter;
  interrupt: Int32Array;
  answers: AnswerReader;
  report: (message: Progress) => void; // the glue's progress port (guest code has no reference to it)
}

/** Which request output belongs to. */
interface Attribution {
  currentId: number; // the request being served; 0 while idle (then output has no cell to go to and is dropped)
  // The request that scheduled the JS timer callback now running (0: none). Its output goes to that request, which
  // the kernel drops once the request is over: a leftover timer never prints into a later cell.
  timerOrigin: number;
  cellEnded?: () => void; // what is said at the end of each request (the count of notices left out)
}

/** The glue's calls into the guest's Python (sandbox_guest.api), looked up once it is attached. */
interface Guest {
  handle: (json: string, id: number, data: Uint8Array[]) => unknown;
  interruptAsync: () => unknown;
}

/** Why the supervisor refused the last change to a read-write mount: noted by the driver, taken by the guest. */
interface Refusals {
  note(message: string): void;
  take(): string | undefined; // once; undefined: none since
}

type Pyodide = Awaited<ReturnType<typeof loadPyodide>>;

/** Start the sandbox's Python and serve the kernel's requests: each stage below in turn, in this order. */
async function start(init: WorkerInit): Promise<void> {
  const links = linkToSupervisor(init);
  guardWorker();
  answerAsBrowser();
  const requests: Attribution = { currentId: 0, timerOrigin: 0 };
  attributeTimers(requests);
  const { pyodide, restored } = await loadInterpreter(init);
  const budget = budgetMemory(pyodide, init);
  refuseSockets((pyodide as unknown as { _module: Parameters<typeof refuseSockets>[0] })._module);
  setUpOutput(pyodide, links, requests);
  mountGuestCode(pyodide, init);
  installCommandFiles(pyodide.FS as unknown as CommandFilesFS);
  const notices = noticeCap((text) => links.ring.writeText(STDERR, requests.currentId, text), () => requests.currentId);
  requests.cellEnded = notices.end;
  const refusals = mountHostFolders(pyodide, init, notices.say);
  registerHostModule(pyodide, links, requests, refusals, budget);
  const guest = attachGuest(pyodide, restored, init.packagesSite ? PACKAGES_SITE : null, links.ring);
  serveRequests(pyodide, guest, links, requests, budget);
}

/**
 * The shared memory's views and the progress port's postMessage, captured before any guest code runs; and the
 * worker's last report when it unloads (the supervisor waits for it, then sees `life` marked).
 */
function linkToSupervisor(init: WorkerInit): Links {
  const ring = new RingWriter(init.ring);
  const interrupt = new Int32Array(init.interrupt);
  const answers = new AnswerReader(init.reply);
  const life = new Int32Array(init.life);
  // captured before any guest code runs
  const report: (message: Progress) => void = init.progress.postMessage.bind(init.progress);
  addEventListener("unload", () => {
    report({ type: "exited" }); // after every other report: the supervisor waits for it before it ends
    atomicsStore(life, 0, 1);
    atomicsNotify(life, 0);
  });
  return { init, ring, interrupt, answers, report };
}

/** Keep the worker alive and Deno's own folders untouched, whatever guest code does later. */
function guardWorker(): void {
  // An interrupt that lands in Python code run from a JS callback (asyncio's loop runs on JS timers and
  // promises) surfaces there as a PythonError: it was meant for the cell, not for the worker, which an
  // uncaught error would end. The kernel sends the interrupt again if the cell runs on.
  addEventListener("unhandledrejection", (e: PromiseRejectionEvent) => isInterrupt(e.reason) && e.preventDefault());
  addEventListener("error", (e: ErrorEvent) => isInterrupt(e.error) && e.preventDefault());
  // The Web Cache API writes to Deno's own folder without any permission: no guest may use it.
  delete (globalThis as { caches?: unknown }).caches;
  Object.defineProperty(globalThis, "caches", { value: undefined, writable: false, configurable: false });
  // A guest that closes its own worker would leave requests unanswered forever.
  Object.defineProperty(self, "close", { value: () => {}, writable: false, configurable: false });
}

/** JS timers remember the request that set them, so that their callbacks' output goes to it. */
function attributeTimers(requests: Attribution): void {
  type Callback = (...args: unknown[]) => void;
  const withOrigin = (callback: Callback, origin: number): Callback =>
    typeof callback !== "function" ? callback : (...args: unknown[]) => {
      const outer = requests.timerOrigin;
      requests.timerOrigin = origin;
      try {
        callback(...args);
      } finally {
        requests.timerOrigin = outer;
      }
    };
  const timers = globalThis as unknown as Record<string, unknown>;
  timers.setTimeout = (callback: Callback, ms?: number, ...args: unknown[]) =>
    realSetTimeout(withOrigin(callback, requests.timerOrigin || requests.currentId), ms, ...args);
  timers.setInterval = (callback: Callback, ms?: number, ...args: unknown[]) =>
    realSetInterval(withOrigin(callback, requests.timerOrigin || requests.currentId), ms, ...args);
}

/** Load Pyodide: from the memory snapshot when there is one (and it restores), else from scratch. */
async function loadInterpreter(init: WorkerInit): Promise<{ pyodide: Pyodide; restored: boolean }> {
  // Pyodide's own packages load from a folder the host fills (the guest has no network for them).
  const packages = init.pyodidePackages
    ? {
      lockFileContents: init.pyodideLock ?? undefined,
      packageBaseUrl: init.pyodidePackages,
      packageCacheDir: init.pyodidePackages,
    }
    : {};
  const options = { env: { HOME: "/home/pyodide" }, ...packages };
  if (!init.snapshot) return { pyodide: await withMemoryAtLeast(0, () => loadPyodide(options)), restored: false };
  try {
    // Read while Pyodide loads its code (it awaits the bytes only before it instantiates).
    const reading = Deno.readFile(init.snapshot);
    reading.catch(() => {}); // a failed read is seen where Pyodide awaits it (and falls back below)
    const size = (await Deno.stat(init.snapshot)).size;
    const pyodide = await withMemoryAtLeast(
      size,
      // _loadSnapshot: Pyodide's (underscored) option for restoring a memory snapshot; not in its types.
      () => restoringSparsely(() => loadPyodide({ ...options, _loadSnapshot: reading } as unknown as typeof options)),
    );
    // The snapshot was copied into wasm memory; Pyodide's config keeps a reference to it for good.
    // Detaching its buffer frees those bytes (as large as the snapshot) now, without waiting for a GC.
    (await reading).buffer.transfer(0);
    return { pyodide, restored: true };
  } catch (err) {
    // A stale or broken snapshot: start from scratch; the kernel rebuilds it.
    console.error(`sandbox: snapshot not used: ${String(err).slice(0, 300)}`);
    return { pyodide: await withMemoryAtLeast(0, () => loadPyodide(options)), restored: false };
  }
}

/**
 * SandboxKernel.memory_limit_mb for wasm memory and the in-memory files together (memory_budget.ts), from before
 * any guest code runs.
 */
function budgetMemory(pyodide: Pyodide, init: WorkerInit): MemoryBudget | null {
  const memory = interpreterMemory();
  if (!(init.memoryLimitMb > 0) || !memory) return null;
  const FS = pyodide.FS as unknown as BudgetFS;
  const budget = new MemoryBudget(init.memoryLimitMb * 2 ** 20, wasmBytes, () => countMemfs(FS));
  budgetMemfs(FS, budget, (pyodide.ERRNO_CODES as Record<string, number>).ENOSPC);
  budgetWasmGrow(memory, budget);
  return budget;
}

/** Interrupts through the shared interrupt buffer; Python's stdout and stderr into the ring, for the request. */
function setUpOutput(pyodide: Pyodide, links: Links, requests: Attribution): void {
  const ring = links.ring;
  pyodide.setInterruptBuffer(links.interrupt);
  pyodide.setStdout({ write: (buf: Uint8Array) => (ring.writeBytes(STDOUT, requests.currentId, buf), buf.length) });
  pyodide.setStderr({ write: (buf: Uint8Array) => (ring.writeBytes(STDERR, requests.currentId, buf), buf.length) });
}

/** IPython and friends, and SandboxKernel.packages: each extracted once on the host, mounted read-only (nothing is
 * unpacked per start; compiled modules load from there too). */
function mountGuestCode(pyodide: Pyodide, init: WorkerInit): void {
  mountGuestFolders(pyodide, init.guestSite, init.guestDir);
  if (!init.packagesSite) return;
  pyodide.FS.mkdirTree(PACKAGES_SITE);
  pyodide.mountNodeFS(PACKAGES_SITE, init.packagesSite); // on sys.path once the glue attaches (attachGuest)
}

/** Glue code runs in a private namespace: __main__ is the user's namespace. */
const privately = (pyodide: Pyodide) => ({ globals: pyodide.toPy({}) });

/**
 * Host folders: Deno's permissions decide what may be read. A refused access must reach Python as EACCES
 * (PermissionError), not as a fatal JS error. Every mount is read here through the overlay driver (rwfs.ts): plain
 * data files of a read-write mount are changed by the supervisor (it checks the same allowlist), everything else
 * (and every write to a read-only mount) stays in the sandbox-side layer, and the user is told once per file
 * (`notice`: a line on the cell's stderr). The supervisor's refusals' reasons are kept for the guest's errors.
 */
function mountHostFolders(pyodide: Pyodide, init: WorkerInit, notice: (text: string) => void): Refusals {
  (Deno.errors.NotCapable.prototype as unknown as { code: string }).code = "EACCES";
  (Deno.errors.PermissionDenied.prototype as unknown as { code: string }).code = "EACCES";
  let refusal: string | null = null; // why the supervisor refused the last change (for the guest's error)
  const refusals: Refusals = {
    note: (message) => (refusal = message),
    take() {
      const message = refusal ?? undefined;
      refusal = null;
      return message;
    },
  };
  const files = new FileClient(init.files);
  const overlay = writableFS(pyodide.FS as unknown as EmFS, files, {
    refused: refusals.note,
    notice: (text) => notice(`${text}\n`),
  });
  // What Deno may not read at a mount's top (`.ssh`, `.env`, ...) is left out of listings, not only unreadable.
  const hidden = new Set(init.mounts.flatMap((m) => m.hidden.map((name) => `${m.host}/${name}`)));
  const nodefs = (pyodide.FS as unknown as EmFS).filesystems.NODEFS;
  const readdir = nodefs.node_ops.readdir;
  nodefs.node_ops.readdir = (node: EmNode) => {
    const names = readdir(node) as string[];
    const folder = nodefs.realPath(node);
    return hidden.size ? names.filter((name) => !hidden.has(`${folder}/${name}`)) : names;
  };
  pyodide.FS.mkdirTree(OVERLAY_ROOT); // before the glue lists the sandbox's own top folders
  for (const [index, mount] of init.mounts.entries()) {
    pyodide.FS.mkdirTree(mount.guest);
    const { host: root, guest, writable, hostWrites, suffixes, maxGrowthBytes } = mount;
    const opts: MountOpts = {
      root,
      index,
      guest,
      writable,
      hostWrites,
      suffixes,
      maxGrowthBytes,
      partialTag: init.partialTag,
    };
    pyodide.FS.mount(overlay, opts, guest);
  }
  applyUmask(pyodide.FS);
  return refusals;
}

/** The JS functions the guest's glue calls (`_sandbox_host`): output, events, blobs, blocking waits, refusals. */
function registerHostModule(
  pyodide: Pyodide,
  links: Links,
  requests: Attribution,
  refusals: Refusals,
  budget: MemoryBudget | null,
): void {
  const { init, ring, interrupt, answers } = links;
  /** Take the interrupt word (true if an interrupt was raised): a wait it cuts short answers for it. */
  const takeInterrupt = () => atomicsExchange(interrupt, 0, 0) !== 0;
  // Output goes to the request it was made for (the guest tracks that per asyncio task), but
  // never to a later request than the one being served: the kernel drops finished ones.
  const tag = (rid: unknown) =>
    typeof rid === "number" && rid > 0 && rid <= requests.currentId ? rid : requests.timerOrigin || requests.currentId;
  const host = {
    write(kind: number, text: string, rid?: number): void {
      ring.writeText(kind === STDERR ? STDERR : STDOUT, tag(rid), text);
    },
    emit(json: string, rid?: number): boolean {
      // The limit is in UTF-8 bytes, as the supervisor counts them (it drops a larger record). The glue's JSON
      // is ASCII; guest code calling emit directly may pass any text.
      if (json.length > init.maxEventBytes) return false;
      if (json.length * 3 > init.maxEventBytes && utf8.encode(json).length > init.maxEventBytes) return false;
      ring.writeText(GUEST_EVENT, tag(rid), json);
      return true;
    },
    /** Send bytes (a Python buffer: bytes, memoryview) for the request `rid`, unparsed; false when too large. */
    send_blob(buffer: { getBuffer(type: string): { data: Uint8Array; release(): void } }, rid?: number): boolean {
      const view = buffer.getBuffer("u8");
      try {
        if (view.data.byteLength > init.maxEventBytes) return false;
        ring.writeBytes(BLOB, tag(rid), view.data);
        return true;
      } finally {
        view.release();
      }
    },
    /** Block until the kernel answers request `n`; undefined (Python None) when interrupted. */
    wait_reply(n: number): string | undefined {
      return answers.take(n, takeInterrupt);
    },
    /**
     * Run a shell script (just-bash, imported on first use) for the glue's `!cmd`, `%%bash` and subprocess; the
     * glue waits with run_sync. `python` runs `python3 ...` in this sandbox. Resolves to the result's JSON.
     */
    async shell(
      request: string,
      python: PythonCommand,
      writeRefusal: { callPromising(path: string): Promise<string> },
    ): Promise<string> {
      shellState.shell ??= Shell.load({
        fs: pyodide.FS,
        errnoCodes: pyodide.ERRNO_CODES,
        refusal: () => refusals.take(),
        writeRefusal: async (path) => String(await writeRefusal.callPromising(path)),
        interrupt,
        out: (stream, text) => ring.writeText(stream === "stderr" ? STDERR : STDOUT, tag(undefined), text),
        memoryLimitMb: init.memoryLimitMb,
        disks: () => [
          { source: "sandbox", mountedOn: "/", sizeBytes: budget?.limitBytes, usedBytes: budget?.usedNow() },
          ...init.mounts.map((m) => ({ source: "host", mountedOn: m.guest })),
        ],
      }, python);
      shellState.running++;
      try {
        return stringify(await (await shellState.shell).run(JSON.parse(request) as ShellRequest));
      } finally {
        shellState.running--;
      }
    },
    /** The most bytes a shell run takes (its script, environment and stdin) or holds at once (shell_limits.ts). */
    shell_limit_bytes: shellBytes(init.memoryLimitMb),
    /** Why the supervisor refused the last change to a read-write mount (once; undefined: none since). */
    take_refusal(): string | undefined {
      return refusals.take();
    },
    /** How many bytes the host file open as `fd` may still grow by before a mount limit refuses a write, as of
     * its last write that reached the host (undefined: not a file of a host folder open for writing). */
    file_room(fd: number): number | undefined {
      const stream = (pyodide.FS as unknown as { getStream(fd: number): { room?: unknown } | null }).getStream(fd);
      return typeof stream?.room === "number" ? stream.room : undefined;
    },
    /** Why the memory budget last refused a change to the in-memory files (once; undefined: none since). */
    files_full(): string | undefined {
      return budget?.takeRefusal();
    },
    /** The MiB the in-memory files hold now, counted exactly (0: no budget), for the guest's MemoryError. */
    files_mib(): number {
      return budget ? Math.round(budget.filesNow() / 2 ** 20) : 0;
    },
    /** Sleep without spinning; true when an interrupt cut it short. */
    sleep(ms: number): boolean {
      const end = now() + ms;
      for (;;) {
        if (takeInterrupt()) return true;
        const left = end - now();
        if (left <= 0) return false;
        atomicsWait(interrupt, 0, 0, Math.min(left, 1000));
      }
    },
  };
  pyodide.registerJsModule("_sandbox_host", host);
}

/** Import the guest's glue (unless the snapshot holds it), attach it to this worker (with the folder of
 * SandboxKernel.packages to put on sys.path, if any), and tell the kernel it is up. */
function attachGuest(pyodide: Pyodide, restored: boolean, packagesSite: string | null, ring: RingWriter): Guest {
  if (!restored) pyodide.runPython(PREIMPORT, privately(pyodide));
  // (A snapshot holds the environment it was made with: the shell's $PATH is set at every start.)
  pyodide.runPython(`import os\nos.environ["PATH"] = ${JSON.stringify(COMMAND_PATH)}`, privately(pyodide));
  const guest = pyodide.pyimport("sandbox_guest.api");
  const glue: Guest = { handle: guest.handle, interruptAsync: guest.interrupt_async };
  const info = JSON.parse(guest.attach(restored, packagesSite) as string);
  ring.writeText(GUEST_EVENT, 0, JSON.stringify({ type: READY, snapshot: restored, ...info }));
  return glue;
}

/** Serve the kernel's requests one after another (guest code runs from here on), and interrupt them. */
function serveRequests(
  pyodide: Pyodide,
  guest: Guest,
  links: Links,
  requests: Attribution,
  budget: MemoryBudget | null,
): void {
  const { ring, interrupt, report } = links;
  const { handle, interruptAsync } = guest; // called as plain functions, as Pyodide hands them over
  let chain: Promise<void> = Promise.resolve();
  let busy = false;
  const serve = async (id: number, json: string, data: Uint8Array[]) => {
    atomicsStore(interrupt, 0, 0); // before "started": the supervisor raises a request's interrupt only after it
    report({ type: "started", id }); // from here on, what happens to the sandbox happened under this request
    requests.currentId = id;
    budget?.takeRefusal(); // a refusal of an earlier request's is not this one's
    busy = true;
    let reply: string;
    try {
      reply = (await handle(json, id, data)) as string; // JSON made by the supervisor, outside the guest's reach
    } catch (err) {
      const text = String(err);
      if (
        text.includes("fatal error") ||
        (pyodide as unknown as { _api?: { fatal_error_occurred?: boolean } })._api?.fatal_error_occurred
      ) {
        fatal(`Pyodide suffered a fatal error: ${text.slice(0, 500)}`);
        return;
      }
      if (isInterrupt(err) || isLostReply(err)) {
        // The interrupt landed in the glue between the cell and its reply: the cell was interrupted.
        const error =
          '"ename": "KeyboardInterrupt", "evalue": "Interrupted by user", "traceback": ["KeyboardInterrupt"]';
        ring.writeText(GUEST_EVENT, id, `{"type": "${IOPUB}", "msg_type": "error", "content": {${error}}}`);
        reply = `{"status": "error", ${error}, "user_expressions": {}, "payload": []}`;
      } else {
        const type = (err as { type?: unknown } | null)?.type;
        const named = typeof type === "string" && !text.includes(type) ? `${text} (${type.slice(0, 100)})` : text;
        const evalue = stringify(named.slice(0, 2000)); // a string: no toJSON hook applies
        reply = `{"status": "error", "ename": "SandboxError", "evalue": ${evalue}, "traceback": [], ` +
          `"user_expressions": {}, "payload": []}`;
      }
    }
    busy = false;
    requests.cellEnded?.();
    requests.currentId = 0;
    // The request is over when the run has resolved here, never when guest code says so.
    report({ type: "replied", id, reply: typeof reply === "string" ? reply : "", wasmBytes: wasmBytes() });
  };
  deliver = (m: ToWorker) => {
    if (m.type === "request") chain = chain.then(() => serve(m.id, m.json, m.data));
    else if (
      m.type === "interrupt" && busy && m.id === requests.currentId && !shellState.running &&
      atomicsLoad(interrupt, 0) !== 0
    ) {
      // Python is not running (this handler could not run otherwise): the cell awaits. (Under a shell run, which
      // Python awaits with run_sync, the shell takes the interrupt word itself.) A word already taken (by Python,
      // the shell or a wait, before this message came) was this interrupt: a second KeyboardInterrupt would land
      // in the cell's wrap-up.
      atomicsStore(interrupt, 0, 0);
      try {
        interruptAsync();
      } catch (_) {
        // The interpreter is busy or broken: the interrupt buffer handles the first case.
      }
    }
  };
  for (const m of early.splice(0)) deliver(m);
}

// The first message is always the init message.
const first = await new Promise<ToWorker>((resolve) => {
  deliver = resolve;
  const queued = early.shift();
  if (queued) {
    deliver = null;
    resolve(queued);
  }
});
deliver = null;
if (first.type !== "init") {
  fatal("the sandbox worker expected an init message first");
} else {
  start(first).catch((err) => fatal(`sandbox start failed: ${String(err?.stack ?? err).slice(0, 2000)}`));
}

/** Files and folders the guest creates get the usual umask (022), as under a normal Python: Emscripten
 * has no umask and sets open()'s 0666 on a new file explicitly, which Deno applies to host files verbatim. */
type Create = (path: string, flagsOrMode?: unknown, mode?: number) => unknown;
function applyUmask(fs: { open: Create; mkdir: Create }): void {
  const [open, mkdir] = [fs.open, fs.mkdir];
  fs.open = (path, flags, mode = 0o666) => open(path, flags, mode & ~0o022);
  fs.mkdir = (path, mode = 0o777) => mkdir(path, (mode as number) & ~0o022);
}
