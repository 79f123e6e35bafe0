/**
 * The protocol's shared names, from protocol.json (the one list of record, which the kernel and the guest's glue
 * read too): frame kinds as constants, and every other kind of name as a type that deno check holds the code to.
 *
 * Every frame on the private socket is [length u32][kind u8][request id u32][payload],
 * big-endian, where length counts kind, id and payload.
 */
import protocol from "./protocol.json" with { type: "json" };

// Read once, when the module loads (in the worker: before any guest code runs).
export const {
  STDOUT, // guest stdout bytes (from the worker)
  STDERR, // guest stderr bytes (from the worker)
  GUEST_EVENT, // JSON written by the worker: guest-influenced data
  HOST_EVENT, // JSON written by the supervisor only
  REQUEST, // JSON from the kernel
  REPLY, // the end of a request: sent by the supervisor only, when the worker's glue says so
  BLOB, // opaque bytes the worker sends for the request it serves (a checkpoint's parts)
  DATA, // opaque bytes from the kernel for its next request (a checkpoint to restore)
} = protocol.frameKinds;
export const FRAME_HEADER: number = protocol.frameHeaderBytes;

/** A request the kernel sends the guest (the supervisor passes it to the worker whole). */
export type GuestOp = keyof typeof protocol.guestOps;
/** A request the kernel sends the supervisor itself. */
export type SupervisorOp = keyof typeof protocol.supervisorOps;
/** The type of an event the guest's glue sends the kernel. */
export type GuestEventType = keyof typeof protocol.guestEvents;
/** The type of an event the worker itself sends the kernel. */
export type WorkerEventType = keyof typeof protocol.workerEvents;
/** The `event` of a HOST_EVENT frame. */
export type HostEventName = keyof typeof protocol.hostEvents;
/** A key of the kernel's init message. */
export type InitKey = keyof typeof protocol.initKeys;
/** A call of the worker's file-system driver to the supervisor's file service. */
export type FileOp = keyof typeof protocol.fileOps;

const FILE_OPS: ReadonlySet<string> = new Set(Object.keys(protocol.fileOps));
/** Whether `op` names a file call (one of protocol.json's fileOps), and not anything else a guest may send. */
export function isFileOp(op: unknown): op is FileOp {
  return typeof op === "string" && FILE_OPS.has(op);
}

/** `true` exactly when A and B are the same set of names: `true satisfies Same<A, B>` fails deno check otherwise. */
export type Same<A, B> = [A] extends [B] ? ([B] extends [A] ? true : false) : false;
