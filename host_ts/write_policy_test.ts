import assert from "node:assert/strict";
import { badPath, fold, guardedComponent, safeMode, suffixAllowed } from "./write_policy.ts";

Deno.test("tool files are found at any depth, case and look-alikes folded", () => {
  const cases: [string[], string | null][] = [
    [[".git", "config"], ".git"],
    [["sub", "deeper", ".git"], ".git"],
    [[".GIT", "config"], ".GIT"],
    [[".git\u200c", "config"], ".git\u200c"],
    [["Makefile."], "Makefile."],
    [["tests", "conftest.py"], "conftest.py"],
    [["lib", "evil.pth"], "evil.pth"],
    [["__pycache__", "m.cpython-311.pyc"], "__pycache__"],
    [["x", "jupyter_server_config.py"], "jupyter_server_config.py"],
    [["data", "results.csv"], null],
    [["gitignore-notes.txt"], null],
    [["my.git.txt"], null],
  ];
  for (const [parts, hit] of cases) assert.deepEqual(guardedComponent(parts)?.name ?? null, hit, parts.join("/"));
});

Deno.test("a mount may lift a rule by name, by file name, or all of them", () => {
  assert.deepEqual(guardedComponent(["Makefile"], ["build"]), null);
  assert.deepEqual(guardedComponent(["Makefile"], ["makefile"]), null);
  assert.deepEqual(guardedComponent([".git", "config"], ["*"]), null);
  assert.deepEqual(guardedComponent(["conftest.py"], ["build"])?.rule.rule, "python");
});

Deno.test("paths are plain names only", () => {
  assert.deepEqual(badPath(["a", "b.txt"]), null);
  for (const bad of [[""], ["."], [".."], ["a/b"], ["a\0"], "a", [1], Array(300).fill("x")]) {
    assert.deepEqual(typeof badPath(bad), "string", JSON.stringify(bad).slice(0, 40));
  }
});

Deno.test("modes lose setuid, world-write and (files) execute", () => {
  assert.deepEqual(safeMode(0o6777, false), 0o664);
  assert.deepEqual(safeMode(0o755, false), 0o644);
  assert.deepEqual(safeMode(0o1777, true), 0o775);
  assert.deepEqual(safeMode(0o700, true), 0o700);
});

Deno.test("suffixes and folding", () => {
  assert.deepEqual(suffixAllowed("A.CSV", [".csv"]), true);
  assert.deepEqual(suffixAllowed("a.exe", [".csv"]), false);
  assert.deepEqual(suffixAllowed("anything", []), true);
  assert.deepEqual(fold(".Git.. "), ".git");
});
