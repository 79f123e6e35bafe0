/**
 * What guest code may write in a read-write mount: pure decisions, applied by the supervisor (file_service.ts).
 *
 * Host programs trust some files in any folder they work in: git runs what `.git/config` names, pytest imports
 * `conftest.py`, make runs a Makefile's `$(shell ...)` even for `make -n`. guarded_paths.json lists them; a write
 * to a path with such a component, at any depth, is refused, unless the mount's settings allow that rule.
 */
import guarded from "./guarded_paths.json" with { type: "json" };

export interface ProtectedRule {
  rule: string; // the group's name, as `allow_tool_files` takes it
  why: string;
  names: string[];
}

export const RULES: ProtectedRule[] = guarded.protected;
export const VIRTUALENV_MARKER: string = guarded.virtualenv_marker;

/** A match: the rule, and the component of the path that it matched. */
export interface Guarded {
  rule: ProtectedRule;
  name: string;
}

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

const MATCHERS: [ProtectedRule, RegExp, string][] = RULES.flatMap((rule) =>
  rule.names.map((name): [ProtectedRule, RegExp, string] => [rule, matcher(name), name])
);
// All of them in one expression: most components match none, and are told so by one test.
const ANY = new RegExp(MATCHERS.map(([, regex]) => `(?:${regex.source})`).join("|"), "s");

/** Whether `allowed` (a mount's allow_tool_files) lifts `rule` for `name`: by rule, by listed name, or "*". */
function lifted(allowed: readonly string[], rule: ProtectedRule, name: string): boolean {
  return allowed.some((a) => a === "*" || a === rule.rule || fold(a) === fold(name));
}

/** The first component of `parts` (a path inside a mount) that a protected rule covers, or null. */
export function guardedComponent(parts: readonly string[], allowed: readonly string[] = []): Guarded | null {
  for (const part of parts) {
    const folded = fold(part);
    if (!ANY.test(folded)) continue;
    for (const [rule, regex, name] of MATCHERS) {
      if (regex.test(folded) && !lifted(allowed, rule, name)) return { rule, name: part };
    }
  }
  return null;
}

/** Why `parts` is not a path inside a mount (a component that is empty, '.', '..' or holds '/' or NUL), or null. */
export function badPath(parts: unknown): string | null {
  if (!Array.isArray(parts) || parts.length > 256) return "not a list of path components";
  let total = 0;
  for (const part of parts) {
    if (typeof part !== "string" || part === "" || part === "." || part === "..") return "an empty, '.' or '..' name";
    if (part.includes("/") || part.includes("\0")) return "a name with '/' or NUL";
    total += part.length + 1;
  }
  return total > 4096 ? "a path longer than 4096 characters" : null;
}

/** The mode a file or folder the guest creates or changes gets: no setuid/setgid/sticky, no world-write, and
 * files are not executable (a host program must never find a guest-made executable). */
export function safeMode(mode: number, directory: boolean): number {
  const permissions = mode & 0o777 & ~0o002;
  return directory ? permissions : permissions & ~0o111;
}

/** Whether a file name ends in one of `suffixes` (none: any name). */
export function suffixAllowed(name: string, suffixes: readonly string[]): boolean {
  if (!suffixes.length) return true;
  const lower = name.toLowerCase();
  return suffixes.some((s) => lower.endsWith(s));
}
