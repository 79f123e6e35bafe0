/**
 * A synchronous call channel in a SharedArrayBuffer: the worker asks, the supervisor answers.
 *
 * The worker has no write permission on host folders: every change to a read-write mount is a call here, made by
 * the worker's file-system driver (rwfs.ts) and served by the supervisor (file_service.ts), which decides. Guest
 * code can make calls too (it can reach the driver), so the server copies each request out before it reads it and
 * treats it as untrusted.
 *
 * Layout: Int32 [request number, answer number, request length, answer length], then the message area. A message
 * is [JSON length u32][JSON][payload bytes].
 */

// The client runs in the worker, whose realm guest code shares: both sides touch the channel only through
// shared_views.ts (and JSON as captured when the module loads).
import { copyIn, copyOut, load, notify, store, wait, waitAsync } from "./shared_views.ts";

const { stringify, parse } = JSON;
const encoder = new TextEncoder();
const decoder = new TextDecoder();
const CTRL = 16;
const REQUEST = 0;
const ANSWER = 1;
const REQUEST_LENGTH = 2;
const ANSWER_LENGTH = 3;

export const CHANNEL_BYTES = (1 << 20) + (64 << 10); // a chunk of file data and its JSON header
// After an answer the server waits this long for the next call before it goes back to its event loop: the calls of
// one Python write loop come tens of microseconds apart, and a wake through the event loop costs more than that.
const LINGER_MS = 0.25;
export const MAX_CHUNK = 1 << 20; // file bytes per call, either way

export function makeFileChannel(bytes: number = CHANNEL_BYTES): SharedArrayBuffer {
  return new SharedArrayBuffer(CTRL + bytes);
}

export interface Message {
  json: unknown;
  payload: Uint8Array;
}

/** Write a message into the channel's area (`areaBytes` of `buffer` from CTRL); its size. */
function put(buffer: SharedArrayBuffer, areaBytes: number, json: unknown, payload?: Uint8Array): number {
  const text = encoder.encode(stringify(json));
  const size = 4 + text.length + (payload?.length ?? 0);
  if (size > areaBytes) throw new RangeError(`a file call of ${size} bytes does not fit the channel`);
  const head = new Uint8Array(4);
  new DataView(head.buffer).setUint32(0, text.length);
  copyIn(buffer, CTRL, head);
  copyIn(buffer, CTRL + 4, text);
  if (payload) copyIn(buffer, CTRL + 4 + text.length, payload);
  return size;
}

/** Parse a message copied out of the channel; throws on anything malformed. */
function take(bytes: Uint8Array): Message {
  if (bytes.length < 4) throw new RangeError("a message shorter than its header");
  const length = new DataView(bytes.buffer, bytes.byteOffset).getUint32(0);
  if (length > bytes.length - 4) throw new RangeError("a message whose JSON overruns it");
  return { json: parse(decoder.decode(bytes.subarray(4, 4 + length))), payload: bytes.subarray(4 + length) };
}

/** The worker's side: one call at a time, blocking until the answer is in. */
export class FileClient {
  private ctrl: Int32Array;
  private areaBytes: number;
  private number = 0;

  constructor(private readonly sab: SharedArrayBuffer) {
    this.ctrl = new Int32Array(sab, 0, 4);
    this.areaBytes = sab.byteLength - CTRL;
  }

  call(json: unknown, payload?: Uint8Array): Message {
    store(this.ctrl, REQUEST_LENGTH, put(this.sab, this.areaBytes, json, payload));
    const n = (this.number = (this.number + 1) | 0);
    store(this.ctrl, REQUEST, n);
    notify(this.ctrl, REQUEST);
    for (;;) {
      const answered = load(this.ctrl, ANSWER);
      if (answered === n) break;
      wait(this.ctrl, ANSWER, answered, 1000);
    }
    const length = Math.min(Math.max(load(this.ctrl, ANSWER_LENGTH), 0), this.areaBytes);
    return take(copyOut(this.sab, CTRL, length));
  }
}

export type Handler = (request: Message) => Promise<{ json: unknown; payload?: Uint8Array }>;

/** The supervisor's side: serves calls for as long as the sandbox lives. */
export class FileServer {
  private ctrl: Int32Array;
  private areaBytes: number;

  constructor(private readonly sab: SharedArrayBuffer) {
    this.ctrl = new Int32Array(sab, 0, 4);
    this.areaBytes = sab.byteLength - CTRL;
  }

  async serve(handle: Handler): Promise<never> {
    let seen = load(this.ctrl, REQUEST);
    let lingering = false;
    for (;;) {
      if (lingering) {
        lingering = wait(this.ctrl, REQUEST, seen, LINGER_MS) !== "timed-out";
        if (!lingering) continue;
      } else {
        const waiting = waitAsync(this.ctrl, REQUEST, seen);
        if (waiting.async) await waiting.value;
      }
      const n = load(this.ctrl, REQUEST);
      if (n === seen) continue;
      seen = n;
      lingering = true;
      const length = Math.min(Math.max(load(this.ctrl, REQUEST_LENGTH), 0), this.areaBytes);
      let answer: { json: unknown; payload?: Uint8Array };
      try {
        answer = await handle(take(copyOut(this.sab, CTRL, length))); // a copy: the worker cannot change it under us
      } catch (err) {
        answer = { json: { code: "EINVAL", message: `a malformed file call (${String(err).slice(0, 200)})` } };
      }
      let size: number;
      try {
        size = put(this.sab, this.areaBytes, answer.json, answer.payload);
      } catch (err) {
        size = put(this.sab, this.areaBytes, {
          code: "EIO",
          message: `the answer did not fit the channel (${String(err)})`,
        });
      }
      store(this.ctrl, ANSWER_LENGTH, size);
      store(this.ctrl, ANSWER, n);
      notify(this.ctrl, ANSWER);
    }
  }
}
