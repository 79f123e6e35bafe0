import assert from "node:assert/strict";
import { encodeFrame, type Frame, FrameError, FrameParser, RecordFramer } from "./framing.ts";
import { GUEST_EVENT, HOST_EVENT, REPLY, REQUEST, STDERR, STDOUT } from "./protocol.ts";
import { MORE } from "./ring.ts";

const text = (s: string) => new TextEncoder().encode(s);
const readable = (frames: Frame[]) => frames.map((f) => [f.kind, f.id, new TextDecoder().decode(f.payload)]);

Deno.test("encodeFrame: [length u32][kind u8][id u32][payload], big-endian, length counting kind and id", () => {
  const cases: [kind: number, id: number, payload: string, bytes: number[]][] = [
    [REPLY, 1, "", [0, 0, 0, 5, REPLY, 0, 0, 0, 1]],
    [STDOUT, 0x01020304, "hi", [0, 0, 0, 7, STDOUT, 1, 2, 3, 4, 0x68, 0x69]],
    [HOST_EVENT, 0xffffffff, "x", [0, 0, 0, 6, HOST_EVENT, 255, 255, 255, 255, 0x78]],
    [HOST_EVENT, -1, "", [0, 0, 0, 5, HOST_EVENT, 255, 255, 255, 255]], // ids are taken as u32
  ];
  for (const [kind, id, payload, bytes] of cases) {
    assert.deepEqual([...encodeFrame(kind, id, text(payload))], bytes);
  }
});

/** Push the chunks one by one; the frames they gave, and the error that ended them, if any. */
function parse(max: number, chunks: Uint8Array[]): { frames: Frame[]; error?: unknown } {
  const parser = new FrameParser(max);
  const frames: Frame[] = [];
  try {
    for (const chunk of chunks) for (const frame of parser.push(chunk)) frames.push(frame); // one at a time
  } catch (error) {
    return { frames, error };
  }
  return { frames };
}

const header = (length: number, kind = REQUEST, id = 1) => {
  const bytes = new Uint8Array(9);
  new DataView(bytes.buffer).setUint32(0, length);
  bytes[4] = kind;
  new DataView(bytes.buffer).setUint32(5, id);
  return bytes;
};
const join = (...parts: Uint8Array[]) => new Uint8Array(parts.flatMap((p) => [...p]));
const one = encodeFrame(REQUEST, 3, text('{"op":"execute"}'));
const two = encodeFrame(REQUEST, 4, text("{}"));
const empty = encodeFrame(REQUEST, 5, new Uint8Array(0));
const bytewise = (bytes: Uint8Array) => [...bytes].map((b) => Uint8Array.of(b));

Deno.test("FrameParser: frames however the stream is cut; lengths out of bounds end it", () => {
  const cases: { name: string; max?: number; chunks: Uint8Array[]; frames: (string | number)[][]; error?: true }[] = [
    { name: "one frame", chunks: [one], frames: [[REQUEST, 3, '{"op":"execute"}']] },
    {
      name: "two in one chunk",
      chunks: [join(one, two)],
      frames: [[REQUEST, 3, '{"op":"execute"}'], [REQUEST, 4, "{}"]],
    },
    { name: "byte by byte", chunks: bytewise(join(two, empty)), frames: [[REQUEST, 4, "{}"], [REQUEST, 5, ""]] },
    { name: "cut in the header", chunks: [two.subarray(0, 6), two.subarray(6)], frames: [[REQUEST, 4, "{}"]] },
    {
      name: "cut in the payload",
      chunks: [one.subarray(0, 12), one.subarray(12)],
      frames: [[REQUEST, 3, '{"op":"execute"}']],
    },
    { name: "incomplete: nothing yet", chunks: [one.subarray(0, one.length - 1)], frames: [] },
    { name: "empty payload", chunks: [empty], frames: [[REQUEST, 5, ""]] },
    { name: "no bytes", chunks: [new Uint8Array(0)], frames: [] },
    { name: "length = max", max: 7, chunks: [two], frames: [[REQUEST, 4, "{}"]] },
    { name: "length = max + 1", max: 6, chunks: [two], frames: [], error: true },
    { name: "too large, known from the header alone", max: 100, chunks: [header(101)], frames: [], error: true },
    { name: "length 0xffffffff", chunks: [header(0xffffffff)], frames: [], error: true },
    { name: "length 4: shorter than kind and id", chunks: [header(4)], frames: [], error: true },
    { name: "length 0", chunks: [header(0)], frames: [], error: true },
    { name: "frames before a bad one", chunks: [join(two, header(0))], frames: [[REQUEST, 4, "{}"]], error: true },
  ];
  for (const { name, max = 1 << 20, chunks, frames, error } of cases) {
    const got = parse(max, chunks);
    assert.deepEqual(readable(got.frames), frames, name);
    if (error) assert.ok(got.error instanceof FrameError, `${name}: ${got.error}`);
    else assert.equal(got.error, undefined, name);
  }
});

Deno.test("FrameParser: the chunk is copied, so the reader may reuse its buffer", () => {
  const parser = new FrameParser(100);
  const chunk = new Uint8Array(32);
  chunk.set(two.subarray(0, 5));
  assert.deepEqual([...parser.push(chunk.subarray(0, 5))], []);
  chunk.fill(0xee).set(two.subarray(5));
  assert.deepEqual(readable([...parser.push(chunk.subarray(0, two.length - 5))]), [[REQUEST, 4, "{}"]]);
});

type Rec = [kind: number, id: number, payload: string];
const records = (recs: Rec[]) => recs.map(([kind, id, payload]) => ({ kind, id, payload: text(payload) }));

Deno.test("RecordFramer: streams coalesce, events join their MORE records, oversized events are dropped whole", () => {
  const cases: { name: string; max?: number; drains: Rec[][]; frames: Rec[][] }[] = [
    {
      name: "a stream's chunks for one request make one frame",
      drains: [[[STDOUT, 1, "a"], [STDOUT | MORE, 1, "b"], [STDOUT, 1, "c"]]],
      frames: [[[STDOUT, 1, "abc"]]],
    },
    {
      name: "another stream or request starts a frame",
      drains: [[[STDOUT, 1, "a"], [STDERR, 1, "b"], [STDERR, 2, "c"], [STDOUT, 1, "d"]]],
      frames: [[[STDOUT, 1, "a"], [STDERR, 1, "b"], [STDERR, 2, "c"], [STDOUT, 1, "d"]]],
    },
    {
      name: "empty stream records add nothing, and alone make no frame",
      drains: [[[STDOUT, 1, ""], [STDOUT, 1, "a"], [STDOUT, 1, ""]], [[STDERR, 2, ""], [STDERR, 2, ""]]],
      frames: [[[STDOUT, 1, "a"]], []],
    },
    {
      name: "streams are not held across drains",
      drains: [[[STDOUT, 1, "a"]], [[STDOUT, 1, "b"]]],
      frames: [[[STDOUT, 1, "a"]], [[STDOUT, 1, "b"]]],
    },
    {
      name: "an event's MORE records make one frame, in order with the streams",
      drains: [[[STDOUT, 1, "x"], [GUEST_EVENT | MORE, 1, "{"], [GUEST_EVENT | MORE, 1, "}"], [GUEST_EVENT, 1, ""]]],
      frames: [[[STDOUT, 1, "x"], [GUEST_EVENT, 1, "{}"]]],
    },
    {
      name: "an event continued in the next drain",
      drains: [[[GUEST_EVENT | MORE, 1, "[1,"]], [[GUEST_EVENT, 1, "2]"], [STDOUT, 1, "y"]]],
      frames: [[], [[GUEST_EVENT, 1, "[1,2]"], [STDOUT, 1, "y"]]],
    },
    { name: "an empty event", drains: [[[GUEST_EVENT, 3, ""]]], frames: [[[GUEST_EVENT, 3, ""]]] },
    {
      name: "an event of exactly maxEventBytes",
      max: 4,
      drains: [[[GUEST_EVENT | MORE, 1, "ab"], [GUEST_EVENT, 1, "cd"]]],
      frames: [[[GUEST_EVENT, 1, "abcd"]]],
    },
    {
      name: "one byte more is dropped whole; the next event is not",
      max: 4,
      drains: [[[GUEST_EVENT | MORE, 1, "ab"], [GUEST_EVENT | MORE, 1, "cd"]], [[GUEST_EVENT, 1, "e"], [
        GUEST_EVENT,
        1,
        "ok",
      ]]],
      frames: [[], [[GUEST_EVENT, 1, "ok"]]],
    },
    {
      name: "kinds the worker may not write are dropped (and end a stream's frame)",
      drains: [[[STDOUT, 1, "a"], [REPLY, 1, "{}"], [HOST_EVENT, 0, "{}"], [REQUEST, 1, "{}"], [99, 1, ""], [
        STDOUT,
        1,
        "b",
      ]]],
      frames: [[[STDOUT, 1, "a"], [STDOUT, 1, "b"]]],
    },
  ];
  for (const { name, max = 1 << 20, drains, frames } of cases) {
    const framer = new RecordFramer(max);
    assert.deepEqual(drains.map((d) => readable(framer.frames(records(d)))), frames, name);
  }
});
