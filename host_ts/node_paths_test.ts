import assert from "node:assert/strict";
import process from "node:process";
import { answerAsBrowser, BROWSER_UID, refuseSockets } from "./node_paths.ts";

// deno test runs this without permissions, as the worker runs: Node's uid and environment are refused here.
Deno.test("answerAsBrowser: uid 0 and an empty environment, without sys or env permission", () => {
  assert.throws(() => process.getuid!(), Deno.errors.NotCapable);
  answerAsBrowser();
  assert.equal(process.getuid!(), BROWSER_UID);
  assert.equal(process.env.WS_NO_BUFFER_UTIL, undefined);
  assert.equal("HOME" in process.env, false);
  assert.deepEqual(Object.keys(process.env), []);
});

class ErrnoError extends Error {
  constructor(readonly errno: number) {
    super(`errno ${errno}`);
  }
}

Deno.test("refuseSockets: no peer is made (EHOSTUNREACH) and nothing listens (EOPNOTSUPP)", () => {
  const ops = { createPeer: () => "a ws client" as unknown, listen: () => "a ws server" as unknown };
  const ERRNO_CODES = { EHOSTUNREACH: 23, EOPNOTSUPP: 138 };
  refuseSockets({ SOCKFS: { websocket_sock_ops: ops }, FS: { ErrnoError }, ERRNO_CODES });
  assert.throws(() => ops.createPeer(), (e: unknown) => e instanceof ErrnoError && e.errno === 23);
  assert.throws(() => ops.listen(), (e: unknown) => e instanceof ErrnoError && e.errno === 138);
  assert.throws(() => refuseSockets({ FS: { ErrnoError }, ERRNO_CODES }), /SOCKFS is missing/);
});
