/**
 * OCI chain IDs (image-spec config.md, "Layer ChainID"): the name
 * containerd gives the committed snapshot of a layer stack.
 * ChainID(L0) = DiffID(L0); ChainID(L0|…|Ln) = sha256(ChainID(…Ln-1) + " " + DiffID(Ln)).
 *
 * Pure.
 */
import { sha256Digest, type Digest } from '../format/digest.js'

/** The chain ID of a layer with `diffId` over the chain `parent` (undefined: the bottom layer). */
export function chainIdOf (parent: Digest | undefined, diffId: Digest): Digest {
  return parent === undefined ? diffId : sha256Digest(Buffer.from(`${parent} ${diffId}`))
}

/** The chain IDs of a stack of `diffIds`, bottom first. */
export function chainIds (diffIds: readonly Digest[]): Digest[] {
  const out: Digest[] = []
  for (const d of diffIds) out.push(chainIdOf(out.at(-1), d))
  return out
}
