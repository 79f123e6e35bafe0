/**
 * Frame kinds shared by the kernel (Python) and the Deno host.
 *
 * Every frame on the private socket is [length u32][kind u8][request id u32][payload],
 * big-endian, where length counts kind, id and payload.
 */
export const STDOUT = 1; // guest stdout bytes (from the worker)
export const STDERR = 2; // guest stderr bytes (from the worker)
export const GUEST_EVENT = 3; // JSON written by the worker: guest-influenced data
export const HOST_EVENT = 4; // JSON written by the supervisor only
export const REQUEST = 5; // JSON from the kernel
export const REPLY = 6; // the end of a request: sent by the supervisor only, when the worker's glue says so
export const BLOB = 7; // opaque bytes the worker sends for the request it serves (a checkpoint's parts)
export const DATA = 8; // opaque bytes from the kernel for its next request (a checkpoint to restore)
export const FRAME_HEADER = 9;
