/**
 * A sandbox's overlay upper dir as a LayerSource, for `layerctl commit`:
 * the sandbox's changes become one new layer on top of its image.
 *
 * Walks the upper with the image sources' directory walker (same ordering,
 * ingest policy, hardlink and xattr handling) and translates overlayfs'
 * on-disk markers into TOC markers:
 * - a character device 0/0 (or a regular file carrying the
 *   `overlay.whiteout` xattr, the kernel's xattr whiteout) → `whiteout`;
 * - a directory with `overlay.opaque` = "y" → the directory, then an
 *   `opaque` entry at the same path (as a tar's DIR/.wh..wh..opq reads);
 * - overlayfs' own xattrs (`trusted.overlay.*`, `user.overlay.*`: origin,
 *   impure, protattr, …) are dropped: they describe this host's overlay,
 *   not the image.
 * The upper must not change while it is read: stop the sandbox first.
 *
 * May import: src/errors.ts, src/format/, this folder.
 */
import type { Digest } from '../../format/digest.js'
import { DirectoryLayerSource } from './directory-source.js'
import type { EntryHeader, LayerEntry, LayerSource, OpenImageSourceOptions } from './image-source.js'
import { ingestContext } from './ingest-policy.js'

const OVERLAY_XATTR_PREFIXES = ['trusted.overlay.', 'user.overlay.']
const OPAQUE_VALUE_BASE64 = Buffer.from('y').toString('base64')

function overlayXattr (xattrs: Record<string, string> | undefined, name: string): string | undefined {
  if (xattrs === undefined) return undefined
  return xattrs[`trusted.overlay.${name}`] ?? xattrs[`user.overlay.${name}`]
}

function withoutOverlayXattrs (h: EntryHeader): EntryHeader {
  if (h.xattrs === undefined) return h
  const kept = Object.entries(h.xattrs).filter(([k]) => !OVERLAY_XATTR_PREFIXES.some(p => k.startsWith(p)))
  const { xattrs: _dropped, ...rest } = h
  return kept.length > 0 ? { ...rest, xattrs: Object.fromEntries(kept) } : rest
}

export class UpperLayerSource implements LayerSource {
  readonly name: string
  readonly #inner: DirectoryLayerSource

  /** Sync; nothing is read until `entries()`. */
  constructor (upperDir: string, opts: OpenImageSourceOptions = {}) {
    this.name = `sandbox upper ${upperDir}`
    this.#inner = new DirectoryLayerSource(upperDir, ingestContext(opts))
  }

  /** Always ZERO_DIFF_ID, as for any directory source. */
  diffId (): Digest { return this.#inner.diffId() }

  /** See {@link LayerSource.entries}. One pass only. */
  async * entries (): AsyncGenerator<LayerEntry> {
    for await (const e of this.#inner.entries()) {
      const h = e.header
      const marker = { mode: 0, uid: h.uid, gid: h.gid, mtime: h.mtime, size: 0 }
      if (h.type === 'char' && (h.devMajor ?? 0) === 0 && (h.devMinor ?? 0) === 0) {
        yield { header: { path: h.path, type: 'whiteout', ...marker } }
        continue
      }
      if (h.type === 'file' && overlayXattr(h.xattrs, 'whiteout') !== undefined) {
        for await (const _ of e.body ?? []) { /* drain: the walker streams bodies in order */ }
        yield { header: { path: h.path, type: 'whiteout', ...marker } }
        continue
      }
      const clean = withoutOverlayXattrs(h)
      yield e.body === undefined ? { header: clean } : { header: clean, body: e.body, ...(e.file === undefined ? {} : { file: e.file }) }
      if (h.type === 'dir' && h.path !== '' && overlayXattr(h.xattrs, 'opaque') === OPAQUE_VALUE_BASE64) {
        yield { header: { path: h.path, type: 'opaque', ...marker } }
      }
    }
  }
}
