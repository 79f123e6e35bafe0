/**
 * The worker's file-system driver for host folders: one merged view of the host folder and a sandbox-side layer.
 *
 * A change reaches the host only when it is a plain data file of the allowlist (write_policy.ts `hostWritable`,
 * the same predicate the supervisor applies) in a read-write mount: it goes to the supervisor's file service over
 * the file channel, which checks it again and answers with an errno code (and, for a refusal, the reason, which the
 * guest's Python glue puts into the exception it raises). Everything else (a `helpers.py`, `.git/`, a read-only
 * mount's every write) goes into the upper layer: a plain MEMFS tree at `/.sandbox_overlay/<guest path, URI-encoded>/upper`,
 * with deleted host entries listed in `/.sandbox_overlay/<guest path, URI-encoded>/whiteouts.json`, so a checkpoint keeps it
 * like any of the sandbox's own files. Lookups try the upper layer first, then the host; listings merge; a write to
 * a host file that may not be changed copies it up first. The user is told once per file (`notice`).
 */
import { type FileClient, MAX_CHUNK } from "./file_channel.ts";
import type { FileOp } from "./protocol.ts";
import {
  hostWritable,
  type HostWrites,
  isPartialName,
  MAX_DEPTH,
  OPT_IN_SUFFIXES,
  partialName,
  safeMode,
} from "./write_policy.ts";

export const OVERLAY_ROOT = "/.sandbox_overlay";
const O_ACCMODE = 3;
const O_WRONLY = 1;
const O_CREAT = 64;
const O_EXCL = 128;
const O_TRUNC = 512;
const O_APPEND = 1024;
const EIO = 29;
const EBADF = 8;
const EINVAL = 28;
const ENODEV = 43;
const ENOENT = 44;
const EXDEV = 75;
const EFBIG = 22;
const ENOTEMPTY = 55;
const UMASK = 0o022; // what a normal Python's files get; Emscripten has none

/** A mount as the driver gets it (FS.mount's opts). */
export interface MountOpts {
  root: string; // the host folder
  index: number;
  guest: string;
  writable: boolean;
  hostWrites: HostWrites;
  suffixes: string[]; // the mount's own `suffixes` (".json"): an opt-in suffix is host data only when named here
  maxGrowthBytes: number; // also the largest file the upper layer takes
  partialTag: string; // this sandbox's part of the names of files written aside (the kernel removes leftovers)
}

/** The parts of Emscripten's FS this driver uses (Pyodide's `pyodide.FS`). */
export interface EmNode {
  name: string;
  parent: EmNode;
  mode: number;
  mount: { opts: MountOpts };
  node_ops: unknown;
  stream_ops: unknown;
}

export interface EmStream {
  node: EmNode;
  flags: number;
  position: number;
  shared: { refcount?: number };
  handle?: number; // a host file open for writing in the supervisor
  room?: number; // bytes the file may still grow by before a limit refuses a write (the guest's glue reads it)
  upper?: EmStream; // the upper layer's file, opened through FS
  stream_ops?: Ops;
}

type Bytes = Int8Array | Uint8Array;
type Attr = { mode?: number; atime?: number; mtime?: number; size?: number };
// deno-lint-ignore no-explicit-any
type Ops = Record<string, (...args: any[]) => any>;
type Stat = { mode: number; size: number };

export interface EmFS {
  ErrnoError: new (errno: number) => Error;
  createNode(parent: EmNode | null, name: string, mode: number, dev: number): EmNode;
  lookupNode(parent: EmNode, name: string): EmNode;
  destroyNode(node: EmNode): void;
  isDir(mode: number): boolean;
  isFile(mode: number): boolean;
  mount(type: unknown, opts: MountOpts, mountpoint: string): unknown;
  lstat(path: string): Stat;
  mkdirTree(path: string, mode?: number): void;
  mkdir(path: string, mode?: number): void;
  mknod(path: string, mode: number, dev: number): void;
  symlink(target: string, path: string): void;
  readlink(path: string): string;
  readdir(path: string): string[];
  readFile(path: string, opts?: { encoding: string }): Uint8Array | string;
  writeFile(path: string, data: Uint8Array | string): void;
  open(path: string, flags: number, mode?: number): EmStream;
  close(stream: EmStream): void;
  read(stream: EmStream, buffer: Bytes, offset: number, length: number, position: number): number;
  write(stream: EmStream, buffer: Bytes, offset: number, length: number, position: number): number;
  unlink(path: string): void;
  rmdir(path: string): void;
  rename(from: string, to: string): void;
  chmod(path: string, mode: number): void;
  truncate(path: string, size: number): void;
  utime(path: string, atime: number, mtime: number): void;
  filesystems: {
    NODEFS: {
      node_ops: Ops;
      stream_ops: Ops;
      getMode(path: string): number;
      realPath(node: EmNode): string;
      convertNodeCode(e: { code: string }): number | undefined;
    };
  };
}

/** What the driver tells the user and the guest's glue. */
export interface Telling {
  refused(message: string): void; // the reason for the errno of the call being made (take_refusal)
  notice(message: string): void; // a line for the cell's stderr
}

const readHostFile = Deno.readFileSync; // captured before guest code runs
const statHostFile = Deno.statSync;
const { stringify, parse } = JSON;

/** The driver, for `FS.mount(driver, opts, guestPath)`. */
export function writableFS(FS: EmFS, client: FileClient, tell: Telling): Ops {
  const NODEFS = FS.filesystems.NODEFS;
  const errno = (code: string) => new FS.ErrnoError(NODEFS.convertNodeCode({ code }) || EIO);

  /** One call to the supervisor's file service (`op`: one of protocol.json's fileOps). */
  function call(
    json: { op: FileOp; [field: string]: unknown },
    payload?: Uint8Array,
  ): { answer: Record<string, unknown>; data: Uint8Array } {
    const { json: answer, payload: data } = client.call(json, payload);
    const a = (answer ?? {}) as Record<string, unknown>;
    if (a.code !== undefined) {
      if (typeof a.message === "string") tell.refused(a.message);
      throw new FS.ErrnoError((typeof a.code === "string" && NODEFS.convertNodeCode({ code: a.code })) || EIO);
    }
    return { answer: a, data };
  }

  function parts(node: EmNode): string[] {
    const names = [];
    for (let n = node; n.parent !== n; n = n.parent) names.push(n.name);
    return names.reverse();
  }

  const opts = (node: EmNode) => node.mount.opts;
  const at = (node: EmNode, path: string[]) => ({ mount: opts(node).index, path });
  const view = (buffer: Bytes, offset: number, length: number) =>
    new Uint8Array(buffer.buffer, buffer.byteOffset + offset, length);
  const guestPath = (o: MountOpts, p: string[]) => [o.guest, ...p].join("/");

  // ---- the two layers ------------------------------------------------------------------------------------

  // Keyed by the mount's guest path, not its place in the list: a checkpoint restored with other mounts (or in
  // another order) puts each folder's layer back over the folder at that path.
  const layer = (o: MountOpts) => `${OVERLAY_ROOT}/${encodeURIComponent(o.guest)}`;
  const upperPath = (o: MountOpts, p: string[]) => [`${layer(o)}/upper`, ...p].join("/");
  const hostPath = (o: MountOpts, p: string[]) => [o.root, ...p].join("/");

  function upperStat(o: MountOpts, p: string[]): Stat | null {
    try {
      return FS.lstat(upperPath(o, p));
    } catch {
      return null;
    }
  }

  function hostMode(o: MountOpts, p: string[]): number | null {
    if (hidden(o, p)) return null;
    try {
      return NODEFS.getMode(hostPath(o, p));
    } catch {
      return null;
    }
  }

  // Whiteouts: host paths deleted in the sandbox (kept on the host). A file in MEMFS, so checkpoints keep it.
  const whiteouts = new Map<string, { key: string; paths: Set<string> }>();
  const whiteoutFile = (o: MountOpts) => `${layer(o)}/whiteouts.json`;

  function whiteoutSet(o: MountOpts): Set<string> {
    let key = "none";
    try {
      const s = FS.lstat(whiteoutFile(o)) as Stat & { ino?: number; mtime?: unknown };
      key = `${s.ino}:${String(s.mtime)}:${s.size}`;
    } catch {
      // none yet
    }
    const known = whiteouts.get(o.guest);
    if (known?.key === key) return known.paths;
    let paths = new Set<string>();
    if (key !== "none") {
      try {
        const list = parse(FS.readFile(whiteoutFile(o), { encoding: "utf8" }) as string);
        if (Array.isArray(list)) paths = new Set(list.filter((x) => typeof x === "string"));
      } catch {
        // unreadable: none
      }
    }
    whiteouts.set(o.guest, { key, paths });
    return paths;
  }

  function whiteOut(o: MountOpts, p: string[]): void {
    const paths = whiteoutSet(o);
    paths.add(p.join("/"));
    FS.mkdirTree(layer(o));
    FS.writeFile(whiteoutFile(o), stringify([...paths]));
    whiteouts.delete(o.guest); // re-read (with its new key) on the next use
    tell.notice(
      `sandbox: deleting ${guestPath(o, p)} stays inside the sandbox: the host folder keeps the file ` +
        "(it is not a data file the sandbox may change there).",
    );
  }

  /** Whether the host entry at `p` (or a folder above it) was deleted in the sandbox. */
  function hidden(o: MountOpts, p: string[]): boolean {
    const paths = whiteoutSet(o);
    if (!paths.size) return false;
    for (let k = 1; k <= p.length; k++) if (paths.has(p.slice(0, k).join("/"))) return true;
    return false;
  }

  /** Why a new file at `p` may not go to the host, or null when it goes there (folders on the way are made on the
   * host when it is written: an empty folder stays inside the sandbox). */
  function whyNotHost(o: MountOpts, p: string[], directory: boolean): string | null {
    if (!o.writable) return `${o.guest} is a read-only mount`;
    if (p.length > MAX_DEPTH) return `the path is too deep for the host folder (at most ${MAX_DEPTH} names)`;
    const why = hostWritable(p, directory, o.hostWrites, o.suffixes);
    if (why) return why;
    if (hidden(o, p) || upperStat(o, p)) return "it replaces a file inside the sandbox";
    return null;
  }

  /** Make the host folders on the way to `p` that are so far only in the sandbox (the service checks each). */
  function materialize(o: MountOpts, folder: string[]): void {
    for (let k = 1; k <= folder.length; k++) {
      const p = folder.slice(0, k);
      if (hostMode(o, p) === null) call({ op: "mknod", mount: o.index, path: p, mode: 0o755, dir: true });
    }
  }

  /** Whether an existing host entry at `p` may be changed on the host. */
  const hostChangeable = (o: MountOpts, p: string[], directory: boolean) =>
    o.writable && hostWritable(p, directory, o.hostWrites, o.suffixes) === null;

  const told = new Set<string>();
  function staysInside(o: MountOpts, p: string[], why: string): void {
    const path = guestPath(o, p);
    if (told.has(path) || p.includes("__pycache__")) return;
    if (told.size > 10_000) told.clear();
    told.add(path);
    const out = o.writable
      ? ` To take it out on purpose: download it (the agent API's download(), or download_file over MCP: docs/agents.md), or let this ` +
        `folder take any file: SandboxKernel.mount_limits = {${stringify(o.guest)}: {"host_writes": "any"}} ` +
        `(docs/security.md, "Host folders are default-deny").`
      : " To take it out: download it (the agent API's download(), or download_file over MCP: docs/agents.md).";
    const optIn = o.writable && OPT_IN_SUFFIXES.some((s) => path.toLowerCase().endsWith(s))
      ? ` To let this folder take ${OPT_IN_SUFFIXES.join(" and ")} files (tools may read them as settings or code): ` +
        `SandboxKernel.mount_limits = {${stringify(o.guest)}: {"suffixes": [${
          OPT_IN_SUFFIXES.map((s) => stringify(s)).join(", ")
        }, ".csv", ...]}}.`
      : "";
    tell.notice(
      `sandbox: ${path} stays inside the sandbox, not in the host folder (${why}; only plain data files such as ` +
        `.csv, .parquet, .png reach the host).${optIn}${out}`,
    );
  }

  function ensureUpperFolder(o: MountOpts, p: string[]): void {
    FS.mkdirTree(upperPath(o, p));
  }

  /** Copy the host file (or folder) at `p` into the upper layer. */
  function copyUp(o: MountOpts, p: string[], mode: number): void {
    if (upperStat(o, p)) return;
    ensureUpperFolder(o, p.slice(0, -1));
    if (FS.isDir(mode)) {
      FS.mkdir(upperPath(o, p), mode & 0o777);
      return;
    }
    if (!FS.isFile(mode)) throw new FS.ErrnoError(EXDEV);
    // A data file may be open for writing here, its bytes written aside until closed: a setattr by its name with
    // no change has the supervisor put them at its name first (file_service.ts `settle`).
    if (hostChangeable(o, p, false)) call({ op: "setattr", mount: o.index, path: p });
    let data: Uint8Array;
    try {
      // The size first: reading a file past the layer's limit into memory would end the sandbox.
      const size = statHostFile(hostPath(o, p)).size;
      if (size > o.maxGrowthBytes) tooLarge(o, p, size);
      data = readHostFile(hostPath(o, p));
    } catch (err) {
      if (err instanceof FS.ErrnoError) throw err;
      throw errno(String((err as { code?: unknown })?.code ?? "ENOENT")); // gone from the host meanwhile
    }
    if (data.length > o.maxGrowthBytes) tooLarge(o, p, data.length);
    FS.writeFile(upperPath(o, p), data);
    FS.chmod(upperPath(o, p), mode & 0o777);
  }

  function tooLarge(o: MountOpts, p: string[], size: number): never {
    tell.refused(
      `files inside the sandbox's layer over ${o.guest} may be at most ${o.maxGrowthBytes} bytes (SandboxKernel.` +
        `mount_limits[${stringify(o.guest)}]["max_growth_bytes"]); this would make ${guestPath(o, p)} ${size} bytes ` +
        "(a host file that may not be changed there is copied into that layer to be written)",
    );
    throw new FS.ErrnoError(EFBIG);
  }

  /** Remove the host entry at `p` as the guest sees it: on the host when it may, else a whiteout. */
  function removeHost(o: MountOpts, p: string[], directory: boolean): void {
    if (hostMode(o, p) === null) return;
    if (hostChangeable(o, p, directory)) {
      const answer = client.call({ op: directory ? "rmdir" : "unlink", mount: o.index, path: p }).json;
      const code = (answer as { code?: string } | null)?.code;
      if (code === undefined) return;
      if (!(directory && code === "ENOTEMPTY")) {
        const message = (answer as { message?: unknown }).message;
        if (typeof message === "string") tell.refused(message);
        throw errno(code);
      }
    }
    whiteOut(o, p);
  }

  // ---- the driver ----------------------------------------------------------------------------------------

  // Emscripten's FS.open truncates a file opened with O_TRUNC by its name before the stream opens: for a host file
  // that truncate is left to the supervisor's open (it writes the file aside from empty, so the host keeps the
  // old bytes until the new ones are complete). `opening`: the flags of the FS.open under way.
  let opening = 0;
  let truncating: EmNode | null = null;
  const realOpen = FS.open;
  FS.open = (path: string, flags: number, mode?: number): EmStream => {
    const outer = [opening, truncating] as const;
    opening = typeof flags === "number" ? flags : 0;
    truncating = null;
    try {
      return realOpen(path, flags, mode);
    } finally {
      [opening, truncating] = outer;
    }
  };

  const driver: Ops = {
    mount(mount: { opts: MountOpts }) {
      return driver.createNode(null, "/", NODEFS.getMode(mount.opts.root), 0);
    },
    createNode(parent: EmNode | null, name: string, mode: number, dev: number) {
      const node = FS.createNode(parent, name, mode, dev);
      node.node_ops = nodeOps;
      node.stream_ops = streamOps;
      return node;
    },
  };

  function change(attr: Attr): Record<string, number> {
    const out: Record<string, number> = {};
    if (attr.mode !== undefined) out.mode = attr.mode & 0o7777;
    if (typeof attr.atime === "number") out.atime = attr.atime;
    if (typeof attr.mtime === "number") out.mtime = attr.mtime;
    if (attr.size !== undefined) out.size = attr.size;
    return out;
  }

  function setattr(node: EmNode, attr: Attr, stream?: EmStream): void {
    const handle = stream?.handle;
    const o = opts(node);
    const p = parts(node);
    const changes = change(attr);
    if (!Object.keys(changes).length) return; // chown and the like: nothing to do
    const directory = FS.isDir(node.mode);
    if (!upperStat(o, p) && hostChangeable(o, p, directory)) {
      if (handle === undefined && (opening & O_TRUNC) && changes.size === 0 && Object.keys(changes).length === 1) {
        truncating = node; // open(..., "w"): the file is written aside from empty, its name keeps it till then
        return;
      }
      // A mode the host would not change (the chmod Emscripten makes after creating a file, mostly): no call.
      const { mode, ...rest } = changes;
      if (mode !== undefined && !Object.keys(rest).length && safeMode(mode, directory) === (node.mode & 0o7777)) {
        return;
      }
      const target = handle !== undefined ? { handle } : at(node, p);
      const { answer } = call({ op: "setattr", ...target, ...changes });
      if (typeof answer.mode === "number") node.mode = answer.mode;
      if (stream && typeof answer.room === "number") stream.room = answer.room;
      return;
    }
    if (!upperStat(o, p)) {
      if (changes.mode !== undefined && Object.keys(changes).length === 1 && changes.mode === (node.mode & 0o7777)) {
        return;
      }
      if (!p.length) return; // the mount's own folder: nothing to keep
      copyUp(o, p, node.mode);
      if (!directory) staysInside(o, p, whyNotHost(o, p, false) ?? "it was changed inside the sandbox");
    }
    const path = upperPath(o, p);
    if (changes.size !== undefined) {
      if (changes.size > o.maxGrowthBytes) tooLarge(o, p, changes.size);
      FS.truncate(path, changes.size);
    }
    if (changes.mode !== undefined) FS.chmod(path, changes.mode);
    if (changes.atime !== undefined || changes.mtime !== undefined) {
      FS.utime(path, changes.atime ?? Date.now(), changes.mtime ?? Date.now());
    }
    node.mode = FS.lstat(path).mode;
  }

  const nodeOps: Ops = {
    getattr(node: EmNode) {
      const o = opts(node);
      const p = parts(node);
      if (p.length) {
        try {
          return FS.lstat(upperPath(o, p));
        } catch {
          // not in the upper layer
        }
      }
      return NODEFS.node_ops.getattr(node);
    },
    readdir(node: EmNode) {
      const o = opts(node);
      const p = parts(node);
      const names = new Set<string>([".", ".."]);
      if (FS.isDir(hostMode(o, p) ?? 0)) {
        for (const name of NODEFS.node_ops.readdir(node) as string[]) {
          // (a file's bytes on their way in, file_service.ts `aside`: not a file of the folder yet)
          if (!hidden(o, [...p, name]) && !isPartialName(name)) names.add(name);
        }
      }
      if (upperStat(o, p)) { for (const name of FS.readdir(upperPath(o, p))) names.add(name); }
      return [...names];
    },
    readlink(node: EmNode) {
      const o = opts(node);
      const p = parts(node);
      if (upperStat(o, p)) return FS.readlink(upperPath(o, p));
      return NODEFS.node_ops.readlink(node);
    },
    statfs: NODEFS.node_ops.statfs,
    lookup(parent: EmNode, name: string) {
      const o = opts(parent);
      const p = [...parts(parent), name];
      const upper = upperStat(o, p);
      if (upper) return driver.createNode(parent, name, upper.mode, 0);
      if (hidden(o, p)) throw new FS.ErrnoError(ENOENT);
      return driver.createNode(parent, name, NODEFS.getMode(hostPath(o, p)), 0);
    },
    setattr(node: EmNode, attr: Attr) {
      setattr(node, attr);
    },
    mknod(parent: EmNode, name: string, mode: number, dev: number) {
      const o = opts(parent);
      const p = [...parts(parent), name];
      const directory = FS.isDir(mode);
      const asked = mode & 0o7777 & ~UMASK; // as open(2) and mkdir(2) apply the umask
      const why = directory ? "folders are made on the host with the first file in them" : whyNotHost(o, p, false);
      if (why === null && FS.isFile(mode)) {
        materialize(o, p.slice(0, -1));
        const { answer } = call({ op: "mknod", ...at(parent, p), mode: asked, dir: directory });
        return driver.createNode(parent, name, typeof answer.mode === "number" ? answer.mode : mode, dev);
      }
      ensureUpperFolder(o, p.slice(0, -1));
      if (directory) FS.mkdir(upperPath(o, p), asked);
      else FS.mknod(upperPath(o, p), (mode & ~0o7777) | asked, dev);
      if (!directory) staysInside(o, p, why ?? "not a regular file");
      return driver.createNode(parent, name, FS.lstat(upperPath(o, p)).mode, dev);
    },
    rename(node: EmNode, dir: EmNode, name: string) {
      const o = opts(node);
      const from = parts(node);
      const to = [...parts(dir), name];
      const directory = FS.isDir(node.mode);
      const inUpper = upperStat(o, from) !== null;
      const onHost = hostMode(o, from) !== null;
      const whyNot = whyNotHost(o, to, directory);
      if (!inUpper && onHost && hostChangeable(o, from, directory) && whyNot === null) {
        materialize(o, to.slice(0, -1));
        call({ op: "rename", ...at(node, from), to });
      } else if (inUpper && !directory && whyNot === null) {
        copyOut(o, from, to); // e.g. "write a temporary file, then rename it to results.csv"
        FS.unlink(upperPath(o, from));
        if (onHost) removeHost(o, from, false);
      } else {
        // A host folder that may not move on the host, or a folder in both layers: EXDEV (shutil.move copies).
        if (directory && onHost) throw new FS.ErrnoError(EXDEV);
        if (!inUpper) copyUp(o, from, node.mode);
        ensureUpperFolder(o, to.slice(0, -1));
        FS.rename(upperPath(o, from), upperPath(o, to));
        if (onHost) removeHost(o, from, directory);
        if (!directory) staysInside(o, to, whyNot ?? "it was made inside the sandbox");
      }
      try {
        const replaced = FS.lookupNode(dir, name); // the file that was there: gone now (the moved node is unhashed)
        if (replaced !== node) FS.destroyNode(replaced);
      } catch (_) {
        // nothing was there
      }
      node.name = name;
    },
    unlink(parent: EmNode, name: string) {
      const o = opts(parent);
      const p = [...parts(parent), name];
      const onHost = hostMode(o, p) !== null;
      if (onHost) removeHost(o, p, false);
      if (upperStat(o, p)) FS.unlink(upperPath(o, p));
    },
    rmdir(parent: EmNode, name: string) {
      const o = opts(parent);
      const p = [...parts(parent), name];
      const node = FS.lookupNode(parent, name);
      if (nodeOps.readdir(node).length > 2) throw new FS.ErrnoError(ENOTEMPTY);
      if (hostMode(o, p) !== null) removeHost(o, p, true);
      if (upperStat(o, p)) FS.rmdir(upperPath(o, p));
    },
    symlink(parent: EmNode, name: string, target: string) {
      const o = opts(parent);
      const p = [...parts(parent), name];
      ensureUpperFolder(o, p.slice(0, -1));
      FS.symlink(target, upperPath(o, p)); // the host never gets a link
      staysInside(o, p, "it is a symbolic link");
    },
  };

  let partials = 0;
  /** A fresh data name beside `to` for its bytes on the way in: `to`'s suffix, a name the policy lets through. */
  const partialBeside = (o: MountOpts, to: string[]) =>
    partialName(to, `${o.partialTag}-w${(partials++).toString(36)}`, o.hostWrites, o.suffixes);

  /**
   * Copy the upper file at `from` to the host file `to` through the file service (it checks it again), as "write a
   * temporary file, then rename it" does: the bytes go to a fresh host file beside `to`, which is then renamed over
   * it. On any failure that file is removed and `to` is as it was (the caller keeps the guest's source).
   */
  function copyOut(o: MountOpts, from: string[], to: string[]): void {
    const data = FS.readFile(upperPath(o, from)) as Uint8Array;
    materialize(o, to.slice(0, -1));
    const partial = partialBeside(o, to);
    call({ op: "mknod", mount: o.index, path: partial, mode: 0o644, dir: false });
    try {
      const handle = Number(call({ op: "open", mount: o.index, path: partial, flags: O_WRONLY }).answer.handle);
      try {
        for (let done = 0; done < data.length; done += MAX_CHUNK) {
          call({ op: "write", handle, position: done }, data.subarray(done, done + MAX_CHUNK));
        }
      } finally {
        client.call({ op: "close", handle });
      }
      call({ op: "rename", mount: o.index, path: partial, to });
    } catch (err) {
      client.call({ op: "unlink", mount: o.index, path: partial }); // the refusal's reason stays the one told
      throw err;
    }
  }

  const upperOf = (stream: EmStream) => stream.upper as EmStream;

  /** Refuse a write through a stream whose file moved to the other layer (renamed between a host data name and
   * a name that stays inside) since it was opened: POSIX keeps the handle on the moved file; here the bytes would
   * go to a copy no name holds any more. */
  function stillThere(stream: EmStream): void {
    const o = opts(stream.node);
    const p = parts(stream.node);
    const upper = upperStat(o, p) as (Stat & { ino?: number }) | null;
    const moved = stream.upper // (a file removed while open takes writes, as POSIX's does)
      ? (upper ? upper.ino !== (upperOf(stream).node as unknown as { id: number }).id : hostMode(o, p) !== null)
      : upper !== null;
    if (!moved) return;
    tell.refused(
      `writing ${guestPath(o, p)} is refused: the file was moved between the host folder and the sandbox's layer ` +
        "since it was opened (a rename to or from a name that stays inside the sandbox), so this handle no longer " +
        "reaches it; open it again by its name",
    );
    throw new FS.ErrnoError(EXDEV);
  }

  const streamOps: Ops = {
    open(stream: EmStream) {
      const o = opts(stream.node);
      const p = parts(stream.node);
      const writing = (stream.flags & O_ACCMODE) !== 0;
      if (!upperStat(o, p)) {
        if (!writing || FS.isDir(stream.node.mode)) return NODEFS.stream_ops.open(stream);
        if (hostChangeable(o, p, false)) {
          const flags = stream.flags | (truncating === stream.node ? O_TRUNC : 0);
          truncating = null;
          const { answer } = call({ op: "open", ...at(stream.node, p), flags });
          stream.handle = Number(answer.handle);
          if (typeof answer.room === "number") stream.room = answer.room;
          stream.shared.refcount = 1;
          return;
        }
        if (hostMode(o, p) === null && (stream.flags & O_CREAT)) {
          ensureUpperFolder(o, p.slice(0, -1)); // the file went away under a cached node: made anew, inside
          FS.writeFile(upperPath(o, p), new Uint8Array());
        } else {
          copyUp(o, p, stream.node.mode);
        }
        staysInside(o, p, whyNotHost(o, p, false) ?? "it was changed inside the sandbox");
      }
      stream.upper = FS.open(upperPath(o, p), stream.flags & ~(O_CREAT | O_EXCL | O_TRUNC | O_APPEND));
      stream.room = o.maxGrowthBytes - FS.lstat(upperPath(o, p)).size;
      stream.shared.refcount = 1;
    },
    close(stream: EmStream) {
      if (stream.handle === undefined && !stream.upper) return NODEFS.stream_ops.close(stream);
      stream.shared.refcount = (stream.shared.refcount ?? 1) - 1;
      if (stream.shared.refcount !== 0) return;
      if (stream.upper) FS.close(stream.upper);
      else call({ op: "close", handle: stream.handle });
    },
    dup(stream: EmStream) {
      stream.shared.refcount = (stream.shared.refcount ?? 1) + 1;
    },
    getattr(stream: EmStream) {
      const stat = nodeOps.getattr(stream.node);
      if (stream.handle === undefined) return stat;
      // A host file open for writing is written aside until it is closed: its size is that file's.
      return { ...stat, size: Number(call({ op: "fstat", handle: stream.handle }).answer.size) };
    },
    setattr(stream: EmStream, attr: Attr) {
      setattr(stream.node, attr, stream);
    },
    read(stream: EmStream, buffer: Bytes, offset: number, length: number, position: number) {
      if (stream.upper) return FS.read(stream.upper, buffer, offset, length, position);
      if (stream.handle === undefined) return NODEFS.stream_ops.read(stream, buffer, offset, length, position);
      let done = 0;
      while (done < length) {
        const want = Math.min(length - done, MAX_CHUNK);
        const { data } = call({ op: "read", handle: stream.handle, position: position + done, length: want });
        view(buffer, offset + done, data.length).set(data);
        done += data.length;
        if (data.length < want) break;
      }
      return done;
    },
    write(stream: EmStream, buffer: Bytes, offset: number, length: number, position: number) {
      stillThere(stream);
      if (stream.upper) {
        const o = opts(stream.node);
        if (position + length > o.maxGrowthBytes) tooLarge(o, parts(stream.node), position + length);
        const written = FS.write(stream.upper, buffer, offset, length, position);
        stream.room = o.maxGrowthBytes - (position + written);
        return written;
      }
      if (stream.handle === undefined) throw new FS.ErrnoError(EBADF);
      let done = 0;
      while (done < length) {
        const chunk = view(buffer, offset + done, Math.min(length - done, MAX_CHUNK));
        // `whole`: the rest of this write(), so the supervisor refuses it before any of its bytes land.
        const request = {
          op: "write" as const,
          handle: stream.handle,
          position: position + done,
          whole: length - done,
        };
        const { answer } = call(request, chunk);
        const written = Number(answer.written);
        if (typeof answer.room === "number") stream.room = answer.room;
        if (!(written > 0)) break;
        done += written;
      }
      return done;
    },
    llseek(stream: EmStream, offset: number, whence: number) {
      if (stream.handle === undefined && !stream.upper) return NODEFS.stream_ops.llseek(stream, offset, whence);
      let position = offset;
      if (whence === 1) position += stream.position;
      else if (whence === 2) {
        position += stream.upper
          ? (upperOf(stream).node.node_ops as Ops).getattr(upperOf(stream).node).size
          : Number(call({ op: "fstat", handle: stream.handle }).answer.size);
      }
      if (position < 0) throw new FS.ErrnoError(EINVAL);
      return position;
    },
    mmap(stream: EmStream, ...rest: unknown[]) {
      if (stream.upper) return (upperOf(stream).stream_ops as Ops).mmap(upperOf(stream), ...rest);
      if (stream.handle !== undefined) throw new FS.ErrnoError(ENODEV); // a writable mapping of a host file
      return NODEFS.stream_ops.mmap(stream, ...rest);
    },
    msync(stream: EmStream, ...rest: unknown[]) {
      if (stream.upper) return (upperOf(stream).stream_ops as Ops).msync(upperOf(stream), ...rest);
      return NODEFS.stream_ops.msync(stream, ...rest);
    },
  };

  // A JS error out of an operation would kill the worker: every one ends as an errno instead.
  for (const ops of [nodeOps, streamOps]) {
    for (const [name, op] of Object.entries(ops)) {
      ops[name] = (...args: unknown[]) => {
        try {
          return op(...args);
        } catch (err) {
          if (err instanceof FS.ErrnoError) throw err;
          const code = (err as { code?: unknown })?.code;
          throw typeof code === "string" ? errno(code) : new FS.ErrnoError(EIO);
        }
      };
    }
  }
  return driver;
}
