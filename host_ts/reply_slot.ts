/**
 * The kernel's answers to the guest's blocking requests (input(), skill calls), handed to the worker one at a time
 * through one shared slot: Int32 [state, length, reply number], then the answer's bytes.
 *
 * The host writes the slot only while it is empty (state 0) and the guest empties it after reading (state 0, then a
 * notify), so an answer is never written over one the guest is reading, nor cleared unread. Answers that come while
 * the slot is full wait here, oldest first; a guest that never empties the slot (it asked without waiting) costs at
 * most MAX_WAITING_ANSWERS of them, the oldest dropped first.
 */

export const MAX_WAITING_ANSWERS = 64;
export const SLOT_HEADER_BYTES = 12;
const EMPTY = 0;
const FULL = 1;
const POLL_MS = 50; // the reader looks at its interrupt flag this often while it waits
const encoder = new TextEncoder();
const decoder = new TextDecoder();
// The reader runs in the worker, whose realm guest code shares: these are captured as the module loads, before it.
const atomicsLoad = Atomics.load;
const atomicsStore = Atomics.store;
const atomicsNotify = Atomics.notify;
const atomicsWait = Atomics.wait;

/** The host's side: puts each answer in the slot once the slot is empty. */
export class ReplySlot {
  private readonly ctrl: Int32Array;
  private readonly data: Uint8Array;
  private readonly waiting: { n: number; body: Uint8Array }[] = [];
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
    if (this.waiting.length > MAX_WAITING_ANSWERS) this.waiting.shift();
    this.deliver();
  }

  /** Wake a guest waiting for an answer (an interrupt), whatever the slot holds. */
  wake(): void {
    Atomics.notify(this.ctrl, 0);
  }

  private deliver(): void {
    const next = this.waiting[0];
    if (next === undefined) return;
    if (Atomics.load(this.ctrl, 0) !== EMPTY) return this.watch();
    this.waiting.shift();
    this.data.set(next.body);
    Atomics.store(this.ctrl, 1, next.body.length);
    Atomics.store(this.ctrl, 2, next.n);
    Atomics.store(this.ctrl, 0, FULL);
    Atomics.notify(this.ctrl, 0);
    if (this.waiting.length > 0) this.watch();
  }

  /** Deliver again once the guest has emptied the slot (or anyone notifies it, e.g. an interrupt). */
  private watch(): void {
    if (this.watching) return;
    const wait = Atomics.waitAsync(this.ctrl, 0, FULL);
    if (!wait.async) return queueMicrotask(() => this.deliver()); // emptied already
    this.watching = true;
    wait.value.then(() => {
      this.watching = false;
      this.deliver();
    });
  }
}

/** The worker's side: waits in the slot for the answer to one request, emptying it of any other. */
export class AnswerReader {
  private readonly ctrl: Int32Array;
  private readonly data: Uint8Array;

  constructor(buffer: SharedArrayBuffer) {
    this.ctrl = new Int32Array(buffer, 0, 3);
    this.data = new Uint8Array(buffer, SLOT_HEADER_BYTES);
  }

  /** The answer to request `n`; undefined as soon as `interrupted()` is true. Answers to other requests (ones
   * interrupted before their answer came) are read and dropped. */
  take(n: number, interrupted: () => boolean): string | undefined {
    for (;;) {
      if (atomicsLoad(this.ctrl, 0) === FULL) {
        const length = this.ctrl[1];
        const number = this.ctrl[2];
        const text = decoder.decode(this.data.slice(0, length));
        atomicsStore(this.ctrl, 0, EMPTY); // the host may put the next answer in
        atomicsNotify(this.ctrl, 0);
        if (number === n) return text;
        continue;
      }
      if (interrupted()) return undefined;
      atomicsWait(this.ctrl, 0, EMPTY, POLL_MS);
    }
  }
}
