import assert from "node:assert/strict";
import {
  CTRL_INTS,
  HEADER_BYTES,
  makeRingBuffer,
  MORE,
  RingError,
  RingReader,
  type RingRecord,
  RingWriter,
  TEXT_CHUNK_BYTES,
} from "./ring.ts";

const STREAM = 1;

/** A ring of `size` bytes whose write and read counters both start at `start`. */
function ring(size: number, start = 0) {
  const sab = makeRingBuffer(size);
  const ctrl = new Int32Array(sab, 0, CTRL_INTS);
  ctrl[0] = ctrl[1] = start | 0; // write counter, read counter
  return { sab, ctrl, writer: new RingWriter(sab), reader: new RingReader(sab) };
}

const pattern = (n: number, seed: number) => Uint8Array.from({ length: n }, (_, i) => (seed + i * 7) & 0xff);
const shape = (recs: RingRecord[]) => recs.map((r) => [r.kind, r.id, r.payload.length]);
const joined = (recs: RingRecord[]) => new Uint8Array(recs.flatMap((r) => [...r.payload]));

Deno.test("makeRingBuffer: sizes are powers of two", () => {
  assert.equal(makeRingBuffer(64).byteLength, CTRL_INTS * 4 + 64);
  assert.throws(() => makeRingBuffer(96), /power of two/);
});

Deno.test("RingWriter -> RingReader: records split at maxChunk, MORE on all but the last, across the ring's end", () => {
  // A 64-byte ring: maxChunk = 64 / 4 - 9 = 7 bytes of payload a record, 16 bytes with its header.
  const cases: { name: string; start?: number; payloads: number[]; records: [number, number][] }[] = [
    { name: "empty payload: one empty record", payloads: [0], records: [[STREAM, 0]] },
    { name: "one byte", payloads: [1], records: [[STREAM, 1]] },
    { name: "exactly maxChunk", payloads: [7], records: [[STREAM, 7]] },
    { name: "maxChunk + 1", payloads: [8], records: [[STREAM | MORE, 7], [STREAM, 1]] },
    { name: "three chunks", payloads: [15], records: [[STREAM | MORE, 7], [STREAM | MORE, 7], [STREAM, 1]] },
    { name: "the ring full to the byte", payloads: [7, 7, 7, 7], records: Array(4).fill([STREAM, 7]) },
    { name: "header across the end", start: 60, payloads: [7, 3], records: [[STREAM, 7], [STREAM, 3]] },
    { name: "payload across the end", start: 50, payloads: [7], records: [[STREAM, 7]] },
    {
      name: "counters wrap at 2^32",
      start: 0xfffffff8,
      payloads: [7, 7, 0],
      records: [[STREAM, 7], [STREAM, 7], [STREAM, 0]],
    },
  ];
  for (const { name, start = 0, payloads, records } of cases) {
    const { writer, reader } = ring(64, start);
    assert.equal(writer.maxChunk, 7);
    const sent = payloads.map((n, i) => pattern(n, i));
    for (const p of sent) writer.writeBytes(STREAM, 42, p);
    const got = reader.drain();
    assert.deepEqual(shape(got), records.map(([kind, length]) => [kind, 42, length]), name);
    assert.deepEqual(joined(got), new Uint8Array(sent.flatMap((p) => [...p])), name);
    assert.deepEqual(reader.drain(), [], `${name}: drained once`);
  }
});

Deno.test("RingWriter.writeText: UTF-8, split into records of whole characters", () => {
  const { writer, reader } = ring(64);
  const text = "é€😀"; // 2 + 3 + 4 bytes: 9 > maxChunk (7)
  writer.writeText(STREAM, 1, text);
  const got = reader.drain();
  assert.deepEqual(shape(got), [[STREAM | MORE, 1, 5], [STREAM, 1, 4]]);
  assert.equal(new TextDecoder().decode(joined(got)), text);
  writer.writeText(STREAM, 2, "");
  assert.deepEqual(shape(reader.drain()), [[STREAM, 2, 0]], "an empty text: one empty record");
});

Deno.test("RingWriter.writeText: a long text goes in pieces of TEXT_CHUNK_BYTES, through a buffer that does not grow", () => {
  const { writer, reader } = ring(1 << 22); // maxChunk ~1 MiB: the pieces are the text buffer's size
  const text = "x".repeat(3 * TEXT_CHUNK_BYTES + 100) + "é";
  writer.writeText(STREAM, 3, text);
  const got = reader.drain();
  const more = STREAM | MORE;
  assert.deepEqual(shape(got), [[more, 3, TEXT_CHUNK_BYTES], [more, 3, TEXT_CHUNK_BYTES], [more, 3, TEXT_CHUNK_BYTES], [
    STREAM,
    3,
    102,
  ]]);
  assert.equal(new TextDecoder().decode(joined(got)), text);
  const scratch = (writer as unknown as { scratch: Uint8Array }).scratch;
  assert.equal(scratch.length, TEXT_CHUNK_BYTES);
});

Deno.test("RingReader.sequence counts records; drain frees the space", () => {
  const { writer, reader } = ring(64);
  const seq = reader.sequence();
  for (let round = 0; round < 3; round++) { // four full rings' worth in all: only possible if drain frees them
    for (let i = 0; i < 4; i++) writer.writeBytes(STREAM, round, pattern(7, i));
    assert.equal(reader.drain().length, 4);
  }
  assert.equal(reader.sequence() - seq, 12);
});

Deno.test("RingReader.drain(maxBytes): whole records until the slice is reached; the rest waits for the next", () => {
  const { writer, reader } = ring(256, 250); // the counters near the ring's end: headers are read across it
  for (let i = 0; i < 5; i++) writer.writeBytes(STREAM, i, pattern(11, i)); // 20 bytes a record
  assert.equal(reader.pending(), true);
  assert.deepEqual(shape(reader.drain(21)), [[STREAM, 0, 11], [STREAM, 1, 11]], "the record that crosses 21 is whole");
  const rest = reader.drain(1000);
  assert.deepEqual(shape(rest), [[STREAM, 2, 11], [STREAM, 3, 11], [STREAM, 4, 11]]);
  assert.deepEqual([...rest[2].payload], [...pattern(11, 4)]);
  assert.equal(reader.pending(), false);
});

Deno.test("RingReader.drain: empty records cost no buffer of their own (a ring full of them drains at once)", () => {
  const { writer, reader } = ring(1 << 12);
  for (let i = 0; i < 400; i++) writer.writeText(STREAM, 7, "");
  const got = reader.drain();
  assert.equal(got.length, 400);
  assert.equal(new Set(got.map((r) => r.payload)).size, 1, "one shared empty payload");
  assert.equal(got[0].payload.length, 0);
});

Deno.test("RingReader.drain: a ring RingWriter cannot have written is refused, and nothing is freed", () => {
  const cases: { name: string; written: number; header?: [kind: number, length: number] }[] = [
    { name: "more written than the ring holds", written: 65 },
    { name: "less than a header", written: HEADER_BYTES - 1 },
    { name: "a length past what was written", written: HEADER_BYTES + 4, header: [STREAM, 5] },
    { name: "a length of 2^32 - 1", written: HEADER_BYTES + 4, header: [STREAM, 0xffffffff] },
  ];
  for (const { name, written, header } of cases) {
    const { sab, ctrl, reader } = ring(64, 100);
    if (header) {
      const view = new DataView(sab, CTRL_INTS * 4);
      view.setUint8(100 % 64, header[0]);
      view.setUint32((100 % 64) + 5, header[1]);
    }
    ctrl[0] = 100 + written;
    assert.throws(() => reader.drain(), RingError, name);
    assert.equal(ctrl[1], 100, `${name}: nothing freed`);
  }
});

Deno.test("RingWriter waits for room: a payload many times the ring, written from another thread", async () => {
  const ringUrl = new URL("./ring.ts", import.meta.url).href;
  const source = `import { RingWriter } from ${JSON.stringify(ringUrl)};
self.onmessage = (e) => new RingWriter(e.data.sab).writeBytes(${STREAM}, 5, e.data.payload);`;
  const worker = new Worker(URL.createObjectURL(new Blob([source])), { type: "module" });
  try {
    const { sab, reader } = ring(64);
    const payload = pattern(10_000, 3);
    worker.postMessage({ sab, payload });
    const got: RingRecord[] = [];
    for (;;) {
      const seq = reader.sequence();
      got.push(...reader.drain());
      if (got.length > 0 && !(got[got.length - 1].kind & MORE)) break;
      await reader.waitForData(seq);
    }
    assert.equal(got.length, Math.ceil(10_000 / 7));
    assert.deepEqual(joined(got), payload);
  } finally {
    worker.terminate();
  }
});

Deno.test("a writer that never pauses leaves the reader's event loop its turns (its timers, the kernel's socket)", async () => {
  const ringUrl = new URL("./ring.ts", import.meta.url).href;
  // Empty records, written for a second without pause: they frame to nothing, so no socket write paces the reader.
  const source = `import { RingWriter } from ${JSON.stringify(ringUrl)};
self.onmessage = (e) => {
  const writer = new RingWriter(e.data.sab), done = new Int32Array(e.data.done);
  const end = performance.now() + 1000;
  while (performance.now() < end) writer.writeText(${STREAM}, 5, "");
  Atomics.store(done, 0, 1);
  writer.writeText(${STREAM}, 5, "the end");
};`;
  const worker = new Worker(URL.createObjectURL(new Blob([source])), { type: "module" });
  try {
    const { sab, reader } = ring(1 << 20);
    const done = new Int32Array(new SharedArrayBuffer(4));
    worker.postMessage({ sab, done: done.buffer });
    await reader.waitForData(reader.sequence()); // the writer has begun
    let firedWhileWriting: boolean | undefined;
    setTimeout(() => (firedWhileWriting = Atomics.load(done, 0) === 0), 10);
    let ended = false;
    while (firedWhileWriting === undefined && !ended) {
      const seq = reader.sequence();
      ended = reader.drain().some((r) => r.payload.length > 0);
      if (!ended) await reader.waitForData(seq);
    }
    assert.equal(firedWhileWriting, true, "the timer waited until the writer stopped");
  } finally {
    worker.terminate();
  }
});
