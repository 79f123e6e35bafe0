import assert from "node:assert/strict";
import {
  AnswerReader,
  MAX_WAITING_ANSWERS,
  ReplySlot,
  SLOT_HEADER_BYTES,
  WAITING_SLOTS_OF_BYTES,
} from "./reply_slot.ts";

const BYTES = 64;

function slot(): { slot: ReplySlot; ctrl: Int32Array; answer: () => string; empty: () => void } {
  const buffer = new SharedArrayBuffer(SLOT_HEADER_BYTES + BYTES);
  const ctrl = new Int32Array(buffer, 0, 3);
  const answer = () => new TextDecoder().decode(new Uint8Array(buffer, SLOT_HEADER_BYTES, ctrl[1]));
  const empty = () => {
    Atomics.store(ctrl, 0, 0);
    Atomics.notify(ctrl, 0);
  };
  return { slot: new ReplySlot(buffer), ctrl, answer, empty };
}

const turn = () => new Promise((resolve) => setTimeout(resolve, 0));

/** Once the host has put an answer in the slot (its state is no longer 0). */
async function filled(ctrl: Int32Array): Promise<void> {
  const wait = Atomics.waitAsync(ctrl, 0, 0, 5000);
  const alive = setTimeout(() => {}, 5000); // a pending waitAsync alone does not keep Deno's event loop going
  try {
    if (wait.async) await wait.value;
  } finally {
    clearTimeout(alive);
  }
  assert.equal(Atomics.load(ctrl, 0), 1, "no answer was put in the slot");
}

Deno.test("an answer lands with its number; one too large becomes an error the guest can read", () => {
  const s = slot();
  s.slot.put(9, { value: "hi" });
  assert.deepEqual([s.ctrl[0], s.ctrl[2], s.answer()], [1, 9, '{"value":"hi"}']);
  s.empty();
  s.slot.put(10, { value: "x".repeat(BYTES) });
  assert.deepEqual([s.ctrl[0], s.ctrl[2], s.answer()], [1, 10, '{"error":"reply too large"}']);
});

Deno.test("an answer never overwrites one the guest has not read: it waits until the slot is emptied", async () => {
  const s = slot();
  s.slot.put(1, "stale");
  s.slot.put(2, "wanted");
  assert.deepEqual([s.ctrl[2], s.answer(), s.slot.backlog], [1, '"stale"', 1]);
  s.empty();
  await filled(s.ctrl);
  assert.deepEqual([s.ctrl[0], s.ctrl[2], s.answer(), s.slot.backlog], [1, 2, '"wanted"', 0]);
});

Deno.test("a guest that never empties the slot holds a bounded backlog, the oldest answers dropped", async () => {
  const s = slot();
  for (let n = 0; n < MAX_WAITING_ANSWERS + 6; n++) s.slot.put(n, n);
  assert.equal(s.slot.backlog, MAX_WAITING_ANSWERS);
  assert.equal(s.ctrl[2], 0);
  s.empty();
  await filled(s.ctrl);
  assert.equal(s.ctrl[2], 6); // answers 1-5 were dropped
});

Deno.test("answers as large as the slot wait only a few slots' worth of bytes", () => {
  const s = slot();
  for (let n = 0; n < 20; n++) s.slot.put(n, "x".repeat(BYTES - 2)); // JSON: the slot's size exactly
  assert.equal(s.slot.backlog, WAITING_SLOTS_OF_BYTES);
});

Deno.test("a state the guest wrote into the slot stalls only its answers: the host's event loop turns", async () => {
  const s = slot();
  Atomics.store(s.ctrl, 0, 2); // neither empty nor full
  s.slot.put(1, "answer");
  for (let i = 0; i < 5; i++) await turn(); // each would never come if the host retried in microtasks
  assert.deepEqual([Atomics.load(s.ctrl, 0), s.slot.backlog], [2, 1]);
  s.empty();
  await filled(s.ctrl);
  assert.equal(s.answer(), '"answer"');
});

Deno.test("a reader in another thread gets every answer it waits for, with stale answers racing each one", async () => {
  const url = new URL("./reply_slot.ts", import.meta.url).href;
  // The worker's loop as the glue runs it: each request's answer, after the answer to one it gave up on.
  const source = `import { AnswerReader } from ${JSON.stringify(url)};
self.onmessage = (e) => {
  const reader = new AnswerReader(e.data.buffer), got = new Int32Array(e.data.got);
  for (let n = 1; n <= e.data.count; n++) {
    if (reader.take(n, () => false) !== JSON.stringify("answer " + n)) break;
    Atomics.store(got, 0, n);
    Atomics.notify(got, 0);
  }
};`;
  const worker = new Worker(URL.createObjectURL(new Blob([source])), { type: "module" });
  try {
    const buffer = new SharedArrayBuffer(SLOT_HEADER_BYTES + BYTES);
    const got = new Int32Array(new SharedArrayBuffer(4));
    const replies = new ReplySlot(buffer);
    const count = 2000;
    worker.postMessage({ buffer, got: got.buffer, count });
    for (let n = 1; n <= count; n++) {
      replies.put(-n, "stale"); // e.g. the answer to a request that was interrupted
      replies.put(n, `answer ${n}`);
      const waited = Atomics.waitAsync(got, 0, n - 1, 5000);
      if (waited.async) await waited.value;
      assert.equal(Atomics.load(got, 0), n, `the reader did not get answer ${n}`);
    }
  } finally {
    worker.terminate();
  }
});

Deno.test("the reader gives up when interrupted, and drops answers to other requests unread", () => {
  const buffer = new SharedArrayBuffer(SLOT_HEADER_BYTES + BYTES);
  const ctrl = new Int32Array(buffer, 0, 3);
  new ReplySlot(buffer).put(3, "not yours");
  let asked = 0;
  assert.equal(new AnswerReader(buffer).take(4, () => ++asked > 1), undefined);
  assert.equal(Atomics.load(ctrl, 0), 0); // emptied: the next answer can come in
});
