/**
 * Supervisor isolate of the sandbox host.
 *
 * It holds the private socket to the kernel and runs Pyodide in a Worker whose
 * permissions are a strict subset of its own (read-only access to code and
 * wheels, nothing else). Guest code can reach every JS global of the worker,
 * but not this isolate: whatever the worker writes is framed here as guest data.
 */
import { makeRingBuffer, MORE, RingReader } from "./ring.ts";
import { FRAME_HEADER, GUEST_EVENT, HOST_EVENT, REPLY, REQUEST, STDERR, STDOUT } from "./protocol.ts";

type InitConfig = {
  socket: string;
  token: string;
  workerRead: string[];
  workerWrite: string[];
  workerNet: string[];
  workerInherits: boolean; // tests of the OS layers only: the worker gets Deno's checks off too
  mounts: { host: string; guest: string }[];
  pyodideLock: string | null;
  pyodidePackages: string | null;
  wheels: string[];
  guestSite: string;
  snapshot: string | null;
  guestDir: string;
  ringBytes: number;
  replyBytes: number;
  maxFrameBytes: number;
  maxEventBytes: number;
};

const init: InitConfig = JSON.parse(await new Response(Deno.stdin.readable).text());
const conn = await Deno.connect({ transport: "unix", path: init.socket });
const encoder = new TextEncoder();
const decoder = new TextDecoder();

// ---- outgoing frames (to the kernel) -------------------------------------------------
let outQueue: Uint8Array[] = [];
let outWake: (() => void) | null = null;

function frame(kind: number, id: number, payload: Uint8Array): Uint8Array {
  const buf = new Uint8Array(FRAME_HEADER + payload.length);
  const view = new DataView(buf.buffer);
  view.setUint32(0, 5 + payload.length);
  view.setUint8(4, kind);
  view.setUint32(5, id >>> 0);
  buf.set(payload, FRAME_HEADER);
  return buf;
}

function send(kind: number, id: number, payload: Uint8Array): void {
  outQueue.push(frame(kind, id, payload));
  if (outWake) {
    outWake();
    outWake = null;
  }
}

/** The parts, one after another, in one buffer. */
function concat(parts: Uint8Array[]): Uint8Array {
  const all = new Uint8Array(parts.reduce((n, p) => n + p.length, 0));
  let off = 0;
  for (const p of parts) {
    all.set(p, off);
    off += p.length;
  }
  return all;
}

function sendHostEvent(event: Record<string, unknown>): void {
  send(HOST_EVENT, 0, encoder.encode(JSON.stringify(event)));
}

async function writer(): Promise<void> {
  for (;;) {
    while (outQueue.length === 0) await new Promise<void>((r) => (outWake = r));
    const all = concat(outQueue);
    outQueue = [];
    let off = 0;
    while (off < all.length) off += await conn.write(all.subarray(off));
  }
}

async function flushAndExit(code: number): Promise<never> {
  const deadline = Date.now() + 1000;
  while (outQueue.length > 0 && Date.now() < deadline) await new Promise((r) => setTimeout(r, 5));
  Deno.exit(code);
}

// ---- shared memory with the worker ---------------------------------------------------
const ringSab = makeRingBuffer(init.ringBytes);
const ring = new RingReader(ringSab);
const interruptSab = new SharedArrayBuffer(4);
const interrupt = new Int32Array(interruptSab);
const replySab = new SharedArrayBuffer(12 + init.replyBytes);
const replyCtrl = new Int32Array(replySab, 0, 3); // state, length, reply number
const replyData = new Uint8Array(replySab, 12);
const lifeSab = new SharedArrayBuffer(4);
const life = new Int32Array(lifeSab);
// The worker's glue reports the start and the end of each request on this port. Guest code has no
// reference to it (it lives only in the glue's closure): only the trusted side says when a request is over.
const progress = new MessageChannel();

const worker = new Worker(new URL("./worker.ts", import.meta.url).href, {
  type: "module",
  name: "pyodide",
  deno: {
    permissions: init.workerInherits ? "inherit" : {
      read: init.workerRead,
      write: init.workerWrite.length ? init.workerWrite : false,
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
  sendHostEvent({ event: "fatal", message: `sandbox worker error: ${e.message}` });
  flushAndExit(71);
};
worker.onmessage = (e: MessageEvent) => {
  // The worker glue posts only fatal reports; guest code can post too, so anything
  // shaped like one ends this sandbox (the kernel tells the user) and the rest is ignored.
  if (e.data?.type !== "fatal") return;
  const message = typeof e.data.message === "string" ? e.data.message.slice(0, 2000) : "unknown";
  sendHostEvent({ event: "fatal", message });
  flushAndExit(72);
};

worker.postMessage({
  type: "init",
  progress: progress.port2,
  ring: ringSab,
  interrupt: interruptSab,
  reply: replySab,
  life: lifeSab,
  wheels: init.wheels,
  guestSite: init.guestSite,
  snapshot: init.snapshot,
  mounts: init.mounts,
  pyodideLock: init.pyodideLock,
  pyodidePackages: init.pyodidePackages,
  guestDir: init.guestDir,
  maxEventBytes: init.maxEventBytes,
}, [progress.port2]);

progress.port1.onmessage = (e: MessageEvent) => {
  const { id, reply } = e.data ?? {};
  if (typeof id !== "number" || id <= 0) return;
  if (reply === undefined) { // the worker began to serve request `id`
    sendHostEvent({ event: "started", id });
    return;
  }
  // A reply may be as large as a frame: the kernel trims it to the cell's output budget.
  const ok = typeof reply === "string" && reply.length * 3 <= init.maxFrameBytes;
  const content = ok ? reply : JSON.stringify({
    status: "error",
    ename: "SandboxError",
    evalue: `the reply was larger than the sandbox may send (SandboxKernel.max_frame_bytes=${init.maxFrameBytes})`,
    traceback: [],
    user_expressions: {},
    payload: [],
  });
  pumpOnce(); // everything the request printed goes out before its reply
  send(REPLY, id, encoder.encode(content));
};

// The worker marks `life` when it unloads (e.g. guest code called Deno.exit).
(async () => {
  const res = Atomics.waitAsync(life, 0, 0);
  if (res.async) await res.value;
  await new Promise((r) => setTimeout(r, 20));
  pumpOnce();
  sendHostEvent({ event: "fatal", message: "the sandbox worker exited (guest code ended it)" });
  await flushAndExit(73);
})();

// ---- ring -> kernel ------------------------------------------------------------------
let eventParts: Uint8Array[] = [];
let eventSize = 0;

function pumpOnce(): void {
  let pending: { kind: number; id: number; parts: Uint8Array[] } | null = null;
  const flushPending = () => {
    if (!pending) return;
    send(pending.kind, pending.id, concat(pending.parts));
    pending = null;
  };
  for (const rec of ring.drain()) {
    const kind = rec.kind & ~MORE;
    if (kind === STDOUT || kind === STDERR) {
      // Coalesce consecutive chunks of the same stream and request.
      if (!pending || pending.kind !== kind || pending.id !== rec.id) {
        flushPending();
        pending = { kind, id: rec.id, parts: [] };
      }
      pending.parts.push(rec.payload);
      continue;
    }
    flushPending();
    if (kind !== GUEST_EVENT) continue; // the worker may write nothing else
    eventSize += rec.payload.length;
    if (eventSize <= init.maxEventBytes) eventParts.push(rec.payload);
    if (rec.kind & MORE) continue;
    if (eventSize <= init.maxEventBytes) send(GUEST_EVENT, rec.id, concat(eventParts));
    eventParts = [];
    eventSize = 0;
  }
  flushPending();
}

async function pump(): Promise<void> {
  for (;;) {
    const seq = ring.sequence();
    pumpOnce();
    await ring.waitForData(seq);
  }
}

// ---- kernel -> worker ----------------------------------------------------------------
function handleRequest(id: number, req: Record<string, unknown>): void {
  switch (req.op) {
    case "interrupt":
      Atomics.store(interrupt, 0, 2); // SIGINT
      Atomics.notify(interrupt, 0);
      Atomics.notify(replyCtrl, 0);
      worker.postMessage({ type: "interrupt", id });
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
    default:
      worker.postMessage({ type: "request", id, json: JSON.stringify(req) }); // this realm's JSON is safe
  }
}

async function reader(): Promise<void> {
  let buf = new Uint8Array(0);
  const chunk = new Uint8Array(1 << 16);
  for (;;) {
    const n = await conn.read(chunk);
    if (n === null) Deno.exit(0); // the kernel went away: so do we
    const merged = new Uint8Array(buf.length + n);
    merged.set(buf);
    merged.set(chunk.subarray(0, n), buf.length);
    buf = merged;
    while (buf.length >= FRAME_HEADER) {
      const view = new DataView(buf.buffer, buf.byteOffset);
      const length = view.getUint32(0);
      if (length < 5 || length > init.maxFrameBytes) Deno.exit(74);
      if (buf.length < 4 + length) break;
      const kind = view.getUint8(4);
      const id = view.getUint32(5);
      const payload = buf.subarray(FRAME_HEADER, 4 + length);
      buf = buf.subarray(4 + length);
      if (kind === REQUEST) handleRequest(id, JSON.parse(decoder.decode(payload)));
    }
  }
}

sendHostEvent({ event: "hello", token: init.token });
writer();
pump();
await reader();
