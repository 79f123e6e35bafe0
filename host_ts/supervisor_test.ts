import assert from "node:assert/strict";
import { concat, encodeFrame, type Frame, FrameParser } from "./framing.ts";
import type { KernelRequest, ToWorker } from "./messages.ts";
import protocol from "./protocol.json" with { type: "json" };
import { DATA, HOST_EVENT, REPLY, REQUEST, STDOUT } from "./protocol.ts";
import { CTRL_INTS, RingWriter } from "./ring.ts";
import { type Limits, Supervisor, within } from "./supervisor.ts";

const LIMITS: Limits = { ringBytes: 1 << 12, replyBytes: 64, maxFrameBytes: 1 << 12, maxEventBytes: 1 << 10 };
const text = (s: string) => new TextEncoder().encode(s);
const json = (value: unknown) => text(JSON.stringify(value));

/**
 * A Supervisor with fakes outside it: the bytes it writes to the kernel, what it posts to the worker, and the code
 * it exits with (`exited` settles at the first exit).
 */
function harness(write?: (bytes: Uint8Array) => Promise<number>, deadlineMs?: number) {
  const written: Uint8Array[] = [];
  const posted: { message: ToWorker; transfer: Transferable[] }[] = [];
  const exits: number[] = [];
  let exit = (_code: number) => {};
  const exited = new Promise<number>((resolve) => (exit = resolve));
  const supervisor = new Supervisor(LIMITS, {
    write: write ?? ((bytes) => (written.push(bytes.slice()), Promise.resolve(bytes.length))),
    toWorker: (message, transfer = []) => posted.push({ message, transfer }),
    exit: (code) => (exits.push(code), exit(code)),
  }, deadlineMs);
  /** Every frame written to the kernel so far, JSON payloads parsed (others as text). */
  const frames = async () => {
    await supervisor.whenWritten();
    return [...new FrameParser(1 << 20).push(concat(written))].map((f) => ({ kind: f.kind, id: f.id, body: body(f) }));
  };
  const interruptFlag = () => new Int32Array(supervisor.memory.interrupt)[0];
  return { supervisor, posted, exits, exited, frames, interruptFlag };
}

function body(f: Frame): unknown {
  const s = new TextDecoder().decode(f.payload);
  return f.kind === HOST_EVENT || f.kind === REPLY ? JSON.parse(s) : s;
}

/** The kernel's side of the socket: the chunks it sends, then its end (read() gives null). */
function socket(...chunks: Uint8Array[]) {
  return {
    read(buffer: Uint8Array): Promise<number | null> {
      const chunk = chunks.shift();
      if (!chunk) return Promise.resolve(null);
      buffer.set(chunk);
      return Promise.resolve(chunk.length);
    },
  };
}

const request = (id: number, req: KernelRequest) => encodeFrame(REQUEST, id, json(req));

Deno.test("the supervisor serves exactly protocol.json's supervisorOps itself, and passes any other op to the worker", () => {
  const ops: unknown[] = [
    ...Object.keys(protocol.supervisorOps),
    ...Object.keys(protocol.guestOps),
    "nonsense",
    "__proto__",
    "constructor",
    "hasOwnProperty",
    ["interrupt"], // a list whose text is a supervisor op
    7,
    null,
  ];
  const forwarded = ops.filter((op) => {
    const { supervisor, posted } = harness();
    supervisor.handleRequest(1, { op } as KernelRequest);
    return posted.length > 0;
  });
  assert.deepEqual(forwarded, ops.slice(Object.keys(protocol.supervisorOps).length));
});

Deno.test("interrupt: the request being served at once; one not started yet once it starts; others never", () => {
  const h = harness();
  const posts = () => h.posted.map((p) => p.message);
  h.supervisor.progress({ type: "started", id: 5 });
  h.supervisor.handleRequest(5, { op: "interrupt" });
  assert.equal(h.interruptFlag(), 2); // SIGINT, for Pyodide's interrupt buffer
  assert.deepEqual(posts(), [{ type: "interrupt", id: 5 }]);

  Atomics.store(new Int32Array(h.supervisor.memory.interrupt), 0, 0);
  h.supervisor.progress({ type: "replied", id: 5, reply: "{}", wasmBytes: 0 });
  h.supervisor.handleRequest(6, { op: "interrupt" }); // sent before request 6 started
  assert.equal(h.interruptFlag(), 0);
  h.supervisor.progress({ type: "started", id: 6 });
  assert.equal(h.interruptFlag(), 2);
  assert.deepEqual(posts(), [{ type: "interrupt", id: 5 }, { type: "interrupt", id: 6 }]);

  Atomics.store(new Int32Array(h.supervisor.memory.interrupt), 0, 0);
  h.supervisor.progress({ type: "replied", id: 6, reply: "{}", wasmBytes: 0 });
  for (const id of [6, 5, 0]) h.supervisor.handleRequest(id, { op: "interrupt" }); // over, or no request
  h.supervisor.progress({ type: "started", id: 7 });
  assert.equal(h.interruptFlag(), 0);
  assert.equal(h.posted.length, 2);
});

Deno.test("reply: the kernel's answer lands in shared memory with its number, the worker not told", () => {
  const h = harness();
  const ctrl = new Int32Array(h.supervisor.memory.reply, 0, 3); // state, length, reply number
  const answer = () => new TextDecoder().decode(new Uint8Array(h.supervisor.memory.reply, 12, ctrl[1]));
  h.supervisor.handleRequest(0, { op: "reply", n: 9, content: { value: "hi" } });
  assert.deepEqual([ctrl[0], ctrl[2], answer()], [1, 9, '{"value":"hi"}']);
  assert.equal(h.posted.length, 0); // the worker is not told: it waits on the shared memory
});

Deno.test("a request for the worker goes whole, with the DATA frames sent before it, their buffers moved", async () => {
  const h = harness();
  const req = { op: "restore", name: "before" };
  await h.supervisor.read(socket(
    concat([encodeFrame(DATA, 0, text("part one")), encodeFrame(DATA, 0, text("part 2"))]),
    request(4, req),
    request(5, { op: "execute", code: "1" }),
  ));
  assert.deepEqual(h.exits, [0]); // the kernel went away: so does the sandbox
  const [restore, execute] = h.posted;
  assert.deepEqual(restore.message, {
    type: "request",
    id: 4,
    json: JSON.stringify(req),
    data: [text("part one"), text("part 2")],
  });
  const data = (restore.message as { data: Uint8Array[] }).data;
  assert.deepEqual(restore.transfer, data.map((d) => d.buffer));
  assert.deepEqual(execute.message, { type: "request", id: 5, json: '{"op":"execute","code":"1"}', data: [] });
});

Deno.test("a frame out of bounds from the kernel ends the process (74), after the frames before it", async () => {
  const h = harness();
  const tooLong = new Uint8Array(9);
  new DataView(tooLong.buffer).setUint32(0, LIMITS.maxFrameBytes + 1);
  await h.supervisor.read(socket(concat([request(3, { op: "execute" }), tooLong])));
  assert.deepEqual(h.exits, [74]);
  assert.equal(h.posted.length, 1);
});

Deno.test("a request's end: its output, then the memory event, then its reply; a reply too large is replaced", async () => {
  const h = harness();
  const ring = new RingWriter(h.supervisor.memory.ring);
  h.supervisor.progress({ type: "started", id: 3 });
  ring.writeText(STDOUT, 3, "printed\n");
  h.supervisor.progress({ type: "replied", id: 3, reply: '{"status": "ok"}', wasmBytes: 1234 });
  h.supervisor.progress({ type: "started", id: 4 });
  h.supervisor.progress({ type: "replied", id: 4, reply: "x".repeat(LIMITS.maxFrameBytes), wasmBytes: 1 });
  const frames = await h.frames();
  assert.deepEqual(frames.slice(0, 4), [
    { kind: HOST_EVENT, id: 0, body: { event: "started", id: 3 } },
    { kind: STDOUT, id: 3, body: "printed\n" },
    { kind: HOST_EVENT, id: 0, body: { event: "memory", id: 3, bytes: 1234 } },
    { kind: REPLY, id: 3, body: { status: "ok" } },
  ]);
  const last = frames[frames.length - 1];
  assert.deepEqual([last.kind, last.id], [REPLY, 4]);
  assert.match(
    (last.body as { evalue: string }).evalue,
    /larger than the sandbox may send \(SandboxKernel\.max_frame_bytes=4096\)/,
  );
});

Deno.test("the host events the supervisor writes are protocol.json's hostEvents", async () => {
  const h = harness();
  h.supervisor.hello("token-1");
  h.supervisor.progress({ type: "started", id: 1 });
  h.supervisor.progress({ type: "replied", id: 1, reply: "{}", wasmBytes: 0 });
  await h.supervisor.partial(0, ["t.sandbox-partial-a1-0.csv"]);
  h.supervisor.workerPosted({ type: "fatal", message: "gone" });
  assert.equal(await h.exited, 72);
  const events = (await h.frames()).filter((f) => f.kind === HOST_EVENT).map((f) => f.body as { event: string });
  assert.deepEqual(events[0], { event: "hello", token: "token-1" }); // the first frame
  assert.deepEqual(new Set(events.map((e) => e.event)), new Set(Object.keys(protocol.hostEvents)));
});

Deno.test("only a message shaped like the glue's fatal report ends the sandbox, its text cut", async () => {
  for (const message of [null, {}, { type: "other", message: "x" }, { type: "Fatal" }]) {
    const h = harness();
    h.supervisor.workerPosted(message);
    assert.equal(h.exits.length, 0);
  }
  const cases: [unknown, string][] = [[42, "unknown"], ["y".repeat(3000), "y".repeat(2000)]];
  for (const [message, said] of cases) {
    const h = harness();
    h.supervisor.workerPosted({ type: "fatal", message });
    assert.equal(await h.exited, 72);
    assert.deepEqual((await h.frames()).map((f) => f.body), [{ event: "fatal", message: said }]);
  }
});

Deno.test("die: the reason is sent once, then the process ends; a socket that takes nothing cannot hold it", async () => {
  const stuck = harness(() => new Promise<number>(() => {}), 20); // the kernel reads nothing
  stuck.supervisor.workerFailed("boom");
  stuck.supervisor.workerFailed("again"); // dying already: no second report, no second exit
  assert.equal(await stuck.exited, 71);
  assert.deepEqual(stuck.exits, [71]);

  const h = harness();
  await h.supervisor.die(75, "first");
  await h.supervisor.die(76, "second");
  assert.deepEqual(h.exits, [75]);
  assert.deepEqual((await h.frames()).map((f) => f.body), [{ event: "fatal", message: "first" }]);
});

Deno.test("a ring the worker broke ends the sandbox (75)", async () => {
  const h = harness();
  const ctrl = new Int32Array(h.supervisor.memory.ring, 0, CTRL_INTS);
  ctrl[0] = LIMITS.ringBytes + 1; // more written than the ring holds
  h.supervisor.pumpOnce();
  assert.equal(await h.exited, 75);
  const [fatal] = (await h.frames()).map((f) => f.body as { message: string });
  assert.match(fatal.message, /^the sandbox worker broke the output ring: /);
});

Deno.test("the worker's unloading ends the sandbox (73) at its last report, with what it wrote before", async () => {
  const h = harness(undefined, 60_000); // "exited" ends the wait, long before this deadline
  const ring = new RingWriter(h.supervisor.memory.ring);
  const watching = h.supervisor.watchLife();
  h.supervisor.progress({ type: "started", id: 2 });
  ring.writeText(STDOUT, 2, "last words");
  const life = new Int32Array(h.supervisor.memory.life);
  Atomics.store(life, 0, 1);
  Atomics.notify(life, 0);
  h.supervisor.progress({ type: "exited" });
  await within(watching, 5000);
  assert.deepEqual(h.exits, [73]);
  assert.deepEqual((await h.frames()).slice(1), [
    { kind: STDOUT, id: 2, body: "last words" },
    { kind: HOST_EVENT, id: 0, body: { event: "fatal", message: "the sandbox worker exited (guest code ended it)" } },
  ]);
});

Deno.test("without the worker's last report, its unloading ends the sandbox at the deadline", async () => {
  const h = harness(undefined, 20);
  const watching = h.supervisor.watchLife();
  const life = new Int32Array(h.supervisor.memory.life);
  Atomics.store(life, 0, 1);
  Atomics.notify(life, 0);
  await within(watching, 5000);
  assert.deepEqual(h.exits, [73]);
});

Deno.test({
  name: "output waits in the ring while the socket holds more than the backlog allows; nothing is lost or reordered",
  // pump() runs for the process's life: it is left waiting on a write this test never lets finish
  sanitizeOps: false,
  sanitizeResources: false,
  fn: async () => {
    const taken: Uint8Array[] = [];
    const finish: (() => void)[] = [];
    const h = harness((bytes) => {
      taken.push(bytes.slice());
      return new Promise((resolve) => finish.push(() => resolve(bytes.length)));
    });
    const ctrl = new Int32Array(h.supervisor.memory.ring, 0, CTRL_INTS);
    const ringHolds = () => (ctrl[0] - ctrl[1]) >>> 0; // written, not yet drained
    const ring = new RingWriter(h.supervisor.memory.ring);
    const tick = () => new Promise((resolve) => setTimeout(resolve, 0));
    ring.writeText(STDOUT, 1, "a".repeat(1000));
    h.supervisor.pump(500);
    await tick();
    assert.equal(ringHolds(), 0, "the first output was drained");
    assert.equal(h.supervisor.socketBacklog, 1009, "and is being written");
    ring.writeText(STDOUT, 1, "b".repeat(1000));
    await tick();
    assert.equal(ringHolds(), 1009, "more output stays in the ring while the socket is behind");
    finish.shift()!();
    await tick();
    await tick();
    assert.equal(ringHolds(), 0, "drained once the socket took the first");
    assert.equal(taken.length, 2);
    const frames = [...new FrameParser(1 << 20).push(concat(taken))].map((f) => new TextDecoder().decode(f.payload));
    assert.deepEqual(frames, ["a".repeat(1000), "b".repeat(1000)]);
  },
});

Deno.test("a partial event says the name it is for was made new only when told so", async () => {
  const h = harness();
  await h.supervisor.partial(0, ["t.sandbox-partial-a1-0.csv"]);
  await h.supervisor.partial(0, ["n.sandbox-partial-a1-1.csv"], { name: "n.csv", dev: 5, ino: 7 });
  h.supervisor.workerPosted({ type: "fatal", message: "gone" });
  await h.exited;
  const events = (await h.frames()).filter((f) => f.kind === HOST_EVENT).map((f) => f.body as { event: string });
  assert.deepEqual(events.filter((e) => e.event === "partial"), [
    { event: "partial", mount: 0, path: ["t.sandbox-partial-a1-0.csv"] },
    { event: "partial", mount: 0, path: ["n.sandbox-partial-a1-1.csv"], made: { name: "n.csv", dev: 5, ino: 7 } },
  ]);
});
