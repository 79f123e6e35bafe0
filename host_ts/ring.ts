/**
 * A single-producer / single-consumer byte ring in a SharedArrayBuffer.
 *
 * The Pyodide worker writes records; the supervisor (main isolate) drains them.
 * Record layout: [kind u8][request id u32][payload length u32][payload].
 * Kind bit 0x80 marks a record whose payload continues in the next record.
 */
// The writer runs in the worker, whose realm guest code shares: it touches the ring only through shared_views.ts.
import { add, copyIn, load, notify, store, wait, waitAsync } from "./shared_views.ts";

export const CTRL_INTS = 4; // write counter, read counter, sequence, reserved
const W = 0;
const R = 1;
const SEQ = 2;
export const HEADER_BYTES = 9;
export const MORE = 0x80;
/** The most UTF-8 bytes of a text encoded at once (one record's payload). */
export const TEXT_CHUNK_BYTES = 1 << 16;

export function makeRingBuffer(dataBytes: number): SharedArrayBuffer {
  if ((dataBytes & (dataBytes - 1)) !== 0) throw new Error("ring size must be a power of two");
  return new SharedArrayBuffer(CTRL_INTS * 4 + dataBytes);
}

const DATA_OFFSET = CTRL_INTS * 4;

class RingBase {
  protected ctrl: Int32Array;
  protected data: Uint8Array;
  protected size: number;
  protected mask: number;
  constructor(protected readonly sab: SharedArrayBuffer) {
    this.ctrl = new Int32Array(sab, 0, CTRL_INTS);
    this.data = new Uint8Array(sab, DATA_OFFSET);
    this.size = this.data.length;
    this.mask = this.size - 1;
  }
}

/** The worker's side: appends records, waiting for room when the ring is full. */
export class RingWriter extends RingBase {
  private header = new Uint8Array(HEADER_BYTES);
  private headerView = new DataView(this.header.buffer);
  private encoder = new TextEncoder();
  /** A text's UTF-8 goes through this, one record at a time: its size is fixed, whatever the text's length. */
  private scratch: Uint8Array;
  readonly maxChunk: number;

  constructor(sab: SharedArrayBuffer) {
    super(sab);
    this.maxChunk = (this.size >>> 2) - HEADER_BYTES;
    this.scratch = new Uint8Array(Math.min(this.maxChunk, TEXT_CHUNK_BYTES));
  }

  /**
   * Write a string payload (UTF-8 encoded), encoded a piece at a time into a buffer of fixed size: a text of any
   * length costs no more memory here than one record (a buffer sized to the text held three times its length,
   * for good). The pieces are records of one payload (MORE), each ending on a whole character.
   */
  writeText(kind: number, id: number, text: string): void {
    let offset = 0;
    do {
      const { read, written } = this.encoder.encodeInto(offset ? text.substring(offset) : text, this.scratch);
      offset += read;
      this.writeRecord(kind | (offset < text.length ? MORE : 0), id, this.scratch.subarray(0, written));
    } while (offset < text.length);
  }

  /** Write a byte payload, split into chunks no larger than a quarter of the ring. */
  writeBytes(kind: number, id: number, payload: Uint8Array): void {
    let offset = 0;
    do {
      const chunk = payload.subarray(offset, offset + this.maxChunk);
      offset += chunk.length;
      const more = offset < payload.length ? MORE : 0;
      this.writeRecord(kind | more, id, chunk);
    } while (offset < payload.length);
  }

  private writeRecord(kind: number, id: number, chunk: Uint8Array): void {
    const total = HEADER_BYTES + chunk.length;
    let w = load(this.ctrl, W) >>> 0;
    for (;;) {
      const r = load(this.ctrl, R) >>> 0;
      if (this.size - ((w - r) >>> 0) >= total) break;
      wait(this.ctrl, R, r | 0, 50);
    }
    this.headerView.setUint8(0, kind);
    this.headerView.setUint32(1, id >>> 0);
    this.headerView.setUint32(5, chunk.length);
    this.copyIn(w, this.header);
    this.copyIn((w + HEADER_BYTES) >>> 0, chunk);
    w = (w + total) >>> 0;
    store(this.ctrl, W, w | 0);
    add(this.ctrl, SEQ, 1);
    notify(this.ctrl, SEQ);
  }

  private copyIn(pos: number, bytes: Uint8Array): void {
    const start = pos & this.mask;
    const first = Math.min(bytes.length, this.size - start);
    copyIn(this.sab, DATA_OFFSET + start, bytes.subarray(0, first));
    if (first < bytes.length) copyIn(this.sab, DATA_OFFSET, bytes.subarray(first));
  }
}

export type RingRecord = { kind: number; id: number; payload: Uint8Array };
/** The payload of every empty record (nothing to copy: a ring of empty records drains without allocating them). */
const EMPTY = new Uint8Array(0);

/** Resolves after a turn of the event loop (its I/O and timers), where an `await` of a settled promise would not. */
export function nextTurn(): Promise<void> {
  return new Promise((resolve) => setTimeout(resolve, 0));
}

/** The counters or a record's length are impossible: the ring was written by something other than RingWriter. */
export class RingError extends Error {}

/** The supervisor's side: takes every complete record, then frees the space. */
export class RingReader extends RingBase {
  /** Sequence number to wait on before the next drain. */
  sequence(): number {
    return load(this.ctrl, SEQ);
  }

  /**
   * Resolve when the writer has written since `seq` was read. When it already has, through a turn of the event loop:
   * an `await` of a settled promise is a microtask, and a writer that never pauses (a shell loop's empty output)
   * would otherwise keep the supervisor's timers and the kernel's socket (its interrupts) waiting until it stopped.
   */
  async waitForData(seq: number): Promise<void> {
    const res = waitAsync(this.ctrl, SEQ, seq);
    if (res.async) await res.value;
    else await nextTurn();
  }

  /** Whether records wait in the ring (written and not drained). */
  pending(): boolean {
    return load(this.ctrl, W) !== load(this.ctrl, R);
  }

  /**
   * The complete records in the ring, oldest first, until they reach `maxBytes` (a ring full of tiny records takes
   * long to drain: a slice at a time lets the event loop turn in between). Throws RingError (and frees nothing) when
   * the ring holds something RingWriter cannot have written.
   */
  drain(maxBytes = Infinity): RingRecord[] {
    const out: RingRecord[] = [];
    const w = load(this.ctrl, W) >>> 0;
    const start = load(this.ctrl, R) >>> 0;
    let r = start;
    if (((w - r) >>> 0) > this.size) throw new RingError(`${(w - r) >>> 0} bytes written to a ring of ${this.size}`);
    while (r !== w && ((r - start) >>> 0) < maxBytes) {
      const left = (w - r) >>> 0;
      if (left < HEADER_BYTES) throw new RingError(`a record of ${left} bytes is shorter than its header`);
      const length = this.u32At(r + 5);
      if (length > left - HEADER_BYTES) {
        throw new RingError(`a record claims ${length} bytes of ${left - HEADER_BYTES}`);
      }
      out.push({
        kind: this.data[r & this.mask],
        id: this.u32At(r + 1),
        payload: length ? this.copyOut((r + HEADER_BYTES) >>> 0, length) : EMPTY,
      });
      r = (r + HEADER_BYTES + length) >>> 0;
    }
    store(this.ctrl, R, r | 0);
    notify(this.ctrl, R);
    return out;
  }

  /** The big-endian u32 at ring position `pos` (read in place: a header costs no allocation). */
  private u32At(pos: number): number {
    const d = this.data, m = this.mask;
    return ((d[pos & m] << 24) | (d[(pos + 1) & m] << 16) | (d[(pos + 2) & m] << 8) | d[(pos + 3) & m]) >>> 0;
  }

  private copyOut(pos: number, length: number): Uint8Array {
    const out = new Uint8Array(length);
    const start = pos & this.mask;
    const first = Math.min(length, this.size - start);
    out.set(this.data.subarray(start, start + first));
    if (first < length) out.set(this.data.subarray(0, length - first), first);
    return out;
  }
}
