/**
 * The messages of the host: the kernel's init JSON (on Deno's stdin), the JSON of request and host-event frames,
 * and what the supervisor (main.ts) and the Pyodide worker (worker.ts) post to each other. The frames themselves
 * are in protocol.ts (kinds) and framing.ts; the names the kernel shares are protocol.json's, and the checks at the
 * end of this file fail deno check when these types name others.
 */
import type { HostEventName, InitKey, Same, SupervisorOp } from "./protocol.ts";

/** A host folder shown in the sandbox, with the rules the supervisor applies to writes into it (file_service.ts). */
export interface FileMount {
  host: string;
  guest: string;
  writable: boolean;
  suffixes: string[]; // allowed file-name endings for files written there ([]: any)
  maxFileBytes: number | null;
  maxTotalBytes: number | null;
  maxGrowthBytes: number; // net growth of the mount's apparent bytes the sandbox may make
  hostWrites: "data" | "any"; // write_policy.ts hostWritable: the data allowlist, or every name (the user's risk)
  hidden: string[]; // names at its top that Deno may not read (`.ssh`, `.env`, ...): left out of listings too
}

/** The kernel's init message: rendered by LaunchPlan.init_message (kernel/sandbox_kernel/sandbox/launch_plan.py). */
export interface SupervisorInit {
  socket: string;
  token: string;
  partialTag: string; // [0-9a-z]+: this sandbox's files written aside are named with it (the kernel removes them)
  workerNet: string[];
  workerInherits: boolean; // tests of the OS layers only: the worker gets Deno's checks off too
  mounts: FileMount[];
  guestSite: string;
  snapshot: string | null;
  packagesSite: string | null;
  pyodideLock: string | null;
  pyodidePackages: string | null;
  guestDir: string;
  ringBytes: number;
  replyBytes: number;
  maxFrameBytes: number;
  maxEventBytes: number;
  memoryLimitMb: number; // SandboxKernel.memory_limit_mb: wasm memory and the in-memory files (memory_budget.ts); the shell's byte limits are a share of it
}

/** The supervisor's first message to the worker: the shared memory, the progress port and what Pyodide needs. */
export interface WorkerInit extends
  Pick<
    SupervisorInit,
    | "packagesSite"
    | "guestSite"
    | "snapshot"
    | "mounts"
    | "partialTag"
    | "pyodideLock"
    | "pyodidePackages"
    | "guestDir"
    | "maxEventBytes"
    | "memoryLimitMb"
  > {
  type: "init";
  progress: MessagePort; // the glue's port for Progress messages (transferred)
  ring: SharedArrayBuffer; // ring.ts: the worker's output records
  interrupt: SharedArrayBuffer; // Int32 [signal]: Pyodide's interrupt buffer
  reply: SharedArrayBuffer; // Int32 [state, length, reply number], then the reply's bytes
  life: SharedArrayBuffer; // Int32 [1 once the worker unloads]
  files: SharedArrayBuffer; // file_channel.ts: the worker's calls to change read-write mounts
}

/** Supervisor -> worker: the init message, then requests (their JSON) and interrupts. */
export type ToWorker =
  | WorkerInit
  | { type: "request"; id: number; json: string; data: Uint8Array[] } // data: the DATA frames sent before it
  | { type: "interrupt"; id: number };

/**
 * Worker -> supervisor on the worker's own channel. Guest code can post there too: the supervisor reads it
 * as Untrusted<FromWorker>.
 */
export type FromWorker = { type: "fatal"; message: string };

/** Worker glue -> supervisor on the progress port, which only the glue holds. */
export type Progress =
  | { type: "started"; id: number } // the worker began to serve request `id`
  | { type: "replied"; id: number; reply: string; wasmBytes: number } // request `id` is over: its reply (JSON
  // text), and the size of wasm memory then (it only grows: the peak so far)
  | { type: "exited" }; // the worker unloads: its last message, after all others

/** A message's fields as they may arrive from guest code: any of them missing or of any type. */
export type Untrusted<T> = { [K in keyof T]?: unknown };

/** A HOST_EVENT frame's JSON: only the supervisor writes these (sandbox/process.py's _dispatch reads them). */
export type HostEvent =
  | { event: "hello"; token: string } // the first frame: the token of the init message proves who connected
  | { event: "started"; id: number } // the worker began to serve request `id`
  | { event: "memory"; id: number; bytes: number } // wasm memory's size when request `id` ended
  | { event: "fatal"; message: string } // the sandbox ends, and why
  | { event: "partial"; mount: number; path: string[]; made?: MadeName }; // a file written aside is about to be made there

/** The name a file written aside is for, when this sandbox made it new (empty, by mknod): the kernel removes it too
 * if the process ends before the aside file is renamed over it, and it is still that file (dev, ino), empty. */
export type MadeName = { name: string; dev: number; ino: number };

/** A request frame's JSON from the kernel (sandbox/process.py): a SupervisorOp is served by the supervisor, any
 * other op goes to the worker whole (the guest answers one it does not know with an error). */
export type KernelRequest = { op: string; n?: number; content?: unknown; [field: string]: unknown };

/** The supervisor's own requests, by op: exactly protocol.json's supervisorOps (a missing or extra one fails). */
export type SupervisorHandlers = Record<SupervisorOp, (id: number, request: KernelRequest) => void>;

/** These types name exactly protocol.json's names: deno check fails here when one of them names another. */
export const NAMES_AGREE = {
  initKeys: true satisfies Same<keyof SupervisorInit, InitKey>,
  hostEvents: true satisfies Same<HostEvent["event"], HostEventName>,
};
