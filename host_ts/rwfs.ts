/**
 * The worker's file-system driver for read-write mounts: Emscripten's NODEFS for reading, the supervisor for
 * every change.
 *
 * The worker holds no write permission on host folders (Deno refuses guest JS that tries directly); creating,
 * writing, truncating, chmod, rename and removal go to the supervisor's file service over the file channel,
 * which applies the mount's rules and answers with an errno code (and, for a refusal, the reason, which the
 * guest's Python glue puts into the exception it raises).
 */
import { type FileClient, MAX_CHUNK } from "./file_channel.ts";
import type { FileOp } from "./protocol.ts";
import { safeMode } from "./write_policy.ts";

const O_ACCMODE = 3;
const EIO = 29;
const EBADF = 8;
const EINVAL = 28;
const ENODEV = 43;
const UMASK = 0o022; // what a normal Python's files get; Emscripten has none

/** The parts of Emscripten's FS this driver uses (Pyodide's `pyodide.FS`). */
export interface EmNode {
  name: string;
  parent: EmNode;
  mode: number;
  mount: { opts: { root: string; index: number } };
  node_ops: unknown;
  stream_ops: unknown;
}

export interface EmStream {
  node: EmNode;
  flags: number;
  position: number;
  shared: { refcount?: number };
  handle?: number;
}

type Bytes = Int8Array | Uint8Array;
type Attr = { mode?: number; atime?: number; mtime?: number; size?: number };
// deno-lint-ignore no-explicit-any
type Ops = Record<string, (...args: any[]) => any>;

export interface EmFS {
  ErrnoError: new (errno: number) => Error;
  createNode(parent: EmNode | null, name: string, mode: number, dev: number): EmNode;
  lookupNode(parent: EmNode, name: string): EmNode;
  destroyNode(node: EmNode): void;
  isDir(mode: number): boolean;
  isFile(mode: number): boolean;
  mount(type: unknown, opts: { root: string; index: number }, mountpoint: string): unknown;
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

/** The driver, for `FS.mount(driver, {root: hostFolder, index: mountIndex}, guestPath)`. */
export function writableFS(FS: EmFS, client: FileClient, refused: (message: string) => void): Ops {
  const NODEFS = FS.filesystems.NODEFS;

  /** One call to the supervisor's file service (`op`: one of protocol.json's fileOps). */
  function call(
    json: { op: FileOp; [field: string]: unknown },
    payload?: Uint8Array,
  ): { answer: Record<string, unknown>; data: Uint8Array } {
    const { json: answer, payload: data } = client.call(json, payload);
    const a = (answer ?? {}) as Record<string, unknown>;
    if (a.code !== undefined) {
      if (typeof a.message === "string") refused(a.message);
      throw new FS.ErrnoError((typeof a.code === "string" && NODEFS.convertNodeCode({ code: a.code })) || EIO);
    }
    return { answer: a, data };
  }

  function parts(node: EmNode): string[] {
    const names = [];
    for (let n = node; n.parent !== n; n = n.parent) names.push(n.name);
    return names.reverse();
  }

  const at = (node: EmNode, ...more: string[]) => ({ mount: node.mount.opts.index, path: [...parts(node), ...more] });
  const hosted = (stream: EmStream) => stream.handle !== undefined;
  const view = (buffer: Bytes, offset: number, length: number) =>
    new Uint8Array(buffer.buffer, buffer.byteOffset + offset, length);

  function change(attr: Attr): Record<string, number> {
    const out: Record<string, number> = {};
    if (attr.mode !== undefined) out.mode = attr.mode & 0o7777;
    if (typeof attr.atime === "number") out.atime = attr.atime;
    if (typeof attr.mtime === "number") out.mtime = attr.mtime;
    if (attr.size !== undefined) out.size = attr.size;
    return out;
  }

  function setattr(node: EmNode, attr: Attr, target: Record<string, unknown>): void {
    const changes = change(attr);
    // A mode the host would not change (the chmod Emscripten makes after creating a file, mostly): no call.
    const { mode, ...rest } = changes;
    if (mode !== undefined && !Object.keys(rest).length) {
      if (safeMode(mode, FS.isDir(node.mode)) === (node.mode & 0o7777)) return;
    }
    if (!Object.keys(changes).length) return; // chown and the like: nothing to do on the host
    const { answer } = call({ op: "setattr", ...target, ...changes });
    if (typeof answer.mode === "number") node.mode = answer.mode;
  }

  const driver: Ops = {
    mount(mount: { opts: { root: string } }) {
      return driver.createNode(null, "/", NODEFS.getMode(mount.opts.root), 0);
    },
    createNode(parent: EmNode | null, name: string, mode: number, dev: number) {
      const node = FS.createNode(parent, name, mode, dev);
      node.node_ops = nodeOps;
      node.stream_ops = streamOps;
      return node;
    },
  };

  const nodeOps: Ops = {
    getattr: NODEFS.node_ops.getattr,
    readdir: (node: EmNode) => NODEFS.node_ops.readdir(node),
    readlink: NODEFS.node_ops.readlink,
    statfs: NODEFS.node_ops.statfs,
    lookup(parent: EmNode, name: string) {
      return driver.createNode(parent, name, NODEFS.getMode(`${NODEFS.realPath(parent)}/${name}`), 0);
    },
    setattr(node: EmNode, attr: Attr) {
      setattr(node, attr, at(node));
    },
    mknod(parent: EmNode, name: string, mode: number, dev: number) {
      const asked = mode & 0o7777 & ~UMASK; // as open(2) and mkdir(2) apply the umask
      const { answer } = call({ op: "mknod", ...at(parent, name), mode: asked, dir: FS.isDir(mode) });
      return driver.createNode(parent, name, typeof answer.mode === "number" ? answer.mode : mode, dev);
    },
    rename(node: EmNode, dir: EmNode, name: string) {
      call({ op: "rename", ...at(node), to: [...parts(dir), name] });
      try {
        const replaced = FS.lookupNode(dir, name); // the file that was there: gone now (the moved node is unhashed)
        if (replaced !== node) FS.destroyNode(replaced);
      } catch (_) {
        // nothing was there
      }
      node.name = name;
    },
    unlink(parent: EmNode, name: string) {
      call({ op: "unlink", ...at(parent, name) });
    },
    rmdir(parent: EmNode, name: string) {
      call({ op: "rmdir", ...at(parent, name) });
    },
    symlink(parent: EmNode, name: string) {
      call({ op: "symlink", ...at(parent, name) });
    },
  };

  const streamOps: Ops = {
    open(stream: EmStream) {
      if ((stream.flags & O_ACCMODE) === 0) return NODEFS.stream_ops.open(stream);
      const { answer } = call({ op: "open", ...at(stream.node), flags: stream.flags });
      stream.handle = Number(answer.handle);
      stream.shared.refcount = 1;
    },
    close(stream: EmStream) {
      if (!hosted(stream)) return NODEFS.stream_ops.close(stream);
      stream.shared.refcount = (stream.shared.refcount ?? 1) - 1;
      if (stream.shared.refcount === 0) call({ op: "close", handle: stream.handle });
    },
    dup(stream: EmStream) {
      stream.shared.refcount = (stream.shared.refcount ?? 1) + 1;
    },
    getattr(stream: EmStream) {
      return NODEFS.node_ops.getattr(stream.node);
    },
    setattr(stream: EmStream, attr: Attr) {
      setattr(stream.node, attr, hosted(stream) ? { handle: stream.handle } : at(stream.node));
    },
    read(stream: EmStream, buffer: Bytes, offset: number, length: number, position: number) {
      if (!hosted(stream)) return NODEFS.stream_ops.read(stream, buffer, offset, length, position);
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
      if (!hosted(stream)) throw new FS.ErrnoError(EBADF);
      let done = 0;
      while (done < length) {
        const chunk = view(buffer, offset + done, Math.min(length - done, MAX_CHUNK));
        const { answer } = call({ op: "write", handle: stream.handle, position: position + done }, chunk);
        const written = Number(answer.written);
        if (!(written > 0)) break;
        done += written;
      }
      return done;
    },
    llseek(stream: EmStream, offset: number, whence: number) {
      if (!hosted(stream)) return NODEFS.stream_ops.llseek(stream, offset, whence);
      let position = offset;
      if (whence === 1) position += stream.position;
      else if (whence === 2) position += Number(call({ op: "fstat", handle: stream.handle }).answer.size);
      if (position < 0) throw new FS.ErrnoError(EINVAL);
      return position;
    },
    mmap(stream: EmStream, ...rest: unknown[]) {
      if (hosted(stream)) throw new FS.ErrnoError(ENODEV); // a writable mapping of a host file: not offered
      return NODEFS.stream_ops.mmap(stream, ...rest);
    },
    msync(stream: EmStream, ...rest: unknown[]) {
      return NODEFS.stream_ops.msync(stream, ...rest);
    },
  };

  return driver;
}
