/**
 * What ObjectStore.put() writes: one buffer, or parts that make up the
 * object one after another. Push hands a blob over as the zstd frames it
 * packed, views of the chunking workers' results, so no thread copies 16 MiB
 * into one buffer first: the fs store writes the parts with writev, and a
 * store that needs one buffer (memory, S3) joins them itself.
 *
 * May import: nothing (node built-ins).
 */

/** An object's bytes: one buffer, or its parts in order. */
export type ObjectBody = Uint8Array | readonly Uint8Array[]

/** Total bytes of `body`. Sync. */
export function bodyLength (body: ObjectBody): number {
  if (body instanceof Uint8Array) return body.length
  let n = 0
  for (const part of body) n += part.length
  return n
}

/** `body` as one buffer: itself when it is one, else its parts joined (a copy). Sync. */
export function bodyBytes (body: ObjectBody): Uint8Array {
  return body instanceof Uint8Array ? body : Buffer.concat(body)
}

/** The parts of `body` after its first `n` bytes (views, no copy). Sync. */
export function bodyAfter (body: ObjectBody, n: number): Uint8Array[] {
  const parts = body instanceof Uint8Array ? [body] : body
  const rest: Uint8Array[] = []
  let skip = n
  for (const part of parts) {
    if (skip >= part.length) { skip -= part.length; continue }
    rest.push(skip === 0 ? part : part.subarray(skip))
    skip = 0
  }
  return rest
}
