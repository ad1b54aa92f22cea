/**
 * The one errno table of both FUSE backends: what a request gets back, by
 * what went wrong. The fuse-native ops (fuse-ops.ts) answer with these, and
 * the kernel backend's C server (native/fuse_server.c) is given this table
 * when it starts (the `errnos` server option) and answers with it too, so
 * the two cannot drift apart. Numbers come from os.constants.errno.
 *
 * Failures of the content behind a read are not in it: the ErrnoBoundary
 * (errno-boundary.ts) maps those errors, for both backends.
 *
 * May import: node built-ins.
 */
import { constants as osConstants } from 'node:os'

const { EINVAL, EIO, EISDIR, ENODATA, ENOENT, ENOMEM, ENOSYS, ENOTDIR, EPROTO, ERANGE, EROFS } = osConstants.errno

export interface FuseErrnos {
  /** The path or node names nothing. */
  noEntry: number
  /** readlink of something that is not a symlink. */
  notSymlink: number
  /** A read or write open of a directory. */
  isDirectory: number
  /** A directory operation on something that is not a directory. */
  notDirectory: number
  /** Any write: the image is read-only. */
  readOnly: number
  /** An operation this filesystem does not implement (the kernel then stops asking, or falls back). */
  notImplemented: number
  /** A request too short for its operation, or a read of a node that is not a regular file. */
  badRequest: number
  /** getxattr of a name the node does not have. */
  noAttribute: number
  /** An xattr buffer too small for the answer. */
  bufferTooSmall: number
  noMemory: number
  /** A read the server could not hand to its reader. */
  ioError: number
  /** INIT from a kernel whose FUSE protocol is too old. */
  oldProtocol: number
}

export const FUSE_ERRNOS: Readonly<FuseErrnos> = Object.freeze({
  noEntry: ENOENT,
  notSymlink: EINVAL,
  isDirectory: EISDIR,
  notDirectory: ENOTDIR,
  readOnly: EROFS,
  notImplemented: ENOSYS,
  badRequest: EINVAL,
  noAttribute: ENODATA,
  bufferTooSmall: ERANGE,
  noMemory: ENOMEM,
  ioError: EIO,
  oldProtocol: EPROTO
})
