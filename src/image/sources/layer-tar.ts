/**
 * TarLayerSource: one layer tar (plain, gzip or zstd, detected by magic
 * bytes) read as normalized, policy-checked entries, in one streaming pass.
 *
 *   stored bytes ─ sha256 (blob digest) ─ gunzip | zstd ─ byte counters (bomb
 *   limits) ─ sha256 (diff_id) ─ TarFramingGuard ─ tar-stream extract ─ LayerPolicy
 *
 * Memory stays bounded by backpressure end to end: the extract only accepts
 * more bytes once the consumer has taken the current entry's content.
 * Failures anywhere become one BadInputError/LimitExceededError naming the
 * layer (and entry, when there is one); nothing is left running after
 * `entries()` ends, throws, or is abandoned.
 *
 * May import: src/errors.ts, src/format/, the modules next to it.
 */
import { createHash } from 'node:crypto'
import type { Readable, Transform } from 'node:stream'
import { pipeline } from 'node:stream/promises'
import type tarStream from 'tar-stream'
import { BadInputError, LayerdError, LimitExceededError, UsageError } from '../../errors.js'
import type { Digest } from '../../format/digest.js'
import { TarSplitBuilder, type TarSplit } from '../../format/tar-split.js'
import { COMPRESSION_MAGIC_BYTES, describeDecompressError, detectCompression, gunzipStream, zstdDecompress, type Compression } from './decompress.js'
import { EntryBody, type PausableStream } from './entry-body.js'
import type { LayerEntry, LayerSource } from './image-source.js'
import { LayerPolicy, type IngestContext } from './ingest-policy.js'
import { TarFramingGuard } from './tar-framing.js'
import type { TarMember } from './tar-header.js'

export interface TarLayerInput {
  /** For messages: names the input and the layer. */
  name: string
  /** Stored (possibly compressed) size, when known. */
  inputBytes?: number
  /** A fresh stream of the stored bytes. Called once. */
  open: () => Readable
  /** Expected sha256 of the stored bytes (OCI descriptor); verified while streaming. */
  blobDigest?: Digest
  blobSize?: number
  /** Expected sha256 of the uncompressed tar (config rootfs.diff_ids[i]). */
  diffId?: Digest
  /** Called with the diff_id once it is known and verified. */
  onDiffId?: (diffId: Digest) => void
}

/** Read size for layer files: fewer, larger reads (the stored bytes are consumed at once by the decompressor). */
export const LAYER_READ_BYTES = 1024 * 1024

/**
 * Raw (non-content) tar bytes a layer's split may keep: about 1 KiB per
 * entry, so 64 MiB is some 60,000 entries; a layer with more gets no split
 * and exports as a tar written from its TOC.
 */
export const MAX_TAR_SPLIT_RAW_BYTES = 64 * 1024 * 1024

/** Sentinel: the extract was closed (by the consumer or by its own error) while the pump was writing. */
const EXTRACT_CLOSED = new Error('tar extract closed')

const TAR_STREAM_KINDS: Record<string, TarMember['kind']> = {
  file: 'file', 'contiguous-file': 'file', link: 'hardlink', symlink: 'symlink',
  'character-device': 'char', 'block-device': 'block', directory: 'dir', fifo: 'fifo'
}

/** A tar-stream entry stream (a streamx Readable with its header and header offset). */
type ExtractEntry = tarStream.ExtractEvents['entry'][1]

export class TarLayerSource implements LayerSource {
  readonly name: string
  readonly inputBytes?: number
  readonly #input: TarLayerInput
  readonly #ctx: IngestContext
  #started = false
  #diffId: Digest | undefined
  #pumpError: unknown
  #split: TarSplitBuilder | undefined

  constructor (input: TarLayerInput, ctx: IngestContext) {
    this.name = input.name
    if (input.inputBytes !== undefined) this.inputBytes = input.inputBytes
    this.#input = input
    this.#ctx = ctx
  }

  get declaredDiffId (): Digest | undefined { return this.#input.diffId }

  get declaredBlobDigest (): Digest | undefined { return this.#input.blobDigest }

  diffId (): Digest {
    if (this.#diffId === undefined) throw new UsageError(`${this.name}: diffId() is known only after entries() has been read to the end`)
    return this.#diffId
  }

  /** See {@link LayerSource.tarSplit}. */
  tarSplit (): TarSplit | undefined {
    return this.#diffId === undefined ? undefined : this.#split?.result()
  }

  /** See {@link LayerSource.entries}. An entry's unread content is drained when the next entry is requested. */
  async * entries (): AsyncGenerator<LayerEntry> {
    if (this.#started) throw new UsageError(`${this.name}: entries() can be read only once`)
    this.#started = true
    // Loaded on use: a directory push never reads a tar, and starts ~10 modules sooner without it.
    const { default: { extract: tarExtract } } = await import('tar-stream')
    const extract = tarExtract({ allowUnknownFormat: true } as Parameters<typeof tarExtract>[0])
    const iterator = extract[Symbol.asyncIterator]()
    extract.on('error', () => {}) // surfaced through the iterator
    this.#split = new TarSplitBuilder(MAX_TAR_SPLIT_RAW_BYTES)
    const guard = new TarFramingGuard({ layerName: this.name, maxEntryBytes: this.#ctx.limits.maxEntryBytes, warn: m => this.#ctx.notice(m), split: this.#split })
    const policy = new LayerPolicy(this.name, this.#ctx)
    const diffHash = createHash('sha256')
    const abort = new AbortController()
    const pump = this.#pump(extract, guard, diffHash, abort.signal).catch((err: unknown) => {
      if (err !== EXTRACT_CLOSED && !abort.signal.aborted) this.#pumpError = err
      extract.destroy(err as Error)
    })
    const fail = async (err: unknown): Promise<never> => {
      await pump
      throw this.#classify(this.#pumpError ?? err)
    }
    let complete = false
    try {
      for (;;) {
        let next: IteratorResult<ExtractEntry>
        try { next = await iterator.next() as IteratorResult<ExtractEntry> } catch (err) { return await fail(err) }
        if (next.done === true) break
        const stream = next.value
        const member = this.#matchMember(guard.nextMember(), stream)
        const header = policy.admit({
          name: member.name,
          type: member.kind,
          mode: member.mode,
          uid: member.uid,
          gid: member.gid,
          mtime: member.mtime,
          size: member.size,
          ...(member.kind === 'symlink' || member.kind === 'hardlink' ? { linkname: member.linkname } : {}),
          ...(member.kind === 'char' || member.kind === 'block' ? { devMajor: member.devMajor, devMinor: member.devMinor } : {}),
          ...(member.xattrs !== undefined ? { xattrs: member.xattrs } : {})
        }, `at offset ${member.offset}`)
        const label = `${this.name}: entry ${JSON.stringify(member.name)} at offset ${member.offset}`
        const body = new EntryBody(stream as unknown as PausableStream, member.size, label, err => this.#classify(this.#pumpError ?? err))
        if (header !== undefined) yield header.type === 'file' ? { header, body } : { header }
        try { await body.drain() } catch (err) { return await fail(err) }
      }
      await pump
      if (this.#pumpError !== undefined) throw this.#classify(this.#pumpError)
      const diffId: Digest = `sha256:${diffHash.digest('hex')}`
      if (this.#input.diffId !== undefined && this.#input.diffId !== diffId) {
        throw new BadInputError(`${this.name}: the uncompressed layer has diff_id ${diffId}, but the image config says ${this.#input.diffId}`)
      }
      this.#diffId = diffId
      this.#input.onDiffId?.(diffId)
      complete = true
    } finally {
      if (!complete) {
        abort.abort()
        extract.destroy()
        await pump
      }
    }
  }

  /** Stored bytes → decompressor → counters and hashes → guard → extract. Resolves once the input is fully read and verified. */
  async #pump (extract: tarStream.Extract, guard: TarFramingGuard, diffHash: ReturnType<typeof createHash>, signal: AbortSignal): Promise<void> {
    const stored = this.#input.open()
    const blobHash = createHash('sha256')
    let storedBytes = 0
    let plainBytes = 0
    const source = stored[Symbol.asyncIterator]() as AsyncIterator<Buffer>
    const head: Buffer[] = []
    let compression: Compression
    try {
      let headBytes = 0
      while (headBytes < COMPRESSION_MAGIC_BYTES) {
        const r = await source.next()
        if (r.done === true) break
        head.push(r.value)
        headBytes += r.value.length
      }
      compression = detectCompression(Buffer.concat(head), this.name)
    } catch (err) {
      stored.destroy()
      throw err
    }
    // An uncompressed blob is its own diff: hash it once (sha256 is the main thread's largest cost in push).
    const hashBlob = compression !== 'none'
    async function * storedChunks (): AsyncGenerator<Buffer> {
      try {
        for (let chunk = head.shift(); chunk !== undefined; chunk = head.shift()) {
          if (hashBlob) blobHash.update(chunk)
          storedBytes += chunk.length; yield chunk
        }
        for (let r = await source.next(); r.done !== true; r = await source.next()) {
          if (hashBlob) blobHash.update(r.value)
          storedBytes += r.value.length; yield r.value
        }
      } finally { stored.destroy() }
    }
    const limits = this.#ctx.limits
    const name = this.name
    const consume = async (plain: AsyncIterable<Uint8Array>): Promise<void> => {
      for await (const chunk of plain) {
        plainBytes += chunk.length
        if (plainBytes > limits.maxLayerBytes) {
          throw new LimitExceededError(`${name}: decompresses to more than ${limits.maxLayerBytes} bytes (maxLayerBytes)`)
        }
        if (compression !== 'none' && plainBytes >= limits.ratioFloorBytes && plainBytes > storedBytes * limits.maxCompressionRatio) {
          throw new LimitExceededError(`${name}: ${storedBytes} compressed bytes decompress to more than ${plainBytes} (ratio above ${limits.maxCompressionRatio}); refusing a likely decompression bomb`)
        }
        diffHash.update(chunk)
        const forward = guard.push(chunk)
        if (forward.length > 0) await writeTo(extract, forward)
      }
      const padding = guard.end()
      if (padding.length > 0) await writeTo(extract, padding)
      extract.end(null)
    }
    const stages: Array<Transform | ((s: AsyncIterable<Uint8Array>) => AsyncIterable<Uint8Array>)> =
      compression === 'gzip' ? [gunzipStream()] : compression === 'zstd' ? [s => zstdDecompress(s, name)] : []
    await (pipeline as (...args: unknown[]) => Promise<void>)(storedChunks(), ...stages, consume, { signal })
    if (this.#input.blobSize !== undefined && storedBytes !== this.#input.blobSize) {
      throw new BadInputError(`${name}: blob is ${storedBytes} bytes but its descriptor says ${this.#input.blobSize}`)
    }
    const blobDigest: Digest = `sha256:${(hashBlob ? blobHash : diffHash.copy()).digest('hex')}`
    if (this.#input.blobDigest !== undefined && blobDigest !== this.#input.blobDigest) {
      throw new BadInputError(`${name}: blob content has digest ${blobDigest}, not ${this.#input.blobDigest} (corrupt or tampered input)`)
    }
  }

  /** The guard's record for the entry tar-stream just emitted; the two readers must agree. */
  #matchMember (member: TarMember | undefined, stream: ExtractEntry): TarMember {
    const h = stream.header
    const agree = member !== undefined &&
      (stream.offset === undefined || stream.offset === member.offset) &&
      h.name === member.name && (h.size ?? 0) === member.size &&
      TAR_STREAM_KINDS[h.type ?? ''] === member.kind
    if (!agree) {
      throw new BadInputError(`${this.name}: ambiguous tar header near offset ${member?.offset ?? stream.offset ?? '?'} (entry ${JSON.stringify(h.name)}): tar readers disagree on its name, type or size`)
    }
    return member
  }

  #classify (err: unknown): Error {
    if (err instanceof LayerdError) return err
    const decompress = describeDecompressError(err)
    if (decompress !== undefined) return new BadInputError(`${this.name}: ${decompress}`, { cause: err })
    const e = err as NodeJS.ErrnoException
    if (typeof e?.code === 'string' && typeof e.syscall === 'string') return new BadInputError(`${this.name}: cannot read the input: ${e.message}`, { cause: err })
    const message = e instanceof Error ? e.message : String(err)
    return new BadInputError(`${this.name}: corrupt tar: ${/unexpected end/i.test(message) ? 'unexpected end of data (truncated?)' : message}`, { cause: err })
  }
}

/** Write with backpressure; rejects with EXTRACT_CLOSED once the extract is closed. */
async function writeTo (extract: tarStream.Extract, chunk: Uint8Array): Promise<void> {
  if (extract.destroyed) throw EXTRACT_CLOSED
  if (extract.write(chunk)) return
  await new Promise<void>((resolve, reject) => {
    const done = (err?: Error): void => {
      extract.off('drain', onDrain)
      extract.off('close', onClose)
      if (err !== undefined) reject(err); else resolve()
    }
    const onDrain = (): void => done()
    const onClose = (): void => done(EXTRACT_CLOSED)
    extract.on('drain', onDrain)
    extract.on('close', onClose)
  })
}
