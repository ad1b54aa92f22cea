/**
 * The interface between the kernel FUSE backend and whatever keeps its
 * connections alive across a daemon restart (src/holder/: the holder
 * process, or systemd's fd store). A connection is the mount's /dev/fuse
 * fd plus the record a new daemon needs to answer the kernel exactly as the
 * old one did: the INIT negotiation, the server options and the digest of
 * the metadata table (FUSE node ids are indices into that table, so a new
 * daemon may only serve the connection with a byte-identical table).
 *
 * Types only; implemented in src/holder/connection-keeper.ts.
 *
 * May import: src/native.ts (types).
 */
import type { NativeFuseInit, NativeFuseServerOptions } from '../native.js'

/**
 * What the mount's tree was built from, so a new daemon can build the same
 * tree and table while the old one still serves (a planned restart,
 * src/daemon/mounts/prepared-takeovers.ts). Only a hint: the table digest decides.
 */
export interface TreeSource {
  /** The store the TOCs come from (URL), and its S3 endpoint. */
  store: string
  s3Endpoint?: string
  /** The mount's layers (digests, lowest first): its tree is their merge. */
  layers: string[]
  /** A stack's top (src/format/layer-split.ts): the tree is `layers[0]` split off the merge of these. */
  base?: string[]
}

/** What a new daemon needs to serve a kept connection as before. */
export interface ConnectionRecord {
  /** Canonical mountpoint (the key). */
  mountpoint: string
  /** sha256 hex of the metadata table the connection was served from. */
  tableDigest: string
  init: NativeFuseInit
  options: NativeFuseServerOptions
  /** What the tree was built from; absent in records of older daemons. */
  source?: TreeSource
}

/** A connection an earlier daemon kept, handed to this one: `fd` is this process's own copy. */
export interface KeptConnection { fd: number, record: ConnectionRecord }

export interface ConnectionKeeper {
  /**
   * The connection an earlier daemon kept for `mountpoint`, if any, handed
   * over once (a second call returns undefined). The caller owns `fd`: it
   * serves it, or calls discard(). Sync.
   */
  take: (mountpoint: string) => KeptConnection | undefined
  /**
   * Keep this live connection (`fd` stays the caller's; the keeper holds its
   * own copy) with its record, so it outlives this process. Sync; throws
   * when the keeper cannot (the caller logs it: the mount works, it just
   * does not survive a crash).
   */
  keep: (fd: number, record: ConnectionRecord) => void
  /** The connection at `mountpoint` has ended (unmounted): stop keeping it. Sync; never throws. */
  forget: (mountpoint: string) => void
  /**
   * A taken connection that cannot be served (its table or options
   * differ): close `kept.fd` and stop keeping it, so the kernel ends the
   * connection (its readers get ENOTCONN) and the mountpoint can be
   * cleaned. Sync; never throws.
   */
  discard: (kept: KeptConnection) => void
}
