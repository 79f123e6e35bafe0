import assert from "node:assert/strict";
import { FileService } from "./file_service.ts";
import protocol from "./protocol.json" with { type: "json" };

const UNKNOWN = { code: "EINVAL", message: "an unknown file call" };

Deno.test("the file service serves every file call protocol.json declares, and no other name", async () => {
  const service = new FileService([]); // no mounts: each call is refused by its own rules, not as unknown
  const call = (op: unknown) =>
    service.handle({
      json: { op, mount: 0, path: ["x"], handle: 1, position: 0, length: 1 },
      payload: new Uint8Array(),
    });
  for (const op of Object.keys(protocol.fileOps)) {
    const { json } = await call(op);
    assert.notDeepEqual(json, UNKNOWN, op);
    assert.match((json as { code: string }).code, /^E[A-Z]+$/, op);
  }
  for (const op of ["link", "READ", "__proto__", "constructor", "toString", "hasOwnProperty", 3, null, ["read"]]) {
    assert.deepEqual((await call(op)).json, UNKNOWN, String(op));
  }
});
