/**
 * Supervisor isolate of the sandbox host: the process's entry point.
 *
 * It holds the private socket to the kernel and runs Pyodide in a Worker whose
 * permissions are a strict subset of its own (read-only access to code and
 * unpacked packages, nothing else). Guest code can reach every JS global of the worker,
 * but not this isolate: whatever the worker writes is framed here as guest data.
 * What it does is in supervisor.ts; this file connects it to the kernel, the worker and the process.
 */
import type { FromWorker, Progress, SupervisorInit, ToWorker, Untrusted } from "./messages.ts";
import { FileServer, makeFileChannel } from "./file_channel.ts";
import { FileService } from "./file_service.ts";
import { Supervisor } from "./supervisor.ts";

const init: SupervisorInit = JSON.parse(await new Response(Deno.stdin.readable).text());
const conn = await Deno.connect({ transport: "unix", path: init.socket });

const supervisor = new Supervisor(init, {
  write: (bytes) => conn.write(bytes),
  toWorker: (message, transfer = []) => worker.postMessage(message, transfer),
  exit: (code) => Deno.exit(code),
});
// The worker writes no host file itself: changes to read-write mounts are its calls here, decided by this isolate.
const filesSab = makeFileChannel();
// Each file written aside is told to the kernel before it is made: the kernel removes what a killed process leaves.
const files = new FileService(
  init.mounts,
  init.partialTag,
  (mount, path, made) => supervisor.partial(mount, path, made),
);
new FileServer(filesSab).serve((request) => files.handle(request));
// The worker's glue reports the start and the end of each request on this port, and its own unloading (Progress).
// Guest code has no reference to it (it lives only in the glue's closure): only the trusted side says when a
// request is over.
const progress = new MessageChannel();

const worker = new Worker(new URL("./worker.ts", import.meta.url).href, {
  type: "module",
  name: "pyodide",
  deno: {
    permissions: init.workerInherits ? "inherit" : {
      // Deno's own --allow-read (its --deny-read included: hidden folders of mounts), which is the worker's list
      // plus the socket's path (not readable as a file). An explicit list could not leave out what Deno denies.
      read: "inherit",
      write: false, // read-write mounts are changed by this isolate's file service, on the worker's behalf
      net: init.workerNet.length ? init.workerNet : false,
      env: false,
      run: false,
      ffi: false,
      sys: false,
      import: false,
    },
  },
});

worker.onerror = (e: ErrorEvent) => {
  e.preventDefault();
  supervisor.workerFailed(e.message);
};
worker.onmessage = (e: MessageEvent<Untrusted<FromWorker> | null>) => supervisor.workerPosted(e.data);

const workerInit: ToWorker = {
  type: "init",
  progress: progress.port2,
  ...supervisor.memory,
  files: filesSab,
  packagesSite: init.packagesSite,
  guestSite: init.guestSite,
  snapshot: init.snapshot,
  mounts: init.mounts,
  partialTag: init.partialTag,
  pyodideLock: init.pyodideLock,
  pyodidePackages: init.pyodidePackages,
  guestDir: init.guestDir,
  maxEventBytes: init.maxEventBytes,
  memoryLimitMb: init.memoryLimitMb,
};
worker.postMessage(workerInit, [progress.port2]);
progress.port1.onmessage = (e: MessageEvent<Progress>) => supervisor.progress(e.data);
supervisor.watchLife();

supervisor.hello(init.token);
supervisor.pump();
await supervisor.read(conn);
