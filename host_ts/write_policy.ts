/**
 * What guest code may write into a host folder: pure decisions, applied by the supervisor (file_service.ts) to
 * every change, and used by the worker's overlay (rwfs.ts) to route each change: what is not allowed here stays in
 * the sandbox-side layer and never reaches the host.
 *
 * Default-deny: host_writes.json (the file of record, also read by the kernel's Python) lists the inert data
 * suffixes a file may have, the tool-configuration names to leave out per suffix (`package.json`, `CMakeLists.txt`,
 * ...), and what file and folder names look like (no dot-names, no suffix-less files, no dotted folders such as
 * `x.dist-info`). guarded_paths.json's `protected` names are not consulted here.
 */
import guarded from "./guarded_paths.json" with { type: "json" };
import table from "./host_writes.json" with { type: "json" };

export const VIRTUALENV_MARKER: string = guarded.virtualenv_marker;
/** Growth in apparent bytes (st_size) a mount may take from one sandbox unless mount_limits says otherwise. */
export const DEFAULT_MAX_GROWTH_BYTES: number = table.default_max_growth_bytes;

/** A mount's `host_writes` setting: "data" (the allowlist) or "any" (every regular file; the risk is the user's). */
export type HostWrites = "data" | "any";

// Characters that some file systems or tools drop or fold when they compare names: Unicode's default-ignorable
// code points (git on macOS ignores them in ".git", CVE-2014-9390), and trailing dots and spaces (Windows).
const IGNORABLE =
  /[\u00ad\u034f\u061c\u115f\u1160\u17b4\u17b5\u180b-\u180f\u200b-\u200f\u202a-\u202e\u2060-\u206f\u3164\ufe00-\ufe0f\ufeff\uffa0\u{1bca0}-\u{1bca3}\u{1d173}-\u{1d17a}\u{e0000}-\u{e0fff}]/gu;

/** A name as a case-insensitive, normalising file system (or a lenient tool) compares it. */
export function fold(name: string): string {
  return name.normalize("NFC").replace(IGNORABLE, "").replace(/[. ]+$/, "").toLowerCase();
}

function matcher(pattern: string): RegExp {
  const body = fold(pattern).split("*").map((part) => part.replace(/[.+?^${}()|[\]\\]/g, "\\$&")).join(".*");
  return new RegExp(`^${body}$`, "s");
}

const FILE_NAME = new RegExp(table.file_name, "u");
const FOLDER_NAME = new RegExp(table.folder_name, "u");
interface SuffixRule {
  tools: RegExp[];
  optIn: boolean; // host data only where the mount's `suffixes` names it
}
const SUFFIXES: Map<string, SuffixRule> = new Map(
  Object.entries(table.suffixes).map((
    [suffix, entry],
  ) => [suffix, { tools: entry.tool_names.map(matcher), optIn: (entry as { opt_in?: boolean }).opt_in === true }]),
);
/** The data suffixes that reach the host by default, as the docs and messages name them (".csv", ...). */
export const DATA_SUFFIXES: string[] = [...SUFFIXES].filter(([, r]) => !r.optIn).map(([s]) => `.${s}`);
/** The suffixes a mount must name in its `suffixes` to let them reach the host (".json", ".txt"). */
export const OPT_IN_SUFFIXES: string[] = [...SUFFIXES].filter(([, r]) => r.optIn).map(([s]) => `.${s}`);

/** Whether a name is exactly as written: NFC, nothing a file system or tool would drop or fold away. */
function plain(name: string): boolean {
  return name === name.normalize("NFC") && fold(name) === name.toLowerCase();
}

/** Why a folder name may not be on the way to a host file, or null. */
function badFolder(name: string): string | null {
  if (plain(name) && FOLDER_NAME.test(name)) return null;
  return `the folder name ${JSON.stringify(name)} is not plain (folders on the way to a host file are named ` +
    "with letters, digits, '_', '-' and inner spaces only: no dot-names, no dots such as x.dist-info)";
}

/** Why a file name may not be written to a host folder, or null (`suffixes`: the mount's, as ".json"). */
function badFile(name: string, suffixes: readonly string[]): string | null {
  if (!plain(name) || !FILE_NAME.test(name)) {
    return `${JSON.stringify(name)} is not a plain data file name (a name of letters, digits and ` +
      "'_ .,()+=@-', not starting with a dot, ending in a data suffix)";
  }
  const suffix = name.slice(name.lastIndexOf(".") + 1).toLowerCase();
  const rule = SUFFIXES.get(suffix);
  if (!rule) return `".${suffix}" is not a data suffix`;
  const folded = fold(name);
  if (rule.tools.some((t) => t.test(folded))) return `${JSON.stringify(name)} is a file that tools read as settings`;
  // With the mount's own `suffixes`, a suffix it does not name is refused by the file service (suffixAllowed).
  if (rule.optIn && !suffixes.length) {
    return `".${suffix}" files are not host data by default (tools read many of them as settings or code); a ` +
      `mount takes them only when its mount_limits[...]["suffixes"] names ".${suffix}"`;
  }
  return null;
}

/**
 * Why `parts` (a path inside a mount) may not be written to the host folder, or null when it may: the file (or,
 * with `directory`, the folder) name and every folder on the way, under `mode` ("any": every name; the file
 * service's symlink, mode and size rules still apply) and the mount's `suffixes` (an opt-in suffix such as
 * ".json" is host data only when they name it; a suffix they do not name is the file service's refusal).
 */
export function hostWritable(
  parts: readonly string[],
  directory: boolean,
  mode: HostWrites = "data",
  suffixes: readonly string[] = [],
): string | null {
  if (mode === "any") return null;
  const folders = directory ? parts : parts.slice(0, -1);
  for (const folder of folders) {
    const bad = badFolder(folder);
    if (bad) return bad;
  }
  return directory ? null : badFile(parts[parts.length - 1] ?? "", suffixes);
}

/** The most names a path inside a mount may have to reach the host (deeper ones stay inside the sandbox). */
export const MAX_DEPTH = 256;

/** Why `parts` is not a path inside a mount (a component that is empty, '.', '..' or holds '/' or NUL), or null. */
export function badPath(parts: unknown): string | null {
  if (!Array.isArray(parts)) return "not a list of path components";
  if (parts.length > MAX_DEPTH) return `a path too deep (at most ${MAX_DEPTH} names from the mount's folder)`;
  let total = 0;
  for (const part of parts) {
    if (typeof part !== "string" || part === "" || part === "." || part === "..") return "an empty, '.' or '..' name";
    if (part.includes("/") || part.includes("\0")) return "a name with '/' or NUL";
    total += part.length + 1;
  }
  return total > 4096 ? "a path longer than 4096 characters" : null;
}

/** The mode a file or folder the guest creates or changes gets: no setuid/setgid/sticky, no group or world
 * write, and files are not executable (a host program must never find a guest-made executable). */
export function safeMode(mode: number, directory: boolean): number {
  const permissions = mode & 0o777 & ~0o022;
  return directory ? permissions : permissions & ~0o111;
}

/** Whether a file name ends in one of `suffixes` (".csv", lower case; none: any name). */
export function suffixAllowed(name: string, suffixes: readonly string[]): boolean {
  if (!suffixes.length) return true;
  const lower = name.toLowerCase();
  return suffixes.some((s) => lower.endsWith(s));
}

/** The tag of a name a file's bytes are written under before it is renamed over its destination. */
export const PARTIAL_TAG: string = table.partial_prefix;
const PARTIAL_NAME = new RegExp(`(?:^|\\.)${PARTIAL_TAG}-[0-9a-z]+-[0-9a-z]+\\.[^.]+$`);

/**
 * A data name beside `to` (a path inside a mount) for its bytes on the way in, tagged `tag` ("<time>-<count>" in
 * base 36): `results.sandbox-partial-<tag>.csv`, or `sandbox-partial-<tag>.csv` when that name would not pass
 * `hostWritable` (it must: the file service writes it under the same rules). Keeps `to`'s suffix, so a leftover
 * one (a process killed mid-write) is inert data of the same kind, not a name any tool reads.
 */
export function partialName(
  to: readonly string[],
  tag: string,
  mode: HostWrites = "data",
  suffixes: readonly string[] = [],
): string[] {
  const name = to[to.length - 1] ?? "";
  const dot = name.lastIndexOf(".");
  const suffix = dot > 0 ? name.slice(dot) : ".partial";
  const stem = dot > 0 ? name.slice(0, dot) : name;
  const beside = [...to.slice(0, -1), `${stem}.${PARTIAL_TAG}-${tag}${suffix}`];
  if (name.length < 180 && hostWritable(beside, false, mode, suffixes) === null) return beside;
  return [...to.slice(0, -1), `${PARTIAL_TAG}-${tag}${suffix}`];
}

/** Whether a file name is one `partialName` makes. */
export function isPartialName(name: string): boolean {
  return PARTIAL_NAME.test(name);
}
