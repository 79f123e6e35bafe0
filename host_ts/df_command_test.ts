import assert from "node:assert/strict";
import { dfTable, dfWith, type DiskUsage, holding, humanSize } from "./df_command.ts";

Deno.test("humanSize rounds up as GNU's df -h does (figures from GNU numfmt --to=iec --round=up)", () => {
  const gnu: [number, string][] = [
    [0, "0"],
    [1023, "1023"],
    [1024, "1.0K"],
    [1025, "1.1K"],
    [10239, "10K"],
    [1048575, "1.0M"],
    [123456789, "118M"],
    [536870912, "512M"],
    [9990000000, "9.4G"],
  ];
  assert.deepEqual(gnu.map(([n]) => [n, humanSize(n)]), gnu);
});

const DISKS: DiskUsage[] = [
  { source: "sandbox", mountedOn: "/", sizeBytes: 512 * 2 ** 20, usedBytes: 123456789 },
  { source: "host", mountedOn: "/work" },
  { source: "host", mountedOn: "/work/data" },
];

Deno.test("the table is GNU's: its columns, widths and alignment (as GNU df prints on this machine)", () => {
  assert.equal(
    dfTable(DISKS.slice(0, 2), true),
    "Filesystem      Size  Used Avail Use% Mounted on\n" +
      "sandbox         512M  118M  395M  23% /\n" +
      "host               -     -     -    - /work\n",
  );
  assert.equal(
    dfTable(DISKS.slice(0, 1), false),
    "Filesystem     1K-blocks   Used Available Use% Mounted on\n" +
      "sandbox           524288 120564    403725  23% /\n",
  );
});

Deno.test("a path is on the file system mounted deepest on its way", () => {
  assert.equal(holding(DISKS, "/work/data/x.csv")?.mountedOn, "/work/data");
  assert.equal(holding(DISKS, "/work/other")?.mountedOn, "/work");
  assert.equal(holding(DISKS, "/workshop")?.mountedOn, "/");
});

Deno.test("df FILE lists the file systems that hold them; a missing one or a bad option fails as GNU's", async () => {
  const df = dfWith(() => DISKS);
  const ctx = {
    cwd: "/work",
    fs: {
      resolvePath: (cwd: string, p: string) => (p.startsWith("/") ? p : `${cwd}/${p}`),
      exists: (p: string) => Promise.resolve(p !== "/work/nope"),
    },
  } as unknown as Parameters<typeof df>[1];
  const one = await df(["-h", "data/x.csv"], ctx);
  assert.deepEqual([one.exitCode, one.stdout.split("\n")[1]], [0, "host               -     -     -    - /work/data"]);
  assert.deepEqual(await df(["nope"], ctx), {
    stdout: "",
    stderr: "df: nope: No such file or directory\n",
    exitCode: 1,
  });
  const bad = await df(["-x"], ctx);
  assert.deepEqual([bad.exitCode, bad.stderr], [
    1,
    "df: invalid option -- 'x'\nTry 'df --help' for more information.\n",
  ]);
});
