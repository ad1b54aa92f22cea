/**
 * What push reads: an image as an OCI config plus an ordered list of layers,
 * each a stream of normalized, policy-checked entries.
 *
 * Implementations (one module per input kind) live next to this file;
 * `open-image-source.ts` detects the kind. They treat every input as
 * hostile: see `ingest-policy.ts` for what is refused and what is neutralised.
 *
 * May import: src/errors.ts, src/format/, src/native.ts.
 */
import type { Digest } from '../../format/digest.js'
import type { OciImageConfig } from '../../format/manifest.js'
import type { TarSplit } from '../../format/tar-split.js'
import type { TocEntry } from '../../format/toc.js'

export type ImageSourceKind = 'oci-layout' | 'oci-archive' | 'docker-archive' | 'rootfs-tar' | 'directory' | 'registry'

/** A TOC entry before its content is chunked: everything but `spans`. */
export type EntryHeader = Omit<TocEntry, 'spans'>

export interface LayerEntry {
  header: EntryHeader
  /**
   * Content of a regular file (`header.size` bytes); undefined for every
   * other type. Must be read to the end, or `drain()`ed, before the next
   * entry is requested. (The implementations next to this file skip
   * content left unread when the next entry is requested, so a consumer may
   * also just move on; breaking out of it early is safe.)
   * A piece is valid only until the next piece or entry is requested (a
   * source may read into one reused buffer): copy what you keep.
   */
  body?: AsyncIterable<Uint8Array>
  /**
   * Where a regular file's content sits on disk, as a file of exactly
   * `header.size` bytes (directory sources only). A consumer may read it
   * there instead of iterating `body`, with ExactFile (exact-file.ts), which
   * refuses a file that changed; `label` names the entry in its errors.
   */
  file?: { path: string, label: string }
}

export interface LayerSource {
  /** For messages, e.g. `docker-archive img.tar, layer 2 of 3 (4f2a…/layer.tar)`. */
  readonly name: string
  /** Compressed size of the layer as stored in the input, when known (progress display). */
  readonly inputBytes?: number
  /**
   * The layer's entries in input order, with whiteout (`.wh.NAME`) and
   * opaque (`.wh..wh..opq`) markers turned into `whiteout`/`opaque` entries.
   * Throws BadInputError naming this layer and the entry on the first
   * problem, LimitExceededError when a limit is passed. One pass only.
   */
  entries (): AsyncIterable<LayerEntry>
  /**
   * sha256 of the uncompressed layer tar, available after `entries()` has
   * been read to the end; `sha256:` + 64 zeros for a directory source.
   * When the input names the layer by digest, a mismatch throws from
   * `entries()` instead.
   */
  diffId (): Digest
  /**
   * The diff_id the input declares for this layer (OCI/docker config), known
   * before reading: push uses it to skip a layer the store already holds.
   * Reading still verifies it.
   */
  readonly declaredDiffId?: Digest
  /**
   * The digest of the layer's stored (possibly compressed) blob, as the
   * input names it (an OCI descriptor), known before reading: push uses it
   * to skip a layer the store already holds. Reading still verifies it.
   */
  readonly declaredBlobDigest?: Digest
  /**
   * Tar sources: what the TOC does not keep of the layer's tar (headers,
   * padding, the end marker, trailing bytes: src/format/tar-split.ts), once
   * `entries()` has been read to the end, so that export can rebuild the
   * tar byte for byte. Undefined before that, for a layer too large to keep
   * it for, and for directory sources.
   */
  tarSplit?: () => TarSplit | undefined
}

/** Where an image came from, as `layerctl inspect` shows it. */
export interface ImageOrigin {
  /** The source as the user could give it again, e.g. `docker://host/repo:tag`, `oci:/srv/img:v1`. */
  reference: string
  /** The digest of the image manifest read, when the source has one. */
  manifest?: Digest
  /** The digest of the index (manifest list) the manifest was chosen from, if any. */
  index?: Digest
}

export interface ImageSource {
  readonly kind: ImageSourceKind
  /** The path given by the user. */
  readonly name: string
  /**
   * The image's OCI config; a minimal linux/amd64 config for rootfs tars and
   * directories. For a rootfs tar, `rootfs.diff_ids` is filled in once its
   * layer has been read to the end (a directory's is ZERO_DIFF_ID).
   */
  readonly config: OciImageConfig
  readonly layers: LayerSource[]
  /** Where the image came from, when the source can say more than its name. */
  readonly origin?: ImageOrigin
  /**
   * A hint from push: these layers (indexes into `layers`, in order) will be
   * read, the others not. A source whose layers download (a registry) starts
   * downloading them ahead, bounded; others ignore it. Call at most once,
   * before reading any layer.
   */
  prefetchLayers?: (indexes: readonly number[]) => void
  /** Release file handles. Idempotent. */
  close (): Promise<void>
}

/** Bounds on what one input may make push do. Exceeding one throws LimitExceededError. */
export interface IngestLimits {
  /** Decompressed bytes of one layer tar. */
  maxLayerBytes: number
  /** Decompressed/compressed ratio, checked once `ratioFloorBytes` have been decompressed. */
  maxCompressionRatio: number
  ratioFloorBytes: number
  /** Size declared by a single tar header. */
  maxEntryBytes: number
  /** Entries in one layer. */
  maxEntries: number
}

export const DEFAULT_INGEST_LIMITS: IngestLimits = {
  maxLayerBytes: 64 * 1024 ** 3,
  maxCompressionRatio: 200,
  ratioFloorBytes: 256 * 1024 ** 2,
  maxEntryBytes: 32 * 1024 ** 3,
  maxEntries: 2_000_000
}

export interface OpenImageSourceOptions {
  limits?: Partial<IngestLimits>
  /** Odd but accepted input (an absolute entry name made relative, say). Message names the input. */
  warn?: (message: string) => void
  /** Turn every warning into a BadInputError. */
  strict?: boolean
  /**
   * Which image to read when the input holds several: an OCI layout or
   * archive's `org.opencontainers.image.ref.name` (or
   * `io.containerd.image.name`) annotation, or a docker-archive's RepoTags
   * entry (`repo:tag`, or just `tag` when that is unambiguous). Without it,
   * a single image is taken, else the linux/amd64 one, else it is an error.
   */
  tag?: string
  /**
   * The kind the input must be read as when it could be read as several (an
   * archive holding both an OCI layout and a docker manifest.json, as
   * `docker save` writes): `oci-archive:` asks for the OCI side.
   */
  prefer?: 'oci-archive' | 'docker-archive'
}

export const ZERO_DIFF_ID: Digest = `sha256:${'0'.repeat(64)}`
