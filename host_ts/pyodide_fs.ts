/**
 * just-bash's file system (its IFileSystem) over Pyodide's: the shell sees exactly the files Python sees, through
 * the same Emscripten FS, so the same mounts, the same read-only rule and the same rw-mount service (rwfs.ts)
 * apply to both. Every call is synchronous underneath, wrapped as async; an Emscripten error becomes a Node-style
 * one (`code` "ENOENT", message "ENOENT: no such file or directory, open '/x'"), which just-bash's commands read.
 */
// Its methods are async without awaiting: just-bash expects promises, and a synchronous throw becomes a rejection.
// deno-lint-ignore-file require-await
import type { CpOptions, FsStat, IFileSystem, MkdirOptions, RmOptions } from "just-bash";

/** The part of Emscripten's FS this adapter uses (Pyodide's `pyodide.FS`). */
export interface EmscriptenFS {
  readFile(path: string): Uint8Array;
  writeFile(path: string, data: Uint8Array): void;
  open(path: string, flags: string): unknown;
  write(stream: unknown, data: Uint8Array, offset: number, length: number): number;
  close(stream: unknown): void;
  stat(path: string): EmscriptenStat;
  lstat(path: string): EmscriptenStat;
  mkdir(path: string): void;
  readdir(path: string): string[];
  rmdir(path: string): void;
  unlink(path: string): void;
  rename(from: string, to: string): void;
  chmod(path: string, mode: number): void;
  symlink(target: string, path: string): void;
  readlink(path: string): string;
  utime(path: string, atime: number, mtime: number): void;
  lookupPath(path: string, options: { follow: boolean }): { node: unknown };
  getPath(node: unknown): string;
  isFile(mode: number): boolean;
  isDir(mode: number): boolean;
  isLink(mode: number): boolean;
}

interface EmscriptenStat {
  mode: number;
  size: number;
  mtime: Date | number;
  dev: number;
  ino: number;
}

const DESCRIPTIONS: Record<string, string> = {
  ENOENT: "no such file or directory",
  EEXIST: "file already exists",
  ENOTDIR: "not a directory",
  EISDIR: "illegal operation on a directory",
  ENOTEMPTY: "directory not empty",
  EACCES: "permission denied",
  EPERM: "operation not permitted",
  EXDEV: "cross-device link not permitted",
  ELOOP: "too many symbolic links encountered",
  EINVAL: "invalid argument",
  EROFS: "read-only file system",
  ENOSPC: "no space left on device",
  EFBIG: "file too large",
  ENAMETOOLONG: "name too long",
  ENOTSUP: "operation not supported",
};

/** A Node-style file-system error, as just-bash's commands expect (they test `code` and the message). */
export class FsError extends Error {
  /** Why, in words: the guards' or the service's own, else the errno's. */
  readonly reason: string;
  constructor(readonly code: string, syscall: string, readonly path: string, detail?: string) {
    const reason = detail ?? DESCRIPTIONS[code] ?? code.toLowerCase();
    super(`${code}: ${reason}, ${syscall} '${path}'`);
    this.reason = reason;
  }

  /** As bash says it: `PATH: Reason`. */
  bashWords(): string {
    return `${this.path}: ${this.reason.charAt(0).toUpperCase()}${this.reason.slice(1)}`;
  }
}

/** `path` with `.`, `..` and repeated slashes resolved (never above `/`). */
export function normalize(path: string): string {
  const out: string[] = [];
  for (const part of path.split("/")) {
    if (!part || part === ".") continue;
    if (part === "..") out.pop();
    else out.push(part);
  }
  return "/" + out.join("/");
}

type Encoding = string | null | undefined;
const encodingOf = (options: unknown): Encoding =>
  typeof options === "string" ? options : (options as { encoding?: Encoding } | undefined)?.encoding;

function latin1(bytes: Uint8Array): string {
  let text = "";
  for (let i = 0; i < bytes.length; i += 0x8000) text += String.fromCharCode(...bytes.subarray(i, i + 0x8000));
  return text;
}
const fromLatin1 = (text: string) => Uint8Array.from(text, (c) => c.charCodeAt(0) & 0xff);

/** Text in `encoding` as bytes (UTF-8 unless a byte encoding is named). */
export function encode(content: string | Uint8Array, encoding: Encoding): Uint8Array {
  if (typeof content !== "string") return content;
  if (encoding === "binary" || encoding === "latin1") return fromLatin1(content);
  if (encoding === "base64") return fromLatin1(atob(content));
  if (encoding === "hex") return Uint8Array.from(content.match(/../g) ?? [], (h) => parseInt(h, 16));
  return new TextEncoder().encode(content);
}

function decode(bytes: Uint8Array, encoding: Encoding): string {
  if (encoding === "binary" || encoding === "latin1") return latin1(bytes);
  if (encoding === "base64") return btoa(latin1(bytes));
  if (encoding === "hex") return Array.from(bytes, (b) => b.toString(16).padStart(2, "0")).join("");
  return new TextDecoder().decode(bytes);
}

export class PyodideFs implements IFileSystem {
  readonly #fs: EmscriptenFS;
  readonly #codes: Map<number, string>;
  readonly #refusal: () => string | undefined;
  readonly #writeRefusal?: (path: string) => Promise<string>;

  /**
   * `errnoCodes`: Pyodide's ERRNO_CODES (name -> number); `refusal`: why the rw-mount service refused the last
   * change (worker.ts's `take_refusal`), which words an EACCES better than "permission denied"; `writeRefusal`:
   * the guest's guards' words refusing a write to a path ('' if they let it through), so that a write the shell
   * refuses says what open() in Python says (guards.py's write_refusal).
   */
  constructor(
    fs: EmscriptenFS,
    errnoCodes: Record<string, number>,
    refusal: () => string | undefined,
    writeRefusal?: (path: string) => Promise<string>,
  ) {
    this.#fs = fs;
    this.#codes = new Map(Object.entries(errnoCodes).map(([name, errno]) => [errno, name]));
    this.#refusal = refusal;
    this.#writeRefusal = writeRefusal;
  }

  /** Refuse a write the guards refuse (EROFS, as Python's open() does), in their words. */
  async #mayWrite(syscall: string, path: string): Promise<void> {
    const why = this.#writeRefusal ? await this.#writeRefusal(normalize(path)) : "";
    if (why) throw new FsError("EROFS", syscall, path, why);
  }

  /** Run one FS call; an Emscripten ErrnoError becomes an FsError. */
  #call<T>(syscall: string, path: string, call: () => T): T {
    try {
      return call();
    } catch (error) {
      const errno = (error as { errno?: unknown } | null)?.errno;
      if (typeof errno !== "number") throw error;
      const code = this.#codes.get(errno) ?? `E${errno}`;
      throw new FsError(code, syscall, path, code === "EACCES" ? this.#refusal() : undefined);
    }
  }

  #stat(st: EmscriptenStat): FsStat {
    const fs = this.#fs;
    return {
      isFile: fs.isFile(st.mode),
      isDirectory: fs.isDir(st.mode),
      isSymbolicLink: fs.isLink(st.mode),
      mode: st.mode & 0o7777, // the permission bits, as just-bash's own file systems keep them (stat %a)
      size: st.size,
      mtime: st.mtime instanceof Date ? st.mtime : new Date(Number(st.mtime)),
      dev: st.dev,
      ino: st.ino,
    };
  }

  readFile(path: string, options?: unknown): Promise<string> {
    return this.readFileBuffer(path).then((bytes) => decode(bytes, encodingOf(options)));
  }
  async readFileBuffer(path: string): Promise<Uint8Array> {
    return this.#call("open", path, () => this.#fs.readFile(path));
  }
  async writeFile(path: string, content: string | Uint8Array, options?: unknown): Promise<void> {
    await this.#mayWrite("open", path);
    this.#call("open", path, () => this.#fs.writeFile(path, encode(content, encodingOf(options))));
  }
  async appendFile(path: string, content: string | Uint8Array, options?: unknown): Promise<void> {
    await this.#mayWrite("open", path);
    const fs = this.#fs;
    const bytes = encode(content, encodingOf(options));
    this.#call("open", path, () => {
      const stream = fs.open(path, "a");
      try {
        fs.write(stream, bytes, 0, bytes.length);
      } finally {
        fs.close(stream);
      }
    });
  }
  async exists(path: string): Promise<boolean> {
    try {
      this.#fs.stat(path);
      return true;
    } catch {
      return false;
    }
  }
  async stat(path: string): Promise<FsStat> {
    return this.#stat(this.#call("stat", path, () => this.#fs.stat(path)));
  }
  async lstat(path: string): Promise<FsStat> {
    return this.#stat(this.#call("lstat", path, () => this.#fs.lstat(path)));
  }
  async mkdir(path: string, options?: MkdirOptions): Promise<void> {
    await this.#mayWrite("mkdir", path);
    const fs = this.#fs;
    if (!options?.recursive) return this.#call("mkdir", path, () => fs.mkdir(path));
    let current = "";
    for (const part of normalize(path).split("/").filter(Boolean)) {
      current += "/" + part;
      let st: EmscriptenStat | null = null;
      try {
        st = fs.stat(current);
      } catch { /* missing: made below */ }
      if (st && !fs.isDir(st.mode)) throw new FsError("ENOTDIR", "mkdir", path);
      if (!st) this.#call("mkdir", path, () => fs.mkdir(current));
    }
  }
  async readdir(path: string): Promise<string[]> {
    const names = this.#call("scandir", path, () => this.#fs.readdir(path));
    return names.filter((name) => name !== "." && name !== "..").sort();
  }
  /** An entry that cannot be looked at (`/proc/self/fd`: EPERM) is listed of no known type, as readdir(3) gives
   * DT_UNKNOWN, and the listing goes on (`find /` ended at the first one). */
  async readdirWithFileTypes(path: string) {
    return (await this.readdir(path)).map((name) => {
      let st: EmscriptenStat;
      try {
        st = this.#fs.lstat(`${path}/${name}`);
      } catch {
        return { name, isFile: false, isDirectory: false, isSymbolicLink: false };
      }
      const { isFile, isDirectory, isSymbolicLink } = this.#stat(st);
      return { name, isFile, isDirectory, isSymbolicLink };
    });
  }
  async rm(path: string, options?: RmOptions): Promise<void> {
    const fs = this.#fs;
    let st: EmscriptenStat;
    try {
      st = fs.lstat(path);
    } catch (error) {
      if (options?.force) return;
      return this.#call("rm", path, () => {
        throw error;
      });
    }
    await this.#mayWrite("rm", path); // one that is there (a missing one is ENOENT, as on a read-only mount)
    if (!fs.isDir(st.mode)) return this.#call("unlink", path, () => fs.unlink(path));
    if (options?.recursive) { for (const name of await this.readdir(path)) await this.rm(`${path}/${name}`, options); }
    this.#call("rmdir", path, () => fs.rmdir(path));
  }
  async cp(src: string, dest: string, options?: CpOptions): Promise<void> {
    await this.#mayWrite("copyfile", dest);
    const fs = this.#fs;
    const st = this.#call("lstat", src, () => fs.lstat(src));
    if (fs.isLink(st.mode)) return this.symlink(this.#call("readlink", src, () => fs.readlink(src)), dest);
    if (fs.isDir(st.mode)) {
      if (!options?.recursive) throw new FsError("EISDIR", "cp", src);
      await this.mkdir(dest, { recursive: true });
      for (const name of await this.readdir(src)) await this.cp(`${src}/${name}`, `${dest}/${name}`, options);
      return;
    }
    await this.writeFile(dest, await this.readFileBuffer(src));
    this.#call("chmod", dest, () => fs.chmod(dest, st.mode & 0o777));
  }
  async mv(src: string, dest: string): Promise<void> {
    await this.#mayWrite("rename", src);
    await this.#mayWrite("rename", dest);
    try {
      this.#call("rename", src, () => this.#fs.rename(src, dest));
    } catch (error) {
      if ((error as FsError).code !== "EXDEV") throw error;
      await this.cp(src, dest, { recursive: true }); // across mounts: copy, then remove
      await this.rm(src, { recursive: true });
    }
  }
  resolvePath(base: string, path: string): string {
    return normalize(path.startsWith("/") ? path : `${base}/${path}`);
  }
  getAllPaths(): string[] {
    return []; // globbing walks the folders with readdir instead
  }
  async chmod(path: string, mode: number): Promise<void> {
    await this.#mayWrite("chmod", path);
    this.#call("chmod", path, () => this.#fs.chmod(path, mode));
  }
  async symlink(target: string, linkPath: string): Promise<void> {
    await this.#mayWrite("symlink", linkPath);
    this.#call("symlink", linkPath, () => this.#fs.symlink(target, linkPath));
  }
  link(existingPath: string): Promise<void> {
    // Not EPERM: ln words any message with "EPERM" as "hard link not allowed for directory".
    return Promise.reject(new FsError("ENOTSUP", "link", existingPath, "hard links are not supported in the sandbox"));
  }
  async readlink(path: string): Promise<string> {
    return this.#call("readlink", path, () => this.#fs.readlink(path));
  }
  async realpath(path: string): Promise<string> {
    const fs = this.#fs;
    return this.#call("realpath", path, () => fs.getPath(fs.lookupPath(path, { follow: true }).node));
  }
  async utimes(path: string, atime: Date, mtime: Date): Promise<void> {
    await this.#mayWrite("utime", path);
    this.#call("utime", path, () => this.#fs.utime(path, atime.getTime(), mtime.getTime()));
  }
}
