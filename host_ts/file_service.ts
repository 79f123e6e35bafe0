/**
 * The supervisor's file service: the only writer of read-write mounts.
 *
 * The worker may read host folders but write none: each change it wants in a read-write mount (create, write,
 * truncate, chmod, rename, remove) is a call over the file channel, answered here after the mount's rules are
 * applied where the write happens: only plain data files (write_policy.ts `hostWritable`, host_writes.json: a
 * default-deny allowlist; the worker keeps everything else in its sandbox-side overlay), nothing inside a
 * virtual environment, nothing through a symlink, no symlinks made, no setuid/world-writable/executable modes,
 * suffixes, max_file_bytes, max_total_bytes and the growth quota (max_growth_bytes: apparent sizes, so a sparse
 * file counts at its full length). Calls are untrusted input (guest code can make them): every
 * field is checked, and every call is answered, with an errno code and, for a refusal, the reason in words.
 */
import type { FileMount, MadeName } from "./messages.ts";
import { type FileOp, isFileOp } from "./protocol.ts";
import { MAX_CHUNK, type Message } from "./file_channel.ts";
import {
  badPath,
  DATA_SUFFIXES,
  hostWritable,
  isPartialName,
  partialName,
  safeMode,
  suffixAllowed,
  VIRTUALENV_MARKER,
} from "./write_policy.ts";

const O_ACCMODE = 3;
const O_RDWR = 2;
const O_TRUNC = 512;
const O_APPEND = 1024;
const MAX_HANDLES = 256;
const MAX_MOVED = 10_000; // entries a folder move looks at

/** A refusal: an errno code name and what the guest is told. */
class Refused extends Error {
  constructor(readonly code: string, message = "") {
    super(message);
  }
}

interface Target {
  index: number;
  mount: FileMount;
  parts: string[];
  host: string;
  guest: string;
}

interface Handle {
  file: Deno.FsFile;
  target: Target;
  ino: string; // "dev:ino" of the open file: its bytes are given back only once no name and no handle holds it
  append: boolean;
  offset: number; // where the file's own cursor is (-1: unknown), so a sequential write or read needs no seek
  aside?: Aside; // the file is written aside, renamed over its name when its last handle closes
}

/** A host file being written: its bytes go to `partial` beside it, renamed over it when complete. */
interface Aside {
  partial: string; // host path
  handles: number;
  was: string; // "dev:ino" of the file at its name when this began: published only over that file
  base: number; // the bytes the aside file began with (a copy of the file's: not counted until it replaces it)
  settled: boolean; // renamed over its name early (that name was moved or removed): written in place since
}

type Answer = { json: unknown; payload?: Uint8Array };
type Request = Record<string, unknown>;

/** Where a file call the switch does not serve would land: deno check fails unless every FileOp is served. */
function unserved(op: never): never {
  throw new Refused("EINVAL", `the file call ${String(op)} has no handler`);
}

function lstat(path: string): Deno.FileInfo | null {
  try {
    return Deno.lstatSync(path);
  } catch {
    return null;
  }
}

/** A file's identity on the host ("" when unknown). */
function inode(info: Deno.FileInfo | null): string {
  return info ? `${info.dev}:${info.ino}` : "";
}

function count(value: unknown, what: string): number {
  if (typeof value !== "number" || !Number.isSafeInteger(value) || value < 0) {
    throw new Refused("EINVAL", `a bad ${what}`);
  }
  return value;
}

/** Bytes of the regular files under `root` (symlinks not followed). */
async function totalBytes(root: string): Promise<number> {
  let sum = 0;
  const folders = [root];
  while (folders.length) {
    const folder = folders.pop() as string;
    try {
      for await (const entry of Deno.readDir(folder)) {
        const path = `${folder}/${entry.name}`;
        if (entry.isDirectory) folders.push(path);
        else if (entry.isFile) sum += (await Deno.lstat(path).catch(() => ({ size: 0 }))).size;
      }
    } catch {
      // unreadable (hidden) or gone: not the guest's
    }
  }
  return sum;
}

/**
 * What the folders on the way to a path are (a symlink, a virtual environment), remembered for a moment: a burst
 * of writes into one folder (a Python loop writing files) then costs no system call per folder. The guest cannot
 * make either (symlinks and `pyvenv.cfg` are refused), so only a host process can change the answer, and the
 * rules see its change within `FOLDER_FACTS_MS`.
 */
const FOLDER_FACTS_MS = 1000;

/** New names remembered from mknod until opened for writing (each one's "dev:ino"). */
const MAX_MADE = 4096;

interface FolderFacts {
  symlink: boolean;
  virtualenv: boolean;
  asked: boolean; // whether `symlink` was looked at
  at: number;
}

export class FileService {
  private folders = new Map<string, FolderFacts>();
  private handles = new Map<number, Handle>();
  private nextHandle = 1;
  private asides = new Map<string, Aside>(); // by the host path of the file being written
  private partials = 0;
  private made = new Map<string, string>(); // host path -> "dev:ino" of the empty file mknod made new there
  private used = new Map<number, number | Promise<number>>(); // bytes in each mount with max_total_bytes
  private grown = new Map<number, number>(); // net growth of each mount's apparent bytes in this sandbox

  /**
   * `tag`: this sandbox's part of the names of files written aside; `aboutToMake`: told each one's place before
   * it is made, settled once the kernel has been told (it removes what a process killed mid-write leaves), with
   * `made` when the name it is for is the empty file this sandbox's mknod made (the kernel removes that too).
   */
  constructor(
    private mounts: FileMount[],
    private tag = "0",
    private aboutToMake: (mount: number, path: string[], made?: MadeName) => Promise<void> = () => Promise.resolve(),
  ) {
    mounts.forEach((m, i) => {
      if (m.writable && m.maxTotalBytes !== null) this.used.set(i, totalBytes(m.host));
    });
  }

  /** Answer one call; never throws. */
  async handle(request: Message): Promise<Answer> {
    const req = (request.json ?? {}) as Request;
    try {
      return await this.serve(req, request.payload);
    } catch (err) {
      if (err instanceof Refused) return { json: { code: err.code, message: err.message || undefined } };
      const code = (err as { code?: unknown })?.code;
      if (typeof code === "string" && /^E[A-Z]+$/.test(code)) return { json: { code } };
      if (err instanceof Deno.errors.NotCapable || err instanceof Deno.errors.PermissionDenied) {
        return { json: { code: "EACCES" } };
      }
      return { json: { code: "EIO" } };
    }
  }

  private async serve(req: Request, payload: Uint8Array): Promise<Answer> {
    const op = req.op;
    if (!isFileOp(op)) throw new Refused("EINVAL", "an unknown file call");
    if (op === "read") {
      return this.read(this.handleOf(req.handle), count(req.position, "position"), count(req.length, "length"));
    }
    return { json: await this.change(op, req, payload) };
  }

  private async change(op: Exclude<FileOp, "read">, req: Request, payload: Uint8Array): Promise<unknown> {
    switch (op) {
      case "mknod":
        return await this.mknod(this.target(req.mount, req.path), req.dir === true, count(req.mode, "mode"));
      case "open":
        return await this.open(this.target(req.mount, req.path), count(req.flags, "flags"));
      case "write": {
        const whole = req.whole === undefined ? payload.length : count(req.whole, "whole");
        return await this.write(this.handleOf(req.handle), count(req.position, "position"), payload, whole);
      }
      case "fstat":
        return { size: this.handleOf(req.handle).file.statSync().size };
      case "close":
        return await this.close(Number(req.handle), this.handleOf(req.handle));
      case "setattr":
        return await this.setattr(req);
      case "unlink":
        return await this.remove(this.target(req.mount, req.path), false);
      case "rmdir":
        return await this.remove(this.target(req.mount, req.path), true);
      case "rename":
        return await this.rename(this.target(req.mount, req.path), this.target(req.mount, req.to));
      case "symlink": {
        const t = this.target(req.mount, req.path);
        throw new Refused(
          "EPERM",
          `making the symbolic link ${t.guest} is refused: the sandbox makes no links in host folders (a host ` +
            "program could follow one out of the folder)",
        );
      }
    }
    return unserved(op);
  }

  // ---- what may be changed -------------------------------------------------------------------------------

  private target(mountIndex: unknown, parts: unknown, root = false): Target {
    const index = typeof mountIndex === "number" && Number.isInteger(mountIndex) ? mountIndex : -1;
    const mount = this.mounts[index];
    if (!mount?.writable) throw new Refused("EROFS", "not a read-write mount");
    const bad = badPath(parts);
    if (bad) throw new Refused("EINVAL", `a bad path: ${bad}`);
    const names = parts as string[];
    if (!names.length && !root) throw new Refused("EBUSY", `${mount.guest} itself cannot be changed`);
    return {
      index,
      mount,
      parts: names,
      host: [mount.host, ...names].join("/"),
      guest: [mount.guest, ...names].join("/"),
    };
  }

  private handleOf(value: unknown): Handle {
    const handle = typeof value === "number" ? this.handles.get(value) : undefined;
    if (!handle) throw new Refused("EBADF");
    return handle;
  }

  /** Refuse a change to `t` that is not a plain data file (or, with `directory`, folder) of the allowlist, or that
   * goes through a symlink or into a virtual environment. */
  private mayChange(t: Target, directory: boolean): void {
    const why = hostWritable(t.parts, directory, t.mount.hostWrites, t.mount.suffixes);
    if (why) {
      throw new Refused(
        "EACCES",
        `changing ${t.guest} in the host folder is refused: ${why}. Only plain data files (${
          DATA_SUFFIXES.join(" ")
        }) reach the host; anything else stays inside the sandbox (docs/security.md, "Host folders are default-deny")`,
      );
    }
    for (let k = 0; k <= t.parts.length; k++) {
      const facts = this.folderFacts([t.mount.host, ...t.parts.slice(0, k)].join("/"), k > 0 && k < t.parts.length);
      const folder = [t.mount.guest, ...t.parts.slice(0, k)].join("/");
      if (facts.symlink) {
        throw new Refused(
          "EACCES",
          `changing ${t.guest} is refused: ${folder} is a symbolic link, which the ` +
            "sandbox does not follow for writing",
        );
      }
      if (facts.virtualenv) {
        throw new Refused(
          "EACCES",
          `changing ${t.guest} is refused: it is inside the Python virtual environment ` +
            `${folder} (it holds ${VIRTUALENV_MARKER}), whose programs and packages run on the host`,
        );
      }
    }
  }

  /** Whether `path` is a symlink (asked only of folders on the way) and whether it holds `pyvenv.cfg`. */
  private folderFacts(path: string, onTheWay: boolean): FolderFacts {
    const now = performance.now();
    const known = this.folders.get(path);
    if (known && now - known.at < FOLDER_FACTS_MS && (known.asked || !onTheWay)) return known;
    const facts = {
      symlink: onTheWay && Boolean(lstat(path)?.isSymlink),
      virtualenv: lstat(`${path}/${VIRTUALENV_MARKER}`) !== null,
      asked: onTheWay,
      at: now,
    };
    if (this.folders.size > 4096) this.folders.clear();
    this.folders.set(path, facts);
    return facts;
  }

  private maySuffix(t: Target): void {
    const name = t.parts[t.parts.length - 1] ?? "";
    if (!suffixAllowed(name, t.mount.suffixes)) {
      throw new Refused(
        "EACCES",
        `files written to ${t.mount.guest} must end in ${t.mount.suffixes.join(", ")} ` +
          `(SandboxKernel.mount_limits); ${t.guest} does not`,
      );
    }
  }

  private maySize(t: Target, end: number): void {
    const max = t.mount.maxFileBytes;
    if (max !== null && end > max) {
      throw new Refused(
        "EFBIG",
        `files in ${t.mount.guest} may be at most ${max} bytes (SandboxKernel.` +
          `mount_limits[${JSON.stringify(t.mount.guest)}]["max_file_bytes"]); this would make ${t.guest} ${end} bytes`,
      );
    }
  }

  /** Check that growing the mount's files by `delta` bytes stays within max_growth_bytes and max_total_bytes,
   * then count it. */
  private async grow(t: Target, delta: number, check = true): Promise<void> {
    if (delta === 0) return;
    const { grown, used } = await this.counts(t);
    if (check) this.mayGrow(t, delta, grown, used);
    this.grown.set(t.index, grown + delta);
    if (used !== null) this.used.set(t.index, Math.max(0, used + delta));
  }

  private async counts(t: Target): Promise<{ grown: number; used: number | null }> {
    const tracked = this.used.get(t.index);
    return { grown: this.grown.get(t.index) ?? 0, used: tracked === undefined ? null : await tracked };
  }

  /** Refuse growing the mount's files by `delta` past max_total_bytes or max_growth_bytes (counting nothing). */
  private mayGrow(t: Target, delta: number, grown: number, used: number | null): void {
    if (delta > 0 && used !== null && used + delta > (t.mount.maxTotalBytes as number)) {
      throw new Refused(
        "ENOSPC",
        `${t.mount.guest} may hold at most ${t.mount.maxTotalBytes} bytes of files (SandboxKernel.` +
          `mount_limits[${JSON.stringify(t.mount.guest)}]["max_total_bytes"]); it holds ${used}, and this would ` +
          `add ${delta}`,
      );
    }
    const quota = t.mount.maxGrowthBytes;
    if (delta > 0 && grown + delta > quota) {
      throw new Refused(
        "ENOSPC",
        `the sandbox may add at most ${quota} bytes to ${t.mount.guest} (apparent sizes: a sparse file counts at ` +
          `its full length; SandboxKernel.mount_limits[${JSON.stringify(t.mount.guest)}]["max_growth_bytes"]); ` +
          `it has added ${grown}, and this would add ${delta} more (${t.guest})`,
      );
    }
  }

  /**
   * How many more bytes the file of `h` (now `size` bytes) may grow by before a limit refuses a write: the guest's
   * glue lets writes wait in Python's buffers only while they fit, so the write that crosses a limit is the one
   * that fails. Exact for one file being written; others written meanwhile share max_total_bytes and the quota.
   */
  private async room(h: Handle, size: number): Promise<number> {
    const t = h.target;
    const { grown, used } = await this.counts(t);
    let room = t.mount.maxGrowthBytes - grown;
    if (t.mount.maxFileBytes !== null) room = Math.min(room, t.mount.maxFileBytes - size);
    if (used !== null) room = Math.min(room, (t.mount.maxTotalBytes as number) - used);
    return Math.max(0, room);
  }

  // ---- the calls -----------------------------------------------------------------------------------------

  private async mknod(t: Target, directory: boolean, mode: number): Promise<unknown> {
    this.mayChange(t, directory);
    const safe = safeMode(mode, directory);
    const partial = isPartialName(t.parts[t.parts.length - 1]);
    if (directory) {
      Deno.mkdirSync(t.host, { mode: safe });
    } else {
      this.maySuffix(t);
      if (partial) await this.aboutToMake(t.index, t.parts); // rwfs.ts copyOut
      Deno.openSync(t.host, { write: true, createNew: true, mode: safe }).close();
    }
    const info = Deno.lstatSync(t.host);
    if (!directory && !partial) {
      if (this.made.size >= MAX_MADE) this.made.clear(); // made but never opened for writing: nothing to remove
      this.made.set(t.host, inode(info)); // a new name: if the process dies before it is written whole, it goes
    }
    return { mode: info.mode };
  }

  private async open(t: Target, flags: number): Promise<unknown> {
    const access = flags & O_ACCMODE;
    if (access === 0) throw new Refused("EINVAL", "the sandbox opens files for reading itself");
    this.mayChange(t, false);
    this.maySuffix(t);
    const info = Deno.lstatSync(t.host);
    if (info.isSymlink) {
      throw new Refused(
        "EACCES",
        `writing ${t.guest} is refused: it is a symbolic link, which the sandbox does ` +
          "not follow for writing",
      );
    }
    if (!info.isFile) throw new Refused("EISDIR");
    if (this.handles.size >= MAX_HANDLES) throw new Refused("EMFILE", `more than ${MAX_HANDLES} files open`);
    const append = (flags & O_APPEND) !== 0;
    // The guest's bytes are never executable on the host, even in a file that was (host_writes 'any' too).
    if ((info.mode ?? 0) & 0o7111) Deno.chmodSync(t.host, (info.mode ?? 0) & 0o666);
    const aside = isPartialName(t.parts[t.parts.length - 1])
      ? undefined
      : await this.aside(t, info, (flags & O_TRUNC) !== 0);
    const file = Deno.openSync(aside?.partial ?? t.host, { read: access === O_RDWR, write: true, append });
    const handle = this.nextHandle++;
    const h: Handle = { file, target: t, append, offset: append ? -1 : 0, ino: inode(file.statSync()), aside };
    this.handles.set(handle, h);
    return { handle, room: await this.room(h, file.statSync().size) }; // the aside file's size, not the name's
  }

  /**
   * Where the bytes of `t` (now as `info`) go while it is open for writing: a data name beside it that starts as
   * a copy of it (empty with `truncate`), shared by every handle to it, renamed over it when the last one closes
   * (`publish`). So the host holds the file whole or as it was: never part-written, also when this process is
   * killed mid-write (then the kernel removes the `*.sandbox-partial-<tag>-*` file it leaves beside it).
   */
  private async aside(t: Target, info: Deno.FileInfo, truncate: boolean): Promise<Aside> {
    const known = this.asides.get(t.host);
    if (known && !known.settled && known.was === inode(info)) { // the same file open again: one aside file, as POSIX shares one file
      known.handles++;
      if (truncate) {
        // Its bytes past `base` were counted as they were written; the copy it began with is dropped too.
        const size = Deno.lstatSync(known.partial).size;
        Deno.truncateSync(known.partial, 0);
        await this.grow(t, -(size - known.base), false);
        known.base = 0;
      }
      return known;
    }
    const tag = `${this.tag}-${(this.partials++).toString(36)}`;
    const parts = partialName(t.parts, tag, t.mount.hostWrites, t.mount.suffixes);
    const partial = [t.mount.host, ...parts].join("/");
    const made = this.made.get(t.host);
    this.made.delete(t.host);
    const name = t.parts[t.parts.length - 1];
    // The name is still the empty file this sandbox made: the kernel removes it too if this process ends before the
    // aside file is renamed over it (so a new file reaches the host whole or not at all).
    const fresh = made !== undefined && made === inode(info) && info.size === 0 && info.ino !== null;
    await this.aboutToMake(t.index, parts, fresh ? { name, dev: info.dev, ino: info.ino as number } : undefined);
    const mode = (info.mode ?? 0o644) & 0o666;
    const file = Deno.openSync(partial, { write: true, createNew: true, mode });
    try {
      if (!truncate && info.size > 0) {
        const source = Deno.openSync(t.host, { read: true });
        try {
          const chunk = new Uint8Array(MAX_CHUNK);
          for (let n = source.readSync(chunk); n !== null; n = source.readSync(chunk)) {
            for (let done = 0; done < n;) done += file.writeSync(chunk.subarray(done, n));
          }
        } finally {
          source.close();
        }
      }
      Deno.chmodSync(partial, mode);
    } catch (err) {
      Deno.removeSync(partial);
      throw err;
    } finally {
      file.close();
    }
    const aside = {
      partial,
      handles: 1,
      was: inode(info),
      base: truncate ? 0 : info.size,
      settled: false,
    };
    // (One open before this, of a file since moved away, keeps its own.) Nothing is given back here: the file at
    // the name stays on the host until the aside file replaces it (`replace`).
    this.asides.set(t.host, aside);
    return aside;
  }

  /**
   * Before the file at `host` (or, with `under`, any file below it) is moved, removed or changed by its name while
   * it is being written aside: put what is written so far at its name, and write it in place from then on, as
   * POSIX has the handles keep the file whatever happens to its name.
   */
  private async settle(t: Target, host: string, under = false): Promise<void> {
    for (const [path, aside] of [...this.asides]) {
      if (path !== host && !(under && path.startsWith(`${host}/`))) continue;
      this.asides.delete(path);
      const replaced = lstat(path);
      if (inode(replaced) !== aside.was) continue; // its name holds another file now: publish() drops it
      await this.replace(t, aside, path, replaced as Deno.FileInfo);
      aside.settled = true;
    }
  }

  /**
   * Rename the aside file over `path`, which holds `replaced`: the copy it began with (`base`) is counted from now
   * on, and `replaced` is given back now, or when its last handle closes if one holds it (as rename() does).
   */
  private async replace(t: Target, aside: Aside, path: string, replaced: Deno.FileInfo): Promise<void> {
    Deno.renameSync(aside.partial, path);
    await this.grow(t, aside.base, false);
    await this.freed(t, replaced);
  }

  /** The last handle of a file written aside closed: rename it over its name, unless that name is no longer the
   * file it began as (removed or replaced meanwhile: then the bytes written go away with the handle, counted). */
  private async publish(t: Target, aside: Aside, size: number): Promise<void> {
    if (this.asides.get(t.host) === aside) this.asides.delete(t.host);
    const replaced = lstat(t.host);
    if (replaced && inode(replaced) === aside.was) {
      await this.replace(t, aside, t.host, replaced);
      return;
    }
    Deno.removeSync(aside.partial);
    await this.grow(t, -(size - aside.base), false);
    if (size !== aside.base) {
      throw new Refused(
        "EIO",
        `${t.guest} was renamed or removed while it was open for writing, so what was written through this handle ` +
          "is dropped (a file being written reaches the host folder whole when it is closed, under the name it " +
          "was opened by): close a file before renaming it",
      );
    }
  }

  /** Whether a handle holds the file `info` (then removing its last name frees nothing yet). */
  private heldOpen(info: Deno.FileInfo): boolean {
    const ino = inode(info);
    for (const h of this.handles.values()) if (h.ino === ino) return true;
    return false;
  }

  /** Give back the bytes of a file whose last name went away (now, or when its last handle closes). */
  private async freed(t: Target, info: Deno.FileInfo): Promise<void> {
    if (!info.isFile || (info.nlink ?? 1) > 1 || this.heldOpen(info)) return;
    await this.grow(t, -info.size, false);
  }

  private async close(id: number, h: Handle): Promise<unknown> {
    const info = h.file.statSync();
    this.handles.delete(id);
    h.file.close();
    const aside = h.aside && !h.aside.settled ? h.aside : undefined;
    if (aside && --aside.handles === 0) await this.publish(h.target, aside, info.size);
    else if (!aside && info.nlink === 0) await this.freed(h.target, { ...info, nlink: 1 });
    return {};
  }

  /** Write `data` at `position`; `whole`: the bytes of the guest's whole write() this chunk starts (checked
   * against the limits before its first chunk lands, so a refused write() leaves none of its bytes). */
  private async write(h: Handle, position: number, data: Uint8Array, whole: number): Promise<unknown> {
    const size = h.file.statSync().size;
    const end = h.append ? size + data.length : Math.max(size, position + data.length);
    const ahead = Math.max(whole, data.length);
    const wholeEnd = h.append ? size + ahead : Math.max(size, position + ahead);
    this.maySize(h.target, wholeEnd);
    const { grown, used } = await this.counts(h.target);
    this.mayGrow(h.target, wholeEnd - size, grown, used); // the whole write(): this chunk's growth is part of it
    await this.grow(h.target, end - size, false);
    this.seek(h, position);
    let written = 0;
    try {
      while (written < data.length) written += h.file.writeSync(data.subarray(written));
    } finally {
      h.offset = h.append ? -1 : h.offset + written;
    }
    return { written, room: await this.room(h, Math.max(end, size)) };
  }

  /** Put the file's cursor at `position` (append handles write at the end whatever it is). */
  private seek(h: Handle, position: number): void {
    if (h.append || h.offset === position) return;
    h.offset = -1;
    h.file.seekSync(position, Deno.SeekMode.Start);
    h.offset = position;
  }

  private read(h: Handle, position: number, length: number): Answer {
    const buffer = new Uint8Array(Math.min(length, MAX_CHUNK));
    if (h.append) h.file.seekSync(position, Deno.SeekMode.Start);
    else this.seek(h, position);
    let filled = 0;
    try {
      while (filled < buffer.length) {
        const n = h.file.readSync(buffer.subarray(filled));
        if (n === null) break;
        filled += n;
      }
    } finally {
      h.offset = h.append ? -1 : h.offset + filled;
    }
    return { json: { read: filled }, payload: buffer.subarray(0, filled) };
  }

  private async setattr(req: Request): Promise<unknown> {
    const handle = req.handle === undefined ? null : this.handleOf(req.handle);
    const t = handle ? handle.target : this.target(req.mount, req.path, true);
    // Through a handle: its own file (the name it was opened by may be another file now, or none).
    if (!handle) await this.settle(t, t.host);
    const info = handle ? handle.file.statSync() : Deno.lstatSync(t.host);
    const path = handle?.aside && !handle.aside.settled ? handle.aside.partial : t.host; // its mode goes with it
    if (handle && (req.mode ?? req.atime ?? req.mtime) !== undefined && inode(lstat(path)) !== handle.ino) {
      throw new Refused("EIO", `${t.guest} was moved or removed since it was opened: change its mode by its name`);
    }
    if (t.parts.length) this.mayChange(t, info.isDirectory);
    if (info.isSymlink) throw new Refused("EACCES", `changing ${t.guest} is refused: it is a symbolic link`);
    if (req.size !== undefined && req.size !== null) {
      const size = count(req.size, "size");
      if (!info.isFile) throw new Refused("EISDIR");
      this.maySize(t, size);
      await this.grow(t, size - info.size);
      if (handle) handle.file.truncateSync(size);
      else Deno.truncateSync(t.host, size);
    }
    if (req.mode !== undefined && req.mode !== null) {
      if (!t.parts.length) throw new Refused("EBUSY", `the mode of ${t.guest} itself cannot be changed`);
      const mode = safeMode(count(req.mode, "mode"), info.isDirectory);
      if (info.isDirectory && (mode & 0o700) !== 0o700) {
        throw new Refused(
          "EPERM",
          `changing the mode of the folder ${t.guest} to ${mode.toString(8).padStart(3, "0")} is refused: the ` +
            "sandbox does not take its owner's access to a host folder away (modes that keep rwx for the owner " +
            "are allowed, without group or world write)",
        );
      }
      Deno.chmodSync(path, mode);
    }
    if (req.atime !== undefined || req.mtime !== undefined) {
      const atime = req.atime === undefined ? info.atime : new Date(count(req.atime, "time"));
      const mtime = req.mtime === undefined ? info.mtime : new Date(count(req.mtime, "time"));
      Deno.utimeSync(path, atime ?? new Date(), mtime ?? new Date());
    }
    const mode = Deno.lstatSync(path).mode;
    return handle ? { mode, room: await this.room(handle, handle.file.statSync().size) } : { mode };
  }

  private async remove(t: Target, directory: boolean): Promise<unknown> {
    this.mayChange(t, directory);
    if (!directory) await this.settle(t, t.host);
    const info = Deno.lstatSync(t.host);
    if (directory && !info.isDirectory) throw new Refused("ENOTDIR");
    if (!directory && info.isDirectory) throw new Refused("EISDIR");
    Deno.removeSync(t.host);
    await this.freed(t, info);
    return {};
  }

  /** A folder moves only when everything in it may be written at its new place (it would be a write there). */
  private mayMoveFolder(from: Target, to: Target): void {
    let seen = 0;
    const walk = (host: string, parts: string[]) => {
      for (const entry of Deno.readDirSync(host)) {
        if (++seen > MAX_MOVED) throw new Refused("EXDEV", `${from.guest} holds too many entries to move`);
        const inside = [...parts, entry.name];
        const why = entry.isSymlink
          ? "a symbolic link"
          : hostWritable(inside, entry.isDirectory, "data", to.mount.suffixes);
        if (why) {
          throw new Refused(
            "EXDEV",
            `moving the folder ${from.guest} is refused: what is in it would not be ` +
              `allowed at ${[to.mount.guest, ...inside].join("/")} (${why})`,
          );
        }
        if (entry.isDirectory) walk(`${host}/${entry.name}`, inside);
      }
    };
    walk(from.host, to.parts);
  }

  private async rename(from: Target, to: Target): Promise<unknown> {
    const info = Deno.lstatSync(from.host);
    this.mayChange(from, info.isDirectory);
    this.mayChange(to, info.isDirectory);
    if (info.isSymlink) throw new Refused("EACCES", `moving ${from.guest} is refused: it is a symbolic link`);
    if (info.isDirectory && from.mount.hostWrites === "data") this.mayMoveFolder(from, to);
    if (info.isFile) this.maySuffix(to);
    await this.settle(from, from.host, info.isDirectory);
    await this.settle(to, to.host, true);
    const replaced = lstat(to.host);
    if (replaced && inode(replaced) === inode(info)) return {}; // the same file (rename(2): nothing to do)
    Deno.renameSync(from.host, to.host);
    if (replaced) await this.freed(to, replaced);
    return {};
  }
}
