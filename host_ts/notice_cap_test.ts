import assert from "node:assert/strict";
import { noticeCap, NOTICES_PER_CELL } from "./notice_cap.ts";

Deno.test("notices: a few per cell, then one line counting the rest", () => {
  const out: string[] = [];
  let cell = 1;
  const cap = noticeCap((t) => out.push(t), () => cell);
  for (let i = 0; i < 100; i++) cap.say(`n${i}\n`);
  cap.end();
  assert.equal(out.length, NOTICES_PER_CELL + 1);
  assert.match(out[out.length - 1], /and 95 more files stayed inside the sandbox/);
  cell = 2;
  out.length = 0;
  cap.say("a\n");
  cap.end();
  assert.deepEqual(out, ["a\n"]);
});
