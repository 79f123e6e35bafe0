/**
 * The kernel's answers to the guest's blocking requests (input(), skill calls), handed to the worker one at a time
 * through one shared slot: Int32 [state, length, reply number], then the answer's bytes.
 *
 * The host writes the slot only while it is empty (state 0) and the guest empties it after reading (state 0, then a
 * notify), so an answer is never written over one the guest is reading, nor cleared unread. Answers that come while
 * the slot is full wait here, oldest first; a guest that never empties the slot (it asked without waiting) costs at
 * most MAX_WAITING_ANSWERS of them and WAITING_SLOTS_OF_BYTES slots' worth of bytes, the oldest dropped first. The
 * guest can reach the slot's words too: whatever it writes there, it stalls only its own answers.
 */

import { copyOut, load, notify, store, wait } from "./shared_views.ts";

export const MAX_WAITING_ANSWERS = 64;
/** The answers waiting hold at most this many slots' worth of bytes (answers can be as large as the slot). */
export const WAITING_SLOTS_OF_BYTES = 4;
export const SLOT_HEADER_BYTES = 12;
const EMPTY = 0;
const FULL = 1;
const POLL_MS = 50; // the reader looks at its interrupt flag this often while it waits
const encoder = new TextEncoder();
const decoder = new TextDecoder();

/** The host's side: puts each answer in the slot once the slot is empty. */
export class ReplySlot {
  private readonly ctrl: Int32Array;
  private readonly data: Uint8Array;
  private readonly waiting: { n: number; body: Uint8Array }[] = [];
  private waitingBytes = 0;
  private watching = false;

  constructor(readonly buffer: SharedArrayBuffer) {
    this.ctrl = new Int32Array(buffer, 0, 3);
    this.data = new Uint8Array(buffer, SLOT_HEADER_BYTES);
  }

  /** Answers not yet in the slot. */
  get backlog(): number {
    return this.waiting.length;
  }

  /** Queue the answer to request `n` (JSON of `content`; one too large becomes an error the guest can read). */
  put(n: number, content: unknown): void {
    const bytes = encoder.encode(JSON.stringify(content ?? null));
    const body = bytes.length <= this.data.length
      ? bytes
      : encoder.encode(JSON.stringify({ error: "reply too large" }));
    this.waiting.push({ n: n | 0, body });
    this.waitingBytes += body.length;
    const maxBytes = WAITING_SLOTS_OF_BYTES * this.data.length;
    while (this.waiting.length > 1 && (this.waiting.length > MAX_WAITING_ANSWERS || this.waitingBytes > maxBytes)) {
      this.waitingBytes -= this.waiting.shift()!.body.length;
    }
    this.deliver();
  }

  /** Wake a guest waiting for an answer (an interrupt), whatever the slot holds. */
  wake(): void {
    Atomics.notify(this.ctrl, 0);
  }

  private deliver(): void {
    for (let next = this.waiting[0]; next !== undefined; next = this.waiting[0]) {
      const state = Atomics.load(this.ctrl, 0);
      if (state !== EMPTY) return this.watch(state);
      this.waiting.shift();
      this.waitingBytes -= next.body.length;
      this.data.set(next.body);
      Atomics.store(this.ctrl, 1, next.body.length);
      Atomics.store(this.ctrl, 2, next.n);
      Atomics.store(this.ctrl, 0, FULL);
      Atomics.notify(this.ctrl, 0);
    }
  }

  /** Deliver again once the slot's state is no longer `seen` (the guest emptied it), or on a notify (an interrupt).
   * Each try is a task of its own, never a microtask: the guest shares the slot, and a state it keeps changing (or
   * sets to a value that is neither) must still leave the event loop its turns. */
  private watch(seen: number): void {
    if (this.watching) return;
    this.watching = true;
    const again = () => {
      this.watching = false;
      this.deliver();
    };
    const wait = Atomics.waitAsync(this.ctrl, 0, seen);
    if (wait.async) wait.value.then(() => setTimeout(again, 0));
    else setTimeout(again, 0); // it changed already
  }
}

/** The worker's side: waits in the slot for the answer to one request, emptying it of any other. It runs in the
 * worker, whose realm guest code shares: it touches the slot only through shared_views.ts. */
export class AnswerReader {
  private readonly ctrl: Int32Array;
  private readonly dataBytes: number;

  constructor(private readonly buffer: SharedArrayBuffer) {
    this.ctrl = new Int32Array(buffer, 0, 3);
    this.dataBytes = buffer.byteLength - SLOT_HEADER_BYTES;
  }

  /** The answer to request `n`; undefined as soon as `interrupted()` is true. Answers to other requests (ones
   * interrupted before their answer came) are read and dropped. */
  take(n: number, interrupted: () => boolean): string | undefined {
    for (;;) {
      if (load(this.ctrl, 0) === FULL) {
        const length = Math.min(Math.max(this.ctrl[1] | 0, 0), this.dataBytes);
        const number = this.ctrl[2];
        const text = decoder.decode(copyOut(this.buffer, SLOT_HEADER_BYTES, length));
        store(this.ctrl, 0, EMPTY); // the host may put the next answer in
        notify(this.ctrl, 0);
        if (number === n) return text;
        continue;
      }
      if (interrupted()) return undefined;
      wait(this.ctrl, 0, EMPTY, POLL_MS);
    }
  }
}
