/**
 * What the sandbox's shell (just-bash, shell.ts) may hold at once, as a share of SandboxKernel.memory_limit_mb, and
 * its limit errors worded to name that setting.
 *
 * just-bash keeps a command's input, output and strings in the worker's JS heap (as large as memory_limit_mb), and
 * some of its commands take far more heap than bytes they handle: `tr` or `sed` over an 8 MiB file took more than
 * 256 MiB (strings built a character at a time), and ended the whole sandbox (V8 ends the process when its heap is
 * full). Its own limits are sized for a host process (64 MiB strings, 256 MiB output, 512 MiB input); here each of
 * its byte limits is 1/SHELL_SHARE of memory_limit_mb, so that what one script handles fits the heap with room to
 * spare, and a script past it fails as bash does (a message on stderr, exit status 126), naming the setting.
 */
import type { BashOptions } from "just-bash";

type ExecutionLimits = NonNullable<BashOptions["executionLimits"]>;

/** Each byte limit of the shell is memory_limit_mb / SHELL_SHARE (4 MiB at 256 MiB, 16 MiB at the default 1 GiB). */
export const SHELL_SHARE = 64;
const MIB = 1 << 20;

/** The shell's byte limit under `memoryLimitMb` (at least 1 MiB). */
export function shellBytes(memoryLimitMb: number): number {
  return Math.max(MIB, Math.floor((memoryLimitMb * MIB) / SHELL_SHARE));
}

/** just-bash's limits on bytes, each `bytes`: one figure, so that every message that states it can be told. */
export function byteLimits(bytes: number): ExecutionLimits {
  return {
    maxSourceBytes: bytes,
    maxStringLength: bytes,
    maxHeredocSize: bytes,
    maxOutputSize: bytes,
    maxLiveBytes: bytes,
    maxInputBytes: bytes,
    maxFileSystemBytes: bytes,
    maxArchiveBytes: bytes,
    maxArchiveCompressedBytes: bytes,
    maxArchiveEntryBytes: bytes,
    maxWorkerMessageBytes: bytes,
    maxDatabaseBytes: bytes,
    maxDatabaseResultBytes: bytes,
  };
}

const mib = (bytes: number) => {
  const value = bytes / MIB;
  return Number.isInteger(value) ? `${value}` : value.toFixed(1);
};

/** The detail of the error for a file the shell cannot read whole (it reads every file whole, into its heap). */
export function fileTooLarge(memoryLimitMb: number, size: number): string {
  const bytes = shellBytes(memoryLimitMb);
  return `the file is ${mib(size)} MiB; the sandbox's shell reads at most ${
    mib(bytes)
  } MiB at once (1/${SHELL_SHARE} ` +
    `of SandboxKernel.memory_limit_mb=${memoryLimitMb}; raise that setting to allow more, or read it in Python)`;
}

/**
 * Rewrites just-bash's limit errors (`... limit exceeded (4194304 bytes)`, `... exceeded (>4194304 bytes), increase
 * executionLimits.maxOutputSize`) to name the setting that raises the limit; other text passes unchanged.
 */
export function limitWording(memoryLimitMb: number): (text: string) => string {
  const bytes = shellBytes(memoryLimitMb);
  const stated = new RegExp(`\\(>?${bytes} bytes\\)(?:, increase executionLimits\\.\\w+)?`, "g");
  const named = `(${mib(bytes)} MiB: the sandbox's shell handles at most 1/${SHELL_SHARE} of ` +
    `SandboxKernel.memory_limit_mb=${memoryLimitMb} at once; raise that setting to allow more)`;
  return (text) => text.includes(`${bytes} bytes)`) ? text.replace(stated, named) : text;
}
