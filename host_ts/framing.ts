/**
 * The supervisor's framing: frames to and from the kernel ([length u32][kind u8][id u32][payload], big-endian,
 * length counting kind, id and payload), and the ring's records turned into frames.
 */
import { BLOB, FRAME_HEADER, GUEST_EVENT, STDERR, STDOUT } from "./protocol.ts";
import { MORE, type RingRecord } from "./ring.ts";

export type Frame = { kind: number; id: number; payload: Uint8Array };

export class FrameError extends Error {}

export function encodeFrame(kind: number, id: number, payload: Uint8Array): Uint8Array {
  const buf = new Uint8Array(FRAME_HEADER + payload.length);
  const view = new DataView(buf.buffer);
  view.setUint32(0, 5 + payload.length);
  view.setUint8(4, kind);
  view.setUint32(5, id >>> 0);
  buf.set(payload, FRAME_HEADER);
  return buf;
}

/** The parts, one after another, in one buffer. */
export function concat(parts: Uint8Array[]): Uint8Array {
  const all = new Uint8Array(parts.reduce((n, p) => n + p.length, 0));
  let off = 0;
  for (const p of parts) {
    all.set(p, off);
    off += p.length;
  }
  return all;
}

/** Cuts the kernel's byte stream into frames. */
export class FrameParser {
  /** Bytes received and not yet framed: copied once into a frame when it is complete (linear in its size). */
  private held: Uint8Array[] = [];
  private heldBytes = 0;
  private needed = FRAME_HEADER; // bytes the next step needs: a header, then the whole frame

  /** `maxLength`: the largest length field accepted (it counts kind and id too). */
  constructor(private readonly maxLength: number) {}

  /**
   * Takes `chunk` (copied at once: the caller may reuse it) and gives the frames it completes, one at a time;
   * the iteration throws FrameError at a length out of bounds, after the frames before it.
   */
  push(chunk: Uint8Array): Iterable<Frame> {
    this.held.push(chunk.slice());
    this.heldBytes += chunk.length;
    return this.frames();
  }

  private *frames(): Generator<Frame> {
    while (this.heldBytes >= this.needed) {
      const buf = this.held.length === 1 ? this.held[0] : concat(this.held);
      this.held = [buf];
      const view = new DataView(buf.buffer, buf.byteOffset);
      const length = view.getUint32(0);
      if (length < 5 || length > this.maxLength) throw new FrameError(`frame length ${length} out of bounds`);
      if (buf.length < 4 + length) {
        this.needed = 4 + length; // joined again only once the whole frame is here
        return;
      }
      const frame = { kind: view.getUint8(4), id: view.getUint32(5), payload: buf.subarray(FRAME_HEADER, 4 + length) };
      const rest = buf.subarray(4 + length);
      this.held = rest.length ? [rest] : [];
      this.heldBytes = rest.length;
      this.needed = FRAME_HEADER;
      yield frame;
    }
  }
}

/**
 * Turns the worker's ring records into frames for the kernel. Consecutive stream chunks of one stream and request
 * make one frame (none when they are all empty); an event's or a blob's records (MORE: continued in the next) make
 * one frame, dropped whole when larger than `maxEventBytes`, even when its records come in several drains. Records
 * of other kinds are dropped.
 */
export class RecordFramer {
  private eventParts: Uint8Array[] = [];
  private eventSize = 0;

  constructor(private readonly maxEventBytes: number) {}

  frames(records: Iterable<RingRecord>): Frame[] {
    const out: Frame[] = [];
    let stream: { kind: number; id: number; parts: Uint8Array[] } | null = null;
    const endStream = () => {
      if (stream?.parts.length) out.push({ kind: stream.kind, id: stream.id, payload: concat(stream.parts) });
      stream = null;
    };
    for (const rec of records) {
      const kind = rec.kind & ~MORE;
      if (kind === STDOUT || kind === STDERR) {
        if (!stream || stream.kind !== kind || stream.id !== rec.id) {
          endStream();
          stream = { kind, id: rec.id, parts: [] };
        }
        if (rec.payload.length) stream.parts.push(rec.payload);
        continue;
      }
      endStream();
      if (kind !== GUEST_EVENT && kind !== BLOB) continue; // the worker may write nothing else
      this.eventSize += rec.payload.length;
      if (this.eventSize <= this.maxEventBytes) this.eventParts.push(rec.payload);
      if (rec.kind & MORE) continue;
      if (this.eventSize <= this.maxEventBytes) {
        out.push({ kind, id: rec.id, payload: concat(this.eventParts) });
      }
      this.eventParts = [];
      this.eventSize = 0;
    }
    endStream();
    return out;
  }
}
