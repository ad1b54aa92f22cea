/**
 * The control API between layerctl and layerd: newline-delimited JSON over a
 * Unix socket (`<home>/layerd.sock`, mode 0600: root only).
 *
 *   → { "id": 1, "method": "mount", "params": { … } }
 *   ← { "id": 1, "result": … }   or   { "id": 1, "error": { "code": "ERR_NOT_FOUND", "message": "…" } }
 *
 * Errors keep their LayerdError code across the socket, so the CLI prints
 * the daemon's message as if it were its own.
 *
 * This file, control-client.ts and daemon-launcher.ts are the daemon's
 * client side (the `daemon-client` layer in layers.json): the only part of
 * src/daemon/ that src/sandbox/ and src/cli/ may import. The results that
 * cross the socket are typed here, so clients never import the daemon's
 * internals for a type.
 *
 * May import: src/format/ and src/fs/ (types only), node built-ins.
 */
import { join } from 'node:path'
import type { Digest } from '../format/digest.js'
import type { OciImageConfig } from '../format/manifest.js'
import type { ImageMountStats } from '../fs/image-mount.js'

export const SOCKET_NAME = 'layerd.sock'
export const PID_FILE_NAME = 'layerd.pid'
/** A request line longer than this is refused (a client that misbehaves). */
export const MAX_REQUEST_BYTES = 1024 * 1024

export const socketPath = (home: string): string => join(home, SOCKET_NAME)
export const pidFilePath = (home: string): string => join(home, PID_FILE_NAME)

export interface ControlRequest { id: number, method: string, params?: unknown }
export interface ControlError { code: string, message: string }
export type ControlResponse = { id: number, result: unknown } | { id: number, error: ControlError }

/** What a sandbox needs to run an image: its read-only root and its config. */
export interface SharedImage { mountpoint: string, manifest: string, config: OciImageConfig, mountMs: number }

export interface MountInfo {
  mountpoint: string
  image: string
  manifest: string
  store: string
  mountedAt: string
  /** Milliseconds from request to a served mount. */
  mountMs: number
}

export interface MountStats extends ImageMountStats {
  mountpoint: string
  image: string
  fetches: number
  prefetchedChunks: number
  storeErrors: number
}

/** The result of `blockView`: an image's block view, mounted. */
export interface BlockViewInfo {
  /** The raw ext4 file, on a layerd mount. */
  path: string
  /** The image's manifest and config (the VM runs the image's config, not the block view's). */
  manifest: Digest
  config: OciImageConfig
  /** Milliseconds spent building and pushing it (0 when it was in the store). */
  buildMs: number
}
