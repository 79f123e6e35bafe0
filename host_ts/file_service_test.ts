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

const mount = (hostWrites: "data" | "any") => ({
  host: "/nonexistent-sbk-host-folder",
  guest: "/out",
  writable: true,
  suffixes: [],
  maxFileBytes: null,
  maxTotalBytes: null,
  maxGrowthBytes: 1 << 30,
  hostWrites,
  hidden: [],
});

Deno.test("the file service refuses, before touching the host, every change that is not a plain data file", async () => {
  const service = new FileService([mount("data")]);
  const calls: Record<string, unknown>[] = [
    { op: "mknod", path: ["HEAD"], mode: 0o644, dir: false },
    { op: "mknod", path: ["config"], mode: 0o644, dir: false },
    { op: "mknod", path: [".git"], mode: 0o755, dir: true },
    { op: "mknod", path: [".git", "config"], mode: 0o644, dir: false },
    { op: "mknod", path: ["evil-1.0.dist-info"], mode: 0o755, dir: true },
    { op: "mknod", path: ["x.egg-info", "PKG-INFO.txt"], mode: 0o644, dir: false },
    { op: "mknod", path: [".pdbrc"], mode: 0o644, dir: false },
    { op: "mknod", path: ["helpers.cpython-311-x86_64-linux-gnu.so"], mode: 0o644, dir: false },
    { op: "mknod", path: ["helpers", "__init__.py"], mode: 0o644, dir: false },
    { op: "mknod", path: ["package.json"], mode: 0o644, dir: false },
    { op: "mknod", path: ["x.csv\u200b"], mode: 0o644, dir: false },
    { op: "open", path: ["helpers.py"], flags: 1 },
    { op: "unlink", path: ["helpers.py"] },
    { op: "rmdir", path: [".ipynb_checkpoints"] },
  ];
  for (const call of calls) {
    const { json } = await service.handle({ json: { mount: 0, ...call }, payload: new Uint8Array() });
    const answer = json as { code: string; message?: string };
    assert.equal(answer.code, "EACCES", JSON.stringify(call));
    assert.match(answer.message ?? "", /in the host folder is refused: .*Only plain data files/, JSON.stringify(call));
  }
});

Deno.test("host_writes 'any' lets the name through to the host's own checks", async () => {
  const service = new FileService([mount("any")]);
  const { json } = await service.handle({
    json: { op: "mknod", mount: 0, path: ["HEAD"], mode: 0o644, dir: false },
    payload: new Uint8Array(),
  });
  // Refused by Deno here (this test may touch no file), not by the allowlist.
  assert.doesNotMatch((json as { message?: string }).message ?? "", /Only plain data files/);
});

/** A folder the test may write (test_static_checks.py makes one and grants it): forged calls on real files. */
const FOLDER = Deno.env.get("SBK_FILE_SERVICE_TEST_FOLDER");

Deno.test({
  name: "a forged rename of a file onto itself gives no quota back (F3.3: it gave the file's size each time)",
  ignore: FOLDER === undefined,
  async fn() {
    const service = new FileService([{ ...mount("data"), host: FOLDER!, maxGrowthBytes: 1_000_000 }]);
    const call = async (json: Record<string, unknown>, payload = new Uint8Array()) =>
      (await service.handle({ json: { mount: 0, ...json }, payload })).json as Record<string, unknown>;
    const write = async (name: string) => {
      assert.equal((await call({ op: "mknod", path: [name], mode: 0o644, dir: false })).code, undefined);
      const { handle } = await call({ op: "open", path: [name], flags: 1 }); // O_WRONLY
      const written = await call({ op: "write", handle, position: 0 }, new Uint8Array(600_000));
      await call({ op: "close", handle });
      return written;
    };
    await write("a.csv");
    for (let i = 0; i < 3; i++) {
      assert.equal((await call({ op: "rename", path: ["a.csv"], to: ["a.csv"] })).code, undefined);
    }
    const refused = await write("b.csv");
    assert.match(String(refused.message), /max_growth_bytes/, JSON.stringify(refused));
    assert.equal(Deno.statSync(`${FOLDER}/a.csv`).size, 600_000);
  },
});
