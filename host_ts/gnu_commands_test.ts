import assert from "node:assert/strict";
import { gnuCommands, shellQuote } from "./gnu_commands.ts";

/** just-bash with the commands of gnu_commands.ts over its own in-memory file system. */
async function shell() {
  const { Bash, decodeBytesToUtf8, defineCommand } = await import("just-bash");
  const commands = Object.entries(gnuCommands(decodeBytesToUtf8)).map(([name, run]) => defineCommand(name, run));
  const bash = new Bash({ customCommands: commands, defenseInDepth: false });
  return async (script: string) => {
    const { stdout, stderr, exitCode } = await bash.exec(script);
    return { stdout, stderr, exitCode };
  };
}

Deno.test("uniq -c counts seven wide, as GNU's; other uniq runs are just-bash's", async () => {
  const run = await shell();
  assert.equal((await run("printf 'a\\na\\nb\\n' | uniq -c")).stdout, "      2 a\n      1 b\n");
  assert.equal((await run("printf 'a\\nA\\n' | uniq -ci")).stdout, "      2 a\n");
  assert.equal((await run("printf 'a\\na\\nb\\n' | uniq")).stdout, "a\nb\n");
});

Deno.test("xargs -I runs the command once per line, the name replaced in every argument", async () => {
  const run = await shell();
  assert.deepEqual(await run("printf 'one\\n  two words\\n' | xargs -I{} echo x{}y '{}'"), {
    stdout: "xoney one\nxtwo wordsy two words\n",
    stderr: "",
    exitCode: 0,
  });
  assert.equal((await run("printf 'a\\nb\\n' | xargs -IX sh -c 'echo X; exit 3'")).exitCode, 123);
  assert.equal((await run("printf 'a b\\n' | xargs echo")).stdout, "a b\n", "without -I: just-bash's xargs");
  assert.equal((await run("echo it | xargs -i echo [{}]")).stdout, "[it]\n");
});

Deno.test("realpath: absolute, symlinks resolved; a missing last part only, unless -m or -e", async () => {
  const run = await shell();
  await run("mkdir -p /w/d && ln -s /w/d /w/link");
  assert.deepEqual(await run("cd /w && realpath link d/../d new"), {
    stdout: "/w/d\n/w/d\n/w/new\n",
    stderr: "",
    exitCode: 0,
  });
  assert.deepEqual(await run("cd /w && realpath gone/x"), {
    stdout: "",
    stderr: "realpath: gone/x: No such file or directory\n",
    exitCode: 1,
  });
  assert.equal((await run("cd /w && realpath -m gone/x")).stdout, "/w/gone/x\n");
  assert.equal((await run("cd /w && realpath -e new")).exitCode, 1);
});

Deno.test("shellQuote: the shell reads every word back as it was", async () => {
  const run = await shell();
  const words = ["plain", "two words", "it's", "$HOME", 'a"b', "*"];
  assert.equal((await run(`printf '%s\\n' ${words.map(shellQuote).join(" ")}`)).stdout, words.join("\n") + "\n");
});
