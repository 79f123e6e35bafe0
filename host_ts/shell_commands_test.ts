import assert from "node:assert/strict";
import { COMMAND_FOLDERS, commandFile, installCommandFiles, SHELL_COMMANDS } from "./shell_commands.ts";
import { LEFT_OUT, OWN_COMMANDS } from "./shell.ts";

Deno.test("shell_commands.json lists just-bash's commands the shell keeps, and its own", async () => {
  const { getCommandNames } = await import("just-bash");
  const expected = [...getCommandNames().filter((n) => !LEFT_OUT.has(n)), ...OWN_COMMANDS].sort();
  assert.deepEqual([...SHELL_COMMANDS].sort(), expected);
});

Deno.test("installCommandFiles: every command in each folder, read-only and runnable", () => {
  const files = new Map<string, string>(), modes = new Map<string, number>(), folders: string[] = [];
  installCommandFiles({
    mkdirTree: (p) => folders.push(p),
    writeFile: (p, d) => files.set(p, d),
    chmod: (p, m) => modes.set(p, m),
  });
  assert.deepEqual(folders, [...COMMAND_FOLDERS]);
  assert.equal(files.size, 2 * SHELL_COMMANDS.length);
  assert.equal(files.get("/usr/bin/grep"), commandFile("grep"));
  assert.equal(modes.get("/bin/python3"), 0o555);
  assert.equal(modes.get("/usr/bin"), 0o555);
});
