/**
 * Supervisor isolate of the sandbox host.
 *
 * It holds the private socket to the kernel and runs Pyodide in a Worker whose
 * permissions are a strict subset of its own (read-only access to code and
 * wheels, nothing else). Guest code can reach every JS global of the worker,
 * but not this isolate: whatever the worker writes is framed here as guest data.
 */
import { concat, encodeFrame, FrameError, FrameParser, RecordFramer } from "./framing.ts";
import type {
  FromWorker,
  HostEvent,
  KernelRequest,
  Progress,
  SupervisorInit,
  ToWorker,
  Untrusted,
} from "./messages.ts";
import { DATA, HOST_EVENT, REPLY, REQUEST } from "./protocol.ts";
import { makeRingBuffer, RingError, RingReader, type RingRecord } from "./ring.ts";
import { FileServer, makeFileChannel } from "./file_channel.ts";
import { FileService } from "./file_service.ts";

const init: SupervisorInit = JSON.parse(await new Response(Deno.stdin.readable).text());
const conn = await Deno.connect({ transport: "unix", path: init.socket });
const encoder = new TextEncoder();
const decoder = new TextDecoder();
const EXIT_DEADLINE_MS = 1000; // the most the last frames may take before the process ends: a guest cannot hold it

// ---- outgoing frames (to the kernel) -------------------------------------------------
let outQueue: Uint8Array[] = [];
/** Settles once every frame sent so far is on the socket. */
let written: Promise<void> = Promise.resolve();

function send(kind: number, id: number, payload: Uint8Array): void {
  outQueue.push(encodeFrame(kind, id, payload));
  if (outQueue.length === 1) written = written.then(writeQueued); // frames sent until it runs go with it
}

async function writeQueued(): Promise<void> {
  const all = concat(outQueue);
  outQueue = [];
  let off = 0;
  while (off < all.length) off += await conn.write(all.subarray(off));
}

function sendHostEvent(event: HostEvent): void {
  send(HOST_EVENT, 0, encoder.encode(JSON.stringify(event)));
}

/** `promise` settled, or `ms` passed, whichever comes first. */
function within(promise: Promise<unknown>, ms: number): Promise<void> {
  let timer: ReturnType<typeof setTimeout> | undefined;
  const deadline = new Promise<void>((resolve) => (timer = setTimeout(resolve, ms)));
  return Promise.race([promise.then(() => {}, () => {}), deadline]).finally(() => clearTimeout(timer));
}

let dying = false;

/** Tell the kernel why this sandbox ends (once), then end it when that is written (or at the deadline). */
async function die(code: number, message: string): Promise<void> {
  if (dying) return;
  dying = true;
  sendHostEvent({ event: "fatal", message });
  await within(written, EXIT_DEADLINE_MS);
  Deno.exit(code);
}

// ---- shared memory with the worker ---------------------------------------------------
const ringSab = makeRingBuffer(init.ringBytes);
const ring = new RingReader(ringSab);
const framer = new RecordFramer(init.maxEventBytes);
const interruptSab = new SharedArrayBuffer(4);
const interrupt = new Int32Array(interruptSab);
const replySab = new SharedArrayBuffer(12 + init.replyBytes);
const replyCtrl = new Int32Array(replySab, 0, 3); // state, length, reply number
const replyData = new Uint8Array(replySab, 12);
const lifeSab = new SharedArrayBuffer(4);
const life = new Int32Array(lifeSab);
// The worker writes no host file itself: changes to read-write mounts are its calls here, decided by this isolate.
const filesSab = makeFileChannel();
const files = new FileService(init.mounts);
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

function toWorker(message: ToWorker, transfer: Transferable[] = []): void {
  worker.postMessage(message, transfer);
}

worker.onerror = (e: ErrorEvent) => {
  e.preventDefault();
  pumpOnce(); // what it wrote before it failed still goes out (and output of a request marks it started)
  die(71, `sandbox worker error: ${e.message}`);
};
worker.onmessage = (e: MessageEvent<Untrusted<FromWorker> | null>) => {
  // The worker glue posts only fatal reports; guest code can post too, so anything
  // shaped like one ends this sandbox (the kernel tells the user) and the rest is ignored.
  if (e.data?.type !== "fatal") return;
  const message = e.data.message;
  pumpOnce();
  die(72, typeof message === "string" ? message.slice(0, 2000) : "unknown");
};

toWorker({
  type: "init",
  progress: progress.port2,
  ring: ringSab,
  interrupt: interruptSab,
  reply: replySab,
  life: lifeSab,
  files: filesSab,
  wheels: init.wheels,
  guestSite: init.guestSite,
  snapshot: init.snapshot,
  mounts: init.mounts,
  pyodideLock: init.pyodideLock,
  pyodidePackages: init.pyodidePackages,
  guestDir: init.guestDir,
  maxEventBytes: init.maxEventBytes,
}, [progress.port2]);

let progressEnded: () => void;
const progressOver = new Promise<void>((resolve) => (progressEnded = resolve));

progress.port1.onmessage = (e: MessageEvent<Progress>) => {
  const m = e.data;
  switch (m.type) {
    case "started":
      serving = m.id;
      sendHostEvent({ event: "started", id: m.id });
      if (interruptWhenStarted === m.id) raiseInterrupt(m.id);
      interruptWhenStarted = 0;
      return;
    case "replied": {
      serving = 0;
      lastReplied = Math.max(lastReplied, m.id);
      // A reply may be as large as a frame: the kernel trims it to the cell's output budget.
      const content = m.reply.length * 3 <= init.maxFrameBytes ? m.reply : JSON.stringify({
        status: "error",
        ename: "SandboxError",
        evalue: `the reply was larger than the sandbox may send (SandboxKernel.max_frame_bytes=${init.maxFrameBytes})`,
        traceback: [],
        user_expressions: {},
        payload: [],
      });
      pumpOnce(); // everything the request printed goes out before its reply
      sendHostEvent({ event: "memory", id: m.id, bytes: m.wasmBytes });
      send(REPLY, m.id, encoder.encode(content));
      return;
    }
    case "exited":
      progressEnded();
  }
};

// The worker marks `life` when it unloads (e.g. guest code called Deno.exit).
(async () => {
  const res = Atomics.waitAsync(life, 0, 0);
  if (res.async) await res.value;
  // Its ring records were written before `life`, so the pump below sees them all. Messages on the progress port
  // (a request's start or reply) may still be on their way: they come before its last one, "exited".
  await within(progressOver, EXIT_DEADLINE_MS);
  pumpOnce();
  await die(73, "the sandbox worker exited (guest code ended it)");
})();

// ---- ring -> kernel ------------------------------------------------------------------
function pumpOnce(): void {
  let records: RingRecord[];
  try {
    records = ring.drain();
  } catch (err) {
    if (!(err instanceof RingError)) throw err;
    die(75, `the sandbox worker broke the output ring: ${err.message}`);
    return;
  }
  for (const f of framer.frames(records)) send(f.kind, f.id, f.payload);
}

async function pump(): Promise<void> {
  for (;;) {
    const seq = ring.sequence();
    pumpOnce();
    await ring.waitForData(seq);
  }
}

// ---- kernel -> worker ----------------------------------------------------------------
let serving = 0; // the request the worker has started and not yet replied to
let data: Uint8Array<ArrayBuffer>[] = []; // DATA frames for the next request (the kernel's own bytes, e.g. a checkpoint)
let lastReplied = 0;
let interruptWhenStarted = 0;

function raiseInterrupt(id: number): void {
  Atomics.store(interrupt, 0, 2); // SIGINT
  Atomics.notify(interrupt, 0);
  Atomics.notify(replyCtrl, 0);
  toWorker({ type: "interrupt", id });
}

function handleRequest(id: number, req: KernelRequest): void {
  switch (req.op) {
    case "interrupt":
      // Only the request being served is interrupted; one that has not started yet is, once it starts. A flag
      // raised between requests would land in the glue's own code (or in the next request).
      if (id !== 0 && id === serving) raiseInterrupt(id);
      else if (id !== 0 && id > lastReplied) interruptWhenStarted = id;
      return;
    case "reply": {
      const bytes = encoder.encode(JSON.stringify(req.content ?? null));
      const fits = bytes.length <= replyData.length;
      const body = fits ? bytes : encoder.encode(JSON.stringify({ error: "reply too large" }));
      replyData.set(body);
      Atomics.store(replyCtrl, 1, body.length);
      Atomics.store(replyCtrl, 2, Number(req.n) | 0);
      Atomics.store(replyCtrl, 0, 1);
      Atomics.notify(replyCtrl, 0);
      return;
    }
    default: {
      const sent = data;
      data = [];
      // This realm's JSON is safe; the DATA frames' buffers are moved, not copied.
      toWorker(
        { type: "request", id, json: JSON.stringify(req), data: sent },
        sent.map((d) => d.buffer as ArrayBuffer),
      );
    }
  }
}

async function reader(): Promise<void> {
  const parser = new FrameParser(init.maxFrameBytes);
  const chunk = new Uint8Array(1 << 20); // a checkpoint to restore comes in frames of up to 8 MiB
  for (;;) {
    const n = await conn.read(chunk);
    if (n === null) Deno.exit(0); // the kernel went away: so do we
    try {
      for (const f of parser.push(chunk.subarray(0, n))) {
        if (f.kind === REQUEST) handleRequest(f.id, JSON.parse(decoder.decode(f.payload)));
        else if (f.kind === DATA) data.push(f.payload.slice()); // its own buffer, moved to the worker
      }
    } catch (err) {
      if (err instanceof FrameError) Deno.exit(74);
      throw err;
    }
  }
}

sendHostEvent({ event: "hello", token: init.token });
pump();
await reader();
