import assert from "node:assert/strict";
import { byteLimits, fileTooLarge, limitWording, SHELL_SHARE, shellBytes } from "./shell_limits.ts";

Deno.test("the shell's byte limits are memory_limit_mb / SHELL_SHARE, at least 1 MiB, one figure for all", () => {
  assert.equal(SHELL_SHARE, 64);
  assert.equal(shellBytes(256), 4 << 20);
  assert.equal(shellBytes(1024), 16 << 20);
  assert.equal(shellBytes(32), 1 << 20);
  const limits = byteLimits(shellBytes(256));
  assert.deepEqual(new Set(Object.values(limits)), new Set([4 << 20]));
  for (const name of ["maxStringLength", "maxOutputSize", "maxInputBytes", "maxLiveBytes", "maxHeredocSize"]) {
    assert.ok(name in limits, name);
  }
});

Deno.test("just-bash's limit errors are worded to name memory_limit_mb; other text is left as it is", () => {
  const worded = limitWording(256);
  const named = "(4 MiB: the sandbox's shell handles at most 1/64 of SandboxKernel.memory_limit_mb=256 at once; " +
    "raise that setting to allow more)";
  assert.equal(
    worded("bash: tr: input size limit exceeded (4194304 bytes)\n"),
    `bash: tr: input size limit exceeded ${named}\n`,
  );
  assert.equal(
    worded("bash: redirection: total output size exceeded (>4194304 bytes), increase executionLimits.maxOutputSize\n"),
    `bash: redirection: total output size exceeded ${named}\n`,
  );
  assert.equal(
    worded("awk: output size limit exceeded (67108864 bytes)\n"),
    "awk: output size limit exceeded (67108864 bytes)\n",
  );
  assert.equal(worded("4194304 bytes) said the guest"), "4194304 bytes) said the guest");
  assert.match(
    limitWording(300)("x (4915200 bytes)"),
    /^x \(4\.7 MiB: .* SandboxKernel\.memory_limit_mb=300 at once; /,
  );
});

Deno.test("a file the shell cannot read whole: its size, the limit and the setting", () => {
  assert.equal(
    fileTooLarge(256, 8_800_000),
    "the file is 8.4 MiB; the sandbox's shell reads at most 4 MiB at once (1/64 of SandboxKernel.memory_limit_mb=256; " +
      "raise that setting to allow more, or read it in Python)",
  );
});
