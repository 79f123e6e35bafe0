/**
 * Commands as GNU gives them, where just-bash's differ or are missing and notebooks use them: `uniq -c`'s count
 * width, `xargs -I`, `realpath`, `wget` (through the shell's curl: the same allow_net check). Each is a just-bash
 * custom command; an override hands what it does not change to the bundled command (`origCommand`).
 */
import type { ByteString, Command, ExecResult } from "just-bash";

type Context = Parameters<Command["execute"]>[1];
type Run = (args: string[], ctx: Context) => Promise<ExecResult>;

const failed = (stderr: string, exitCode = 1): ExecResult => ({ stdout: "", stderr, exitCode });

/** The options of a subcommand that runs where the command runs, with its environment (as a child process would). */
export function inPlace(ctx: Context): { cwd: string; env: Record<string, string>; replaceEnv: true } {
  return { cwd: ctx.cwd, env: Object.fromEntries(ctx.env), replaceEnv: true };
}

/** A word for a shell command line that the shell reads back as exactly `arg`. */
export function shellQuote(arg: string): string {
  return /^[\w@%+=:,./-]+$/.test(arg) ? arg : `'${arg.replaceAll("'", `'\\''`)}'`;
}

/** Whether `uniq`'s arguments ask for counts (`-c`, `--count`, or `c` among short flags). */
function counts(args: string[]): boolean {
  for (const arg of args) {
    if (arg === "--") return false;
    if (arg === "--count") return true;
    if (/^-[a-zA-Z]+$/.test(arg) && arg.includes("c")) return true;
  }
  return false;
}

/** `uniq -c` with GNU's count field: seven wide, then a space (just-bash pads to four). */
export const uniq: Run = async (args, ctx) => {
  const result = await ctx.origCommand!(args);
  if (!counts(args) || result.exitCode !== 0) return result;
  return { ...result, stdout: result.stdout.replace(/^ *(\d+) /gm, (_, n: string) => `${n.padStart(7)} `) };
};

/** `xargs -I R cmd ...` (also `-IR`, `-i[R]`): `cmd` once per input line, R replaced in each argument; `text`
 * decodes its input (just-bash's decodeBytesToUtf8: just-bash is imported only when a shell first runs). */
export const xargsWith = (text: (stdin: ByteString) => string): Run => async (args, ctx) => {
  let replace: string | undefined;
  let i = 0;
  for (; i < args.length && args[i].startsWith("-"); i++) {
    const arg = args[i];
    if (arg === "-I") replace = args[++i];
    else if (arg.startsWith("-I")) replace = arg.slice(2);
    else if (arg === "-i" || arg === "--replace") replace = "{}";
    else if (arg.startsWith("-i")) replace = arg.slice(2);
    else if (arg.startsWith("--replace=")) replace = arg.slice("--replace=".length);
    else break;
  }
  if (replace === undefined) return ctx.origCommand!(args);
  if (!replace) return failed("xargs: option requires an argument -- 'I'\n");
  const command = args.slice(i);
  if (command.length === 0) command.push("echo");
  const out = { stdout: "", stderr: "" };
  let status = 0;
  for (const line of text(ctx.stdin).split("\n")) {
    const item = line.replace(/^[ \t]+/, "");
    if (!item) continue;
    const words = command.map((word) => shellQuote(word.replaceAll(replace!, item)));
    const done = await ctx.exec!(words.join(" "), inPlace(ctx));
    out.stdout += done.stdout;
    out.stderr += done.stderr;
    if (done.exitCode === 255) return { ...out, exitCode: 124 }; // (GNU: a command exiting 255 stops xargs)
    if (done.exitCode !== 0) status = done.exitCode === 127 ? 127 : 123;
  }
  return { ...out, exitCode: status };
};

/** `realpath [-e|-m] [-q] FILE...`: the absolute path, symlinks resolved; all but the last part must exist unless
 * -m (none need to) or -e (all must). */
export const realpath: Run = async (args, ctx) => {
  let mode: "e" | "m" | "" = "";
  let quiet = false;
  const files: string[] = [];
  for (const arg of args) {
    if (arg === "-e" || arg === "--canonicalize-existing") mode = "e";
    else if (arg === "-m" || arg === "--canonicalize-missing") mode = "m";
    else if (arg === "-q" || arg === "--quiet") quiet = true;
    else if (arg.startsWith("-") && arg !== "-") return failed(`realpath: unrecognized option '${arg}'\n`);
    else files.push(arg);
  }
  if (files.length === 0) return failed("realpath: missing operand\n");
  let stdout = "", stderr = "", exitCode = 0;
  for (const file of files) {
    const full = ctx.fs.resolvePath(ctx.cwd, file);
    const found = await resolved(ctx, full, mode);
    if (found !== null) stdout += `${found}\n`;
    else {
      exitCode = 1;
      if (!quiet) stderr += `realpath: ${file}: No such file or directory\n`;
    }
  }
  return { stdout, stderr, exitCode };
};

async function resolved(ctx: Context, full: string, mode: "e" | "m" | ""): Promise<string | null> {
  try {
    return await ctx.fs.realpath(full);
  } catch {
    if (mode === "e") return null;
    if (mode === "m") return full;
    const cut = full.lastIndexOf("/");
    const parent = cut > 0 ? full.slice(0, cut) : "/";
    try {
      const real = await ctx.fs.realpath(parent);
      return `${real === "/" ? "" : real}/${full.slice(cut + 1)}`;
    } catch {
      return null;
    }
  }
}

/** `wget [-q] [-O FILE|-] [-P DIR] URL...`, through the shell's curl (its allow_net check and its errors). */
export const wget: Run = async (args, ctx) => {
  let output: string | undefined;
  let folder = ".";
  let quiet = false;
  const urls: string[] = [];
  for (let i = 0; i < args.length; i++) {
    const arg = args[i];
    if (arg === "-q" || arg === "--quiet" || arg === "-nv" || arg === "--no-verbose") quiet = true;
    else if (arg === "-O") output = args[++i];
    else if (arg.startsWith("--output-document=")) output = arg.slice("--output-document=".length);
    else if (arg === "-P") folder = args[++i];
    else if (arg.startsWith("--directory-prefix=")) folder = arg.slice("--directory-prefix=".length);
    else if (arg.startsWith("-")) return failed(`wget: unrecognized option '${arg}'\n`, 2);
    else urls.push(arg);
  }
  if (urls.length === 0) return failed("wget: missing URL\n", 1);
  try {
    if (folder !== ".") await ctx.fs.mkdir(ctx.fs.resolvePath(ctx.cwd, folder), { recursive: true }); // as wget -P does
  } catch (error) {
    return failed(`wget: cannot create directory '${folder}': ${(error as Error).message}\n`, 3);
  }
  let stdout = "", stderr = "";
  for (const url of urls) {
    const name = output ?? `${folder}/${new URL(url, "http://x/").pathname.split("/").pop() || "index.html"}`;
    const curlArgs = ["-sSfL", ...(name === "-" ? [] : ["-o", name]), url];
    if (!quiet) stderr += `--${new Date().toISOString().slice(0, 19).replace("T", " ")}--  ${url}\n`;
    const done = await ctx.exec!(["curl", ...curlArgs].map(shellQuote).join(" "), inPlace(ctx));
    stdout += done.stdout;
    if (done.exitCode !== 0) {
      return { stdout, stderr: stderr + done.stderr.replaceAll("curl: ", "wget: "), exitCode: 8 };
    }
    if (!quiet && name !== "-") stderr += `Saving to: '${name.replace(/^\.\//, "")}'\n\n`;
  }
  return { stdout, stderr, exitCode: 0 };
};

/** The commands above, by name (shell_commands.json lists them all). */
export function gnuCommands(text: (stdin: ByteString) => string): Record<string, Run> {
  return { uniq, xargs: xargsWith(text), realpath, wget };
}
