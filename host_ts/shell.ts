/**
 * The sandbox's shell: just-bash (a bash interpreter with coreutils, sed, awk, jq, tar..., written in TypeScript),
 * run in this worker for the guest's glue (`_sandbox_host.shell`), on Pyodide's own file system (pyodide_fs.ts).
 *
 * It adds no reach: it runs with the worker's permissions and under the OS layers, sees only what Python sees,
 * changes rw mounts through the same file service, and fetches (curl) through the worker's net permission after
 * the same host check as Python's. just-bash is imported on first use: most cells never need a shell.
 */
import type { Bash, Command, CommandName, ExecResult, SecureFetch } from "just-bash";
import { type EmscriptenFS, FsError, PyodideFs } from "./pyodide_fs.ts";
import { columnsApply, inColumns } from "./ls_columns.ts";
import { STDERR_SINK, STDOUT_SINK, StreamPlugin, TERMINAL_LS } from "./shell_stream.ts";
import { quietProcessEnv } from "./node_paths.ts";
import { byteLimits, fileTooLarge, limitWording, shellBytes } from "./shell_limits.ts";
import { SHELL_COMMANDS } from "./shell_commands.ts";
import { gnuCommands, inPlace } from "./gnu_commands.ts";
import { dfWith, type DiskUsage } from "./df_command.ts";
// The shell runs in the worker, whose realm guest code shares: the interrupt word only through shared_views.ts.
import { exchange, load, waitAsync } from "./shared_views.ts";

/** What the shell needs from the worker. */
export interface ShellLinks {
  fs: EmscriptenFS;
  errnoCodes: Record<string, number>;
  /** Why the rw-mount service refused the last change (once). */
  refusal(): string | undefined;
  /** The guest's guards' words refusing a write to `path` ('' if they let it through): Python's, said by the shell. */
  writeRefusal?(path: string): Promise<string>;
  /** Pyodide's interrupt word: non-zero once the kernel interrupts the request. */
  interrupt: Int32Array;
  /** Output for the request being served, as it is produced. */
  out(stream: "stdout" | "stderr", text: string): void;
  /** SandboxKernel.memory_limit_mb: the shell's byte limits are a share of it (shell_limits.ts). */
  memoryLimitMb: number;
  /** What `df` lists: the sandbox's memory budget as `/`, then the host folders shown inside. */
  disks(): DiskUsage[];
}

/** One run, as the glue asks for it (JSON). */
export interface ShellRequest {
  script: string;
  cwd: string;
  env: Record<string, string>;
  stdin: string; // latin1: one char per byte
  stream: boolean; // output to the cell as it is produced (else all of it comes back in the result)
  allowNet: string[]; // SandboxKernel.allow_net, as the guest's guards hold it
}

/** Its outcome (JSON); stdout and stderr hold what was not streamed. */
export interface ShellResult {
  stdout: string;
  stderr: string;
  exitCode: number;
  interrupted: boolean;
}

/** A Python function (a PyProxy) that runs `python3 ARGS...` in this sandbox: JSON in, JSON of an ExecResult out. */
export interface PythonCommand {
  callPromising(argv: string, stdin: string, cwd: string, env: string): Promise<string>;
}

/** Limits counted in commands and loops are off: cell_timeout and interrupts stop a shell, as they stop Python.
 * Limits in bytes are a share of memory_limit_mb (shell_limits.ts). */
const UNCOUNTED = {
  maxCommandCount: Number.MAX_SAFE_INTEGER,
  maxLoopIterations: Number.MAX_SAFE_INTEGER,
  maxWorkUnits: Number.MAX_SAFE_INTEGER,
  maxAwkIterations: Number.MAX_SAFE_INTEGER,
  maxSedIterations: Number.MAX_SAFE_INTEGER,
  maxExecutionTimeMs: Number.MAX_SAFE_INTEGER,
};
/** just-bash's commands left out: sqlite3 cannot run in a Deno worker; python3 and python are the shell's own. */
export const LEFT_OUT = new Set(["sqlite3", "python", "python3", "js-exec"]);
/** Commands not among just-bash's getCommandNames(): its curl comes with `fetch`; python3, python, the cell's `ls`
 * (TERMINAL_LS), realpath and wget (gnu_commands.ts) and df (df_command.ts) are this shell's. */
export const OWN_COMMANDS = ["curl", "python", "python3", TERMINAL_LS, "realpath", "wget", "df"];

/** `url`'s host may be reached under `allowNet` (entries "host" or "host:port"); else why not. */
export function netRefusal(url: string, allowNet: string[]): string | null {
  let parsed: URL;
  try {
    parsed = new URL(url);
  } catch {
    return `${url} is not a URL`;
  }
  if (parsed.protocol !== "http:" && parsed.protocol !== "https:") return `only http and https URLs can be fetched`;
  const host = parsed.hostname.toLowerCase().replace(/^\[|\]$/g, "");
  const port = parsed.port || (parsed.protocol === "https:" ? "443" : "80");
  const allowed = allowNet.some((entry) => {
    const [name, entryPort] = entry.toLowerCase().split(/:(?=\d+$)/);
    return name.replace(/^\[|\]$/g, "") === host && (entryPort === undefined || entryPort === port);
  });
  if (allowed) return null;
  const hosts = allowNet.length ? `only ${allowNet.join(", ")}` : "no host";
  return `network access to ${host}:${port} is refused: the sandbox may reach ${hosts} (SandboxKernel.allow_net)`;
}

/** The worker's fetch behind the host check, each redirect hop checked again. */
function checkedFetch(allowNet: () => string[]): SecureFetch {
  const fetchNow = globalThis.fetch.bind(globalThis);
  return async (url, options = {}) => {
    let target = url;
    for (let hop = 0; hop <= (options.maxRedirects ?? 10); hop++) {
      const refused = netRefusal(target, allowNet());
      if (refused) throw new Error(refused);
      const response = await fetchNow(target, {
        method: options.method ?? "GET",
        headers: options.headers,
        body: options.body,
        redirect: "manual",
        signal: options.signal,
      });
      const location = response.headers.get("location");
      if (options.followRedirects !== false && response.status >= 300 && response.status < 400 && location) {
        target = new URL(location, target).href;
        continue;
      }
      return {
        status: response.status,
        statusText: response.statusText,
        headers: Object.fromEntries(response.headers.entries()),
        body: new Uint8Array(await response.arrayBuffer()),
        url: target,
      };
    }
    throw new Error(`too many redirects from ${url}`);
  };
}

/** An AbortSignal whose `aborted` reads the interrupt word: just-bash checks it between statements. */
function interruptSignal(interrupt: Int32Array): AbortSignal {
  const signal = new AbortController().signal;
  Object.defineProperty(signal, "aborted", { get: () => load(interrupt, 0) !== 0 });
  return signal;
}

/** `sleep` that an interrupt cuts short (just-bash's own would wait for an abort event that never comes). */
function interruptibleSleep(interrupt: Int32Array): (ms: number) => Promise<void> {
  return async (ms) => {
    const end = performance.now() + ms;
    while (load(interrupt, 0) === 0) {
      const left = end - performance.now();
      if (left <= 0) return;
      const waited = waitAsync(interrupt, 0, 0, Math.min(left, 1000));
      if (waited.async) await waited.value;
    }
  };
}

/** `ls` whose output is the cell, as GNU ls on ipykernel's pseudo-terminal: names in columns (ls_columns.ts). */
async function lsOnTerminal(args: string[], ctx: Parameters<Command["execute"]>[1]): Promise<ExecResult> {
  const listed = await ctx.exec!("ls", { ...inPlace(ctx), args });
  const columns = listed.exitCode === 0 && columnsApply(args) ? inColumns(listed.stdout) : undefined;
  return columns === undefined ? listed : { ...listed, stdout: columns };
}

export class Shell {
  private constructor(
    private readonly bash: Bash,
    private readonly stream: StreamPlugin,
    private readonly links: ShellLinks,
    private readonly net: { allow: string[] },
    private readonly worded: (text: string) => string,
  ) {}

  /** Import just-bash and make the shell (once per sandbox, on the first shell command). */
  static async load(links: ShellLinks, python: PythonCommand): Promise<Shell> {
    quietProcessEnv();
    const { Bash, decodeBytesToUtf8, defineCommand, latin1FromBytes } = await import("just-bash");
    const net = { allow: [] as string[] };
    const sinks: Record<string, "stdout" | "stderr"> = { [STDOUT_SINK]: "stdout", [STDERR_SINK]: "stderr" };
    const worded = limitWording(links.memoryLimitMb);
    const fs = new SinkFs(links, sinks, worded);
    const runPython = async (args: string[], ctx: Parameters<Command["execute"]>[1]): Promise<ExecResult> => {
      const env = JSON.stringify(Object.fromEntries(ctx.env));
      const answer = await python.callPromising(JSON.stringify(args), latin1FromBytes(ctx.stdin), ctx.cwd, env);
      return JSON.parse(answer) as ExecResult;
    };
    const bash = new Bash({
      fs,
      cwd: "/",
      // Only the listed ones (shell_commands.json: also the files in /usr/bin): a command a newer just-bash adds is
      // not run until it is listed.
      commands: SHELL_COMMANDS.filter((name) => !OWN_COMMANDS.includes(name)) as CommandName[],
      customCommands: [
        defineCommand("python3", runPython),
        defineCommand("python", runPython),
        defineCommand(TERMINAL_LS, lsOnTerminal),
        ...Object.entries(gnuCommands(decodeBytesToUtf8)).map(([name, run]) => defineCommand(name, run)),
        defineCommand("df", dfWith(links.disks)),
      ],
      fetch: checkedFetch(() => net.allow),
      sleep: interruptibleSleep(links.interrupt),
      executionLimits: { ...UNCOUNTED, ...byteLimits(shellBytes(links.memoryLimitMb)) },
      defenseInDepth: false, // it guards a host process; here the whole worker is the guest's already
    });
    const stream = new StreamPlugin();
    bash.registerTransformPlugin(stream);
    return new Shell(bash, stream, links, net, worded);
  }

  /** Run one script for the glue; never rejects (an error is the script's stderr and exit code 1). */
  async run(request: ShellRequest): Promise<ShellResult> {
    this.net.allow = request.allowNet;
    this.stream.armed = request.stream;
    let result: ExecResult;
    try {
      result = await this.bash.exec(request.script, {
        cwd: request.cwd,
        env: { BASH: "/bin/bash", ...request.env }, // $BASH: the shell's path, as bash sets it
        replaceEnv: true,
        stdin: request.stdin,
        stdinKind: "bytes",
        rawScript: true,
        signal: interruptSignal(this.links.interrupt),
      });
    } catch (error) {
      // (a file error reaches here only from a redirection, which just-bash does not catch: it ends the script)
      const words = error instanceof FsError ? error.bashWords() : String((error as Error)?.message ?? error);
      result = { stdout: "", stderr: `bash: ${words}\n`, exitCode: 1 };
    } finally {
      this.stream.armed = false;
    }
    // Taken here, before Python resumes: the glue raises KeyboardInterrupt itself, inside the cell.
    const interrupted = exchange(this.links.interrupt, 0, 0) !== 0;
    // (stdout too: a captured run (`x = !cmd`) has its stderr there, 2>&1)
    const [stdout, stderr] = [this.worded(result.stdout), this.worded(result.stderr)];
    return { stdout, stderr, exitCode: result.exitCode, interrupted };
  }
}

/** Pyodide's file system, with the two sink paths of shell_stream.ts writing to the cell. */
class SinkFs extends PyodideFs {
  constructor(
    private readonly links: ShellLinks,
    private readonly sinks: Record<string, "stdout" | "stderr">,
    private readonly worded: (text: string) => string, // a limit's error, naming the setting
  ) {
    super(links.fs, links.errnoCodes, links.refusal, links.writeRefusal);
  }
  #sink(path: string, content: string | Uint8Array): boolean {
    const stream = this.sinks[path];
    if (!stream) return false;
    const text = typeof content === "string" ? content : new TextDecoder().decode(content);
    // Every command of a streamed loop appends to a sink, most of them nothing: no empty records in the ring.
    if (text) this.links.out(stream, stream === "stderr" ? this.worded(text) : text);
    return true;
  }
  /**
   * just-bash reads a file whole into the worker's JS heap, and some commands take many times its size there (`tr`
   * over an 8 MB file ended the sandbox at memory_limit_mb=256, though the shell's own input limit was 4 MiB): a
   * file larger than the shell's byte limit is refused (EFBIG), and the cell is told why and which setting raises
   * it (commands word every failed read as "No such file or directory").
   */
  override async readFileBuffer(path: string): Promise<Uint8Array> {
    const found = await super.stat(path).catch(() => undefined); // (a missing file: the read says so)
    if (found?.isFile && found.size > shellBytes(this.links.memoryLimitMb)) {
      const why = fileTooLarge(this.links.memoryLimitMb, found.size);
      this.links.out("stderr", `bash: ${path}: ${why}\n`);
      throw new FsError("EFBIG", "open", path, why);
    }
    return super.readFileBuffer(path);
  }
  override async writeFile(path: string, content: string | Uint8Array, options?: unknown): Promise<void> {
    if (!this.#sink(path, content)) await super.writeFile(path, content, options);
  }
  override async appendFile(path: string, content: string | Uint8Array, options?: unknown): Promise<void> {
    if (!this.#sink(path, content)) await super.appendFile(path, content, options);
  }
  override exists(path: string): Promise<boolean> {
    return path in this.sinks ? Promise.resolve(true) : super.exists(path);
  }
  override stat(path: string) {
    return path in this.sinks ? Promise.resolve(SINK_STAT()) : super.stat(path);
  }
  override lstat(path: string) {
    return path in this.sinks ? Promise.resolve(SINK_STAT()) : super.lstat(path);
  }
}

const SINK_STAT = () => ({
  isFile: true,
  isDirectory: false,
  isSymbolicLink: false,
  mode: 0o666,
  size: 0,
  mtime: new Date(0),
});
