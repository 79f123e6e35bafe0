/**
 * What the supervisor isolate does, apart from the process it runs in: frames out to the kernel, the kernel's
 * requests in, the worker's progress, and the end of the sandbox.
 *
 * main.ts wires a Supervisor to the kernel's socket, the Pyodide worker and Deno.exit; supervisor_test.ts drives
 * one with fakes. Whatever the worker writes (its ring, its messages) is guest data: it is framed here, never
 * trusted. Only the worker's glue holds the progress port, so only it says when a request starts and ends.
 */
import { concat, encodeFrame, type Frame, FrameError, FrameParser, RecordFramer } from "./framing.ts";
import type {
  FromWorker,
  HostEvent,
  KernelRequest,
  MadeName,
  Progress,
  SupervisorHandlers,
  SupervisorInit,
  ToWorker,
  Untrusted,
} from "./messages.ts";
import { DATA, HOST_EVENT, REPLY, REQUEST } from "./protocol.ts";
import { makeRingBuffer, nextTurn, RingError, RingReader, type RingRecord } from "./ring.ts";
import { ReplySlot, SLOT_HEADER_BYTES } from "./reply_slot.ts";

/** The most the last frames may take before the process ends: a guest cannot hold it. */
export const EXIT_DEADLINE_MS = 1000;
/**
 * The most output the supervisor holds for the kernel's socket before it stops draining the worker's ring. The
 * worker then waits for room in the ring (ring.ts), so a guest that prints faster than the kernel reads is slowed to
 * the kernel's pace, and what the sandbox holds of it stays this much plus the ring (without a bound, a cell writing
 * 2 GB took the sandbox past 580 MiB and out of memory at memory_limit_mb=256).
 */
export const SOCKET_BACKLOG_BYTES = 8 << 20;
// The ring bytes framed per turn of the event loop: a ring full of tiny records (a guest writing nothing, without
// pause) took 0.5-1.5 s to drain at once, and the kernel's interrupts waited that long in its socket.
const PUMP_SLICE_BYTES = 256 << 10;
const encoder = new TextEncoder();
const decoder = new TextDecoder();

/** What the supervisor acts on: the kernel's socket, the worker, and its own process. */
export interface Outside {
  /** Write to the kernel's socket; resolves to the number of bytes written (possibly fewer than given). */
  write(bytes: Uint8Array): Promise<number>;
  toWorker(message: ToWorker, transfer?: Transferable[]): void;
  /** End the process (Deno.exit: it does not return). */
  exit(code: number): void;
}

/** The parts of the init message the supervisor itself applies. */
export type Limits = Pick<SupervisorInit, "ringBytes" | "replyBytes" | "maxFrameBytes" | "maxEventBytes">;

/** The memory the supervisor shares with the worker (sent in the worker's init message). */
export interface SharedMemory {
  ring: SharedArrayBuffer; // ring.ts: the worker's output records
  interrupt: SharedArrayBuffer; // Int32 [signal]: Pyodide's interrupt buffer
  reply: SharedArrayBuffer; // Int32 [state, length, reply number], then the reply's bytes
  life: SharedArrayBuffer; // Int32 [1 once the worker unloads]
}

/** `promise` settled, or `ms` passed, whichever comes first. */
export function within(promise: Promise<unknown>, ms: number): Promise<void> {
  let timer: ReturnType<typeof setTimeout> | undefined;
  const deadline = new Promise<void>((resolve) => (timer = setTimeout(resolve, ms)));
  return Promise.race([promise.then(() => {}, () => {}), deadline]).finally(() => clearTimeout(timer));
}

export class Supervisor {
  readonly memory: SharedMemory;
  private readonly ring: RingReader;
  private readonly framer: RecordFramer;
  private readonly interrupt: Int32Array;
  private readonly replies: ReplySlot;
  private readonly life: Int32Array;
  private outQueue: Uint8Array[] = [];
  /** Bytes of frames sent and not yet written to the socket (queued, or being written). */
  private backlog = 0;
  /** Settles once every frame sent so far is on the socket. */
  private written: Promise<void> = Promise.resolve();
  private dying = false;
  private serving = 0; // the request the worker has started and not yet replied to
  private data: Uint8Array<ArrayBuffer>[] = []; // DATA frames for the next request (the kernel's own bytes)
  private lastReplied = 0;
  private interruptWhenStarted = 0;
  private progressEnded: () => void = () => {};
  private readonly progressOver = new Promise<void>((resolve) => (this.progressEnded = resolve));
  /** The requests the supervisor serves itself (protocol.json's supervisorOps); the worker gets any other. */
  private readonly ownOps: SupervisorHandlers = {
    interrupt: (id) => this.interruptRequest(id),
    reply: (_id, req) => this.reply(req),
  };

  constructor(
    private readonly limits: Limits,
    private readonly outside: Outside,
    private readonly exitDeadlineMs = EXIT_DEADLINE_MS,
  ) {
    this.memory = {
      ring: makeRingBuffer(limits.ringBytes),
      interrupt: new SharedArrayBuffer(4),
      reply: new SharedArrayBuffer(SLOT_HEADER_BYTES + limits.replyBytes),
      life: new SharedArrayBuffer(4),
    };
    this.ring = new RingReader(this.memory.ring);
    this.framer = new RecordFramer(limits.maxEventBytes);
    this.interrupt = new Int32Array(this.memory.interrupt);
    this.replies = new ReplySlot(this.memory.reply);
    this.life = new Int32Array(this.memory.life);
  }

  // ---- outgoing frames (to the kernel) -------------------------------------------------

  /** Queue a frame; frames sent before the queue is written go with it, in order. */
  send(kind: number, id: number, payload: Uint8Array): void {
    const frame = encodeFrame(kind, id, payload);
    this.backlog += frame.length;
    this.outQueue.push(frame);
    if (this.outQueue.length === 1) this.written = this.written.then(() => this.writeQueued());
  }

  private async writeQueued(): Promise<void> {
    const all = concat(this.outQueue);
    this.outQueue = [];
    let off = 0;
    try {
      while (off < all.length) off += await this.outside.write(all.subarray(off));
    } finally {
      this.backlog -= all.length;
    }
  }

  /** Bytes sent and not yet on the socket. */
  get socketBacklog(): number {
    return this.backlog;
  }

  /** Settles once every frame sent so far is on the socket (rejects if writing to it failed). */
  whenWritten(): Promise<void> {
    return this.written;
  }

  sendHostEvent(event: HostEvent): void {
    this.send(HOST_EVENT, 0, encoder.encode(JSON.stringify(event)));
  }

  /** A file written aside is about to be made at `path` of mount `mount`: settles once the kernel can know it (the
   * event is on the socket), so a process killed after it made the file leaves nothing the kernel cannot remove;
   * `made`: the name it is for was made new, empty, by this sandbox (the kernel removes that too, if still so). */
  partial(mount: number, path: string[], made?: MadeName): Promise<void> {
    this.sendHostEvent(made ? { event: "partial", mount, path, made } : { event: "partial", mount, path });
    return this.whenWritten();
  }

  /** The first frame: the init message's token proves to the kernel who connected. */
  hello(token: string): void {
    this.sendHostEvent({ event: "hello", token });
  }

  /** Tell the kernel why this sandbox ends (once), then end it when that is written (or at the deadline). */
  async die(code: number, message: string): Promise<void> {
    if (this.dying) return;
    this.dying = true;
    this.sendHostEvent({ event: "fatal", message });
    await within(this.written, this.exitDeadlineMs);
    this.outside.exit(code);
  }

  // ---- ring -> kernel ------------------------------------------------------------------

  /** Frame what the worker has written to the ring so far (up to `maxBytes` of it); a broken ring ends the sandbox. */
  pumpOnce(maxBytes = Infinity): void {
    let records: RingRecord[];
    try {
      records = this.ring.drain(maxBytes);
    } catch (err) {
      if (!(err instanceof RingError)) throw err;
      this.die(75, `the sandbox worker broke the output ring: ${err.message}`);
      return;
    }
    for (const f of this.framer.frames(records)) this.send(f.kind, f.id, f.payload);
  }

  /**
   * Frame the ring's records as they come, for as long as the process lives; while more than SOCKET_BACKLOG_BYTES
   * wait for the socket, the ring waits (and with it the worker, once it is full). A request's end drains it anyway
   * (`progress`): at most one ring more.
   */
  async pump(backlogBytes = SOCKET_BACKLOG_BYTES): Promise<never> {
    for (;;) {
      if (this.backlog > backlogBytes) {
        try {
          await this.written;
        } catch {
          await new Promise<never>(() => {}); // the kernel's socket is gone: read() ends the process
        }
        continue;
      }
      const seq = this.ring.sequence();
      this.pumpOnce(PUMP_SLICE_BYTES);
      if (this.ring.pending()) await nextTurn(); // the event loop turns between slices: interrupts are read
      else await this.ring.waitForData(seq);
    }
  }

  // ---- the worker ----------------------------------------------------------------------

  /** The worker failed (an uncaught error): what it wrote before still goes out, then the sandbox ends. */
  workerFailed(message: string): void {
    this.pumpOnce(); // (and output of a request marks it started)
    this.die(71, `sandbox worker error: ${message}`);
  }

  /**
   * A message on the worker's own channel. The worker glue posts only fatal reports; guest code can post too, so
   * anything shaped like one ends this sandbox (the kernel tells the user) and the rest is ignored.
   */
  workerPosted(message: Untrusted<FromWorker> | null): void {
    if (message?.type !== "fatal") return;
    const text = message.message;
    this.pumpOnce();
    this.die(72, typeof text === "string" ? text.slice(0, 2000) : "unknown");
  }

  /** A report of the worker's glue (on the progress port, which guest code cannot reach). */
  progress(m: Progress): void {
    switch (m.type) {
      case "started":
        this.serving = m.id;
        this.sendHostEvent({ event: "started", id: m.id });
        if (this.interruptWhenStarted === m.id) this.raiseInterrupt(m.id);
        this.interruptWhenStarted = 0;
        return;
      case "replied": {
        this.serving = 0;
        this.lastReplied = Math.max(this.lastReplied, m.id);
        // A reply may be as large as a frame: the kernel trims it to the cell's output budget.
        const max = this.limits.maxFrameBytes;
        const content = m.reply.length * 3 <= max ? m.reply : JSON.stringify({
          status: "error",
          ename: "SandboxError",
          evalue: `the reply was larger than the sandbox may send (SandboxKernel.max_frame_bytes=${max})`,
          traceback: [],
          user_expressions: {},
          payload: [],
        });
        this.pumpOnce(); // everything the request printed goes out before its reply
        this.sendHostEvent({ event: "memory", id: m.id, bytes: m.wasmBytes });
        this.send(REPLY, m.id, encoder.encode(content));
        return;
      }
      case "exited":
        this.progressEnded();
    }
  }

  /** Wait for the worker to mark `life` (it unloads, e.g. guest code called Deno.exit), then end the sandbox. */
  async watchLife(): Promise<void> {
    const res = Atomics.waitAsync(this.life, 0, 0);
    if (res.async) await res.value;
    // Its ring records were written before `life`, so the pump below sees them all. Messages on the progress port
    // (a request's start or reply) may still be on their way: they come before its last one, "exited".
    await within(this.progressOver, this.exitDeadlineMs);
    this.pumpOnce();
    await this.die(73, "the sandbox worker exited (guest code ended it)");
  }

  // ---- kernel -> worker ----------------------------------------------------------------

  /** Read the kernel's frames until it goes away (the process ends then) or sends a malformed one (so does it). */
  async read(socket: { read(buffer: Uint8Array): Promise<number | null> }): Promise<void> {
    const parser = new FrameParser(this.limits.maxFrameBytes);
    const chunk = new Uint8Array(1 << 20); // a checkpoint to restore comes in frames of up to 8 MiB
    for (;;) {
      const n = await socket.read(chunk);
      if (n === null) return this.outside.exit(0); // the kernel went away: so do we
      try {
        for (const f of parser.push(chunk.subarray(0, n))) this.receive(f);
      } catch (err) {
        if (err instanceof FrameError) return this.outside.exit(74);
        throw err;
      }
    }
  }

  private receive(f: Frame): void {
    if (f.kind === REQUEST) this.handleRequest(f.id, JSON.parse(decoder.decode(f.payload)));
    else if (f.kind === DATA) this.data.push(f.payload.slice()); // its own buffer, moved to the worker
  }

  /** A request of the kernel: the supervisor serves its own ops; any other goes to the worker whole. */
  handleRequest(id: number, req: KernelRequest): void {
    const op = req.op;
    if (typeof op === "string" && Object.hasOwn(this.ownOps, op)) this.ownOps[op as keyof SupervisorHandlers](id, req);
    else this.forward(id, req);
  }

  /**
   * Only the request being served is interrupted; one that has not started yet is, once it starts. A flag raised
   * between requests would land in the glue's own code (or in the next request).
   */
  private interruptRequest(id: number): void {
    if (id !== 0 && id === this.serving) this.raiseInterrupt(id);
    else if (id !== 0 && id > this.lastReplied) this.interruptWhenStarted = id;
  }

  private raiseInterrupt(id: number): void {
    Atomics.store(this.interrupt, 0, 2); // SIGINT
    Atomics.notify(this.interrupt, 0);
    this.replies.wake();
    this.outside.toWorker({ type: "interrupt", id });
  }

  /** The kernel's answer to the guest's blocking request number `n`, put where the guest waits for it. */
  private reply(req: KernelRequest): void {
    this.replies.put(Number(req.n), req.content);
  }

  private forward(id: number, req: KernelRequest): void {
    const sent = this.data;
    this.data = [];
    // This realm's JSON is safe; the DATA frames' buffers are moved, not copied.
    this.outside.toWorker(
      { type: "request", id, json: JSON.stringify(req), data: sent },
      sent.map((d) => d.buffer as ArrayBuffer),
    );
  }
}
