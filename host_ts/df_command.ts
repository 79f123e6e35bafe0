/**
 * `df` for the sandbox's shell, in GNU's table: `/` is the sandbox's memory budget (SandboxKernel.memory_limit_mb,
 * which the in-memory files and Python's memory share: what is left is what files may still take), then each host
 * folder shown inside (working_folder, project_folder, mounts), whose sizes are the host's and are not shown ("-").
 */
import type { Command, ExecResult } from "just-bash";

type Context = Parameters<Command["execute"]>[1];

/** One file system as df lists it; no sizes: not known inside the sandbox. */
export interface DiskUsage {
  source: string;
  mountedOn: string;
  sizeBytes?: number;
  usedBytes?: number;
}

const UNITS = ["K", "M", "G", "T", "P", "E"];
/** GNU df's least width of each column (coreutils df.c): Filesystem, the three sizes, Use%, Mounted on. */
const LEAST_WIDTHS = [14, 5, 5, 5, 4, 0];
const USAGE = "Try 'df --help' for more information.\n";

/** A size as GNU's `df -h` prints it: powers of 1024, rounded up, one decimal below 10. */
export function humanSize(bytes: number): string {
  if (bytes < 1024) return String(Math.ceil(bytes));
  let value = bytes;
  let unit = -1;
  do {
    value /= 1024;
    unit++;
  } while (value >= 1024 && unit < UNITS.length - 1);
  if (value < 10) {
    const tenths = Math.ceil(value * 10 - 1e-9) / 10;
    if (tenths < 10) return `${tenths.toFixed(1)}${UNITS[unit]}`;
  }
  const whole = Math.ceil(value - 1e-9);
  return whole >= 1024 && unit < UNITS.length - 1 ? `1.0${UNITS[unit + 1]}` : `${whole}${UNITS[unit]}`;
}

/** The file system that holds `path`: the one mounted deepest on its way. */
export function holding(disks: DiskUsage[], path: string): DiskUsage | undefined {
  const within = (point: string) => point === "/" || path === point || path.startsWith(`${point}/`);
  return disks.filter((d) => within(d.mountedOn)).sort((a, b) => b.mountedOn.length - a.mountedOn.length)[0];
}

/** GNU's table: the source and mount point left-aligned, the numbers right-aligned, one space between, each
 * column as wide as its widest cell and at least as GNU makes it. */
export function dfTable(disks: DiskUsage[], human: boolean): string {
  const size = (bytes: number | undefined) =>
    bytes === undefined ? "-" : human ? humanSize(bytes) : String(Math.ceil(bytes / 1024));
  const rows = [[
    "Filesystem",
    human ? "Size" : "1K-blocks",
    "Used",
    human ? "Avail" : "Available",
    "Use%",
    "Mounted on",
  ]];
  for (const d of disks) {
    const avail = d.sizeBytes === undefined || d.usedBytes === undefined
      ? undefined
      : Math.max(0, d.sizeBytes - d.usedBytes);
    const use = avail === undefined || d.usedBytes === undefined || d.usedBytes + avail === 0
      ? "-"
      : `${Math.ceil((d.usedBytes * 100) / (d.usedBytes + avail))}%`;
    rows.push([d.source, size(d.sizeBytes), size(d.usedBytes), size(avail), use, d.mountedOn]);
  }
  const widths = LEAST_WIDTHS.map((least, i) => Math.max(least, ...rows.map((row) => row[i].length)));
  const line = (row: string[]) =>
    row.map((cell, i) => i === 0 ? cell.padEnd(widths[i]) : i === row.length - 1 ? cell : cell.padStart(widths[i]))
      .join(" ");
  return rows.map(line).join("\n") + "\n";
}

/** `df [-h|-k] [FILE...]` over the file systems `disks()` gives, the sandbox's own first. */
export const dfWith = (disks: () => DiskUsage[]) => async (args: string[], ctx: Context): Promise<ExecResult> => {
  let human = false;
  const files: string[] = [];
  for (const [i, arg] of args.entries()) {
    if (arg === "--") {
      files.push(...args.slice(i + 1));
      break;
    }
    if (arg === "--human-readable") human = true;
    else if (arg.startsWith("--")) {
      return { stdout: "", stderr: `df: unrecognized option '${arg}'\n${USAGE}`, exitCode: 1 };
    } else if (arg.startsWith("-") && arg.length > 1) {
      for (const flag of arg.slice(1)) {
        if (flag === "h") human = true;
        else if (flag === "k") human = false;
        else return { stdout: "", stderr: `df: invalid option -- '${flag}'\n${USAGE}`, exitCode: 1 };
      }
    } else files.push(arg);
  }
  const all = disks();
  if (files.length === 0) return { stdout: dfTable(all, human), stderr: "", exitCode: 0 };
  const shown: DiskUsage[] = [];
  let stderr = "";
  for (const file of files) {
    const path = ctx.fs.resolvePath(ctx.cwd, file);
    const disk = (await ctx.fs.exists(path)) ? holding(all, path) : undefined;
    if (disk === undefined) stderr += `df: ${file}: No such file or directory\n`;
    else shown.push(disk);
  }
  const stdout = shown.length > 0 ? dfTable(shown, human) : "";
  return { stdout, stderr, exitCode: stderr ? 1 : 0 };
};
