import assert from "node:assert/strict";
import {
  badPath,
  DATA_SUFFIXES,
  fold,
  hostWritable,
  isPartialName,
  OPT_IN_SUFFIXES,
  partialName,
  safeMode,
  suffixAllowed,
} from "./write_policy.ts";

const ALLOWED: string[][] = [
  ["results.csv"],
  ["X.CSV"],
  ["data", "2024", "run_1 final.parquet"],
  ["plots", "fig-1.png"],
  ["out", "log.jsonl"],
  ["report (v2).pdf"],
  ["arr.npy"],
];

const REFUSED: string[][] = [
  ["HEAD"],
  ["config"],
  ["objects", "ab", "cdef"],
  ["refs", "heads", "main"],
  [".git", "config"],
  [".pdbrc"],
  ["helpers.py"],
  ["helpers.cpython-311-x86_64-linux-gnu.so"],
  ["helpers", "__init__.py"],
  ["pytest.toml"],
  [".pylintrc"],
  ["mypy.ini"],
  [".flake8"],
  ["Cargo.toml"],
  ["tests", "test_x.py"],
  ["evil-1.0.dist-info", "entry_points.txt"],
  ["evil.egg-info", "PKG-INFO.txt"],
  [".ipynb_checkpoints", "a-checkpoint.csv"],
  ["package.json"],
  ["Package.JSON"],
  ["deno.json"],
  ["tsconfig.json"],
  ["tsconfig.build.json"],
  ["composer.json"],
  ["CMakeLists.txt"],
  ["requirements.txt"],
  ["sub", "dev-requirements.txt"],
  ["jupyter_server_config.json"],
  ["AGENTS.md"],
  ["x.pth"],
  ["x.pkl"],
  ["x.h5"],
  ["x.npz"],
  ["x.sh"],
  ["x.html"],
  ["x.svg"],
  ["x.ipynb"],
  ["x.csv."],
  ["x.csv "],
  ["x.c\u200bsv"],
  ["x\u200b.csv"],
  ["e\u0301.csv"], // not NFC
  ["a.b", "x.csv"],
  [".hidden", "x.csv"],
  ["sub ", "x.csv"],
  ["sub", "x.csv"], // a plain name: the control below
];

Deno.test("only plain data files of the table reach the host", () => {
  for (const parts of ALLOWED) assert.equal(hostWritable(parts, false), null, parts.join("/"));
  for (const parts of REFUSED.slice(0, -1)) {
    assert.equal(typeof hostWritable(parts, false), "string", JSON.stringify(parts));
  }
  assert.equal(hostWritable(REFUSED[REFUSED.length - 1], false), null);
});

Deno.test("json and txt reach the host only from a mount whose suffixes name them, tool names never", () => {
  for (const name of ["notes.json", "résumé.txt", "CMakeCache.txt", "opencode.json", "base.txt"]) {
    const parts = name === "base.txt" ? ["requirements", name] : [name];
    assert.match(hostWritable(parts, false) ?? "", /not host data by default.*"suffixes"/, name);
    assert.equal(hostWritable(parts, false, "data", [".json", ".txt"]), null, name);
  }
  assert.equal(typeof hostWritable(["package.json"], false, "data", [".json"]), "string");
  assert.equal(typeof hostWritable(["requirements.txt"], false, "data", [".txt"]), "string");
  // A mount's suffixes that leave .json out: the file service's suffix refusal, not the layer.
  assert.equal(hostWritable(["notes.json"], false, "data", [".csv"]), null);
  assert.ok(OPT_IN_SUFFIXES.includes(".json") && OPT_IN_SUFFIXES.includes(".txt"));
  assert.ok(!DATA_SUFFIXES.includes(".json") && !DATA_SUFFIXES.includes(".txt"));
});

Deno.test("folder names are plain: no dots, no dot-names, no outer spaces", () => {
  for (const ok of [["data"], ["data", "run 2"], ["a_b-c"], ["__pycache__"]]) {
    assert.equal(hostWritable(ok, true), null);
  }
  for (const bad of [[".git"], ["x.dist-info"], ["x.egg-info"], ["a "], [" a"], ["a\u200b"], ["-x"]]) {
    assert.equal(typeof hostWritable(bad, true), "string", JSON.stringify(bad));
  }
});

Deno.test("host_writes 'any' lets every name through; the table names its suffixes", () => {
  assert.equal(hostWritable([".git", "config"], false, "any"), null);
  assert.ok(DATA_SUFFIXES.includes(".csv") && !DATA_SUFFIXES.includes(".py") && !DATA_SUFFIXES.includes(".pkl"));
});

Deno.test("paths are plain names only", () => {
  assert.deepEqual(badPath(["a", "b.txt"]), null);
  for (const bad of [[""], ["."], [".."], ["a/b"], ["a\0"], "a", [1], Array(300).fill("x")]) {
    assert.deepEqual(typeof badPath(bad), "string", JSON.stringify(bad).slice(0, 40));
  }
});

Deno.test("modes lose setuid, group and world write and (files) execute", () => {
  assert.deepEqual(safeMode(0o6777, false), 0o644);
  assert.deepEqual(safeMode(0o755, false), 0o644);
  assert.deepEqual(safeMode(0o1777, true), 0o755);
  assert.deepEqual(safeMode(0o700, true), 0o700);
});

Deno.test("suffixes and folding", () => {
  assert.deepEqual(suffixAllowed("A.CSV", [".csv"]), true);
  assert.deepEqual(suffixAllowed("a.exe", [".csv"]), false);
  assert.deepEqual(suffixAllowed("anything", []), true);
  assert.deepEqual(fold(".Git.. "), ".git");
});

Deno.test("a file written aside gets a data name of its own suffix that the policy lets through", () => {
  const beside = partialName(["runs", "results.csv"], "lx2k-0");
  assert.deepEqual(beside, ["runs", "results.sandbox-partial-lx2k-0.csv"]);
  assert.equal(hostWritable(beside, false), null);
  assert.ok(isPartialName(beside[1]));
  // A name too long (or one whose stem the policy would refuse beside it) gets the short form, still of its suffix.
  const long = partialName([`${"a".repeat(200)}.png`], "1-2");
  assert.deepEqual(long, ["sandbox-partial-1-2.png"]);
  assert.equal(hostWritable(long, false), null);
  for (const name of ["results.csv", "sandbox-partial.csv", "x.sandbox-partial-1.csv", "sandbox-partial-1-2"]) {
    assert.ok(!isPartialName(name), name);
  }
});
