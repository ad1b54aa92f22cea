/**
 * Decoded layer TOCs shared by every mount of the daemon that uses the
 * layer, by layer digest, reference-counted: the last mount using a layer
 * drops it. Images built on one base (every per-task image of a fleet)
 * then hold the base's TOCs once instead of once per mount — a decoded
 * TOC is ~4.6 MB of heap for Debian + python (8,274 entries), most of
 * what a mount used to cost — and a mount of a new image on a known base
 * decodes only its own layers.
 *
 * A decoded TOC is immutable once loaded (nothing in fs/ or daemon/
 * writes to it), which is what makes sharing it safe.
 *
 * May import: src/format/.
 */
import type { Digest } from '../../format/digest.js'
import type { LayerToc } from '../../format/toc.js'

interface Held { toc: LayerToc, users: number }

export class SharedTocs {
  readonly #held = new Map<Digest, Held>()

  /** The TOC of `layer` if some mount holds it. Sync; takes no reference. */
  peek (layer: Digest): LayerToc | undefined {
    return this.#held.get(layer)?.toc
  }

  /**
   * One reference to each layer's TOC: the one already held, else
   * `decoded[i]`, which becomes the shared one. Returns the TOCs to use, in
   * order. Sync. Each acquire() needs one release() of the same layers.
   */
  acquire (layers: readonly Digest[], decoded: readonly LayerToc[]): LayerToc[] {
    return layers.map((layer, i) => {
      let held = this.#held.get(layer)
      if (held === undefined) {
        held = { toc: decoded[i]!, users: 0 }
        this.#held.set(layer, held)
      }
      held.users++
      return held.toc
    })
  }

  /** Drop one reference to each layer; a TOC nobody uses is forgotten. Sync. */
  release (layers: readonly Digest[]): void {
    for (const layer of layers) {
      const held = this.#held.get(layer)
      if (held === undefined) continue
      if (--held.users <= 0) this.#held.delete(layer)
    }
  }

  /** Distinct TOCs held. */
  get size (): number { return this.#held.size }
}
