/**
 * envd's `/files`: `GET /files?path=P` sends the file's bytes;
 * `POST /files?path=P` writes one (parents made), as the SDK sends it:
 * `multipart/form-data` with one `file` part per file (its filename the path
 * when the query has none), or `application/octet-stream` with the bytes as
 * the body. Answers `[{ name, type: 'file', path }]`. Errors are envd's
 * `{ code, message }` with the HTTP status (404, 400, 507 for a full disk).
 *
 * An octet-stream body is streamed to the file; a multipart body is read
 * whole first (Node's Request parses it), so both are capped at
 * MAX_UPLOAD_BYTES.
 *
 * May import: src/errors.ts, ./ modules, node built-ins.
 */
import { createReadStream, createWriteStream } from 'node:fs'
import type { IncomingMessage, ServerResponse } from 'node:http'
import { pipeline } from 'node:stream/promises'
import { posix } from 'node:path'
import { BadInputError, LimitExceededError } from '../errors.js'
import { readBody } from './http-io.js'
import type { SandboxFiles } from './sandbox-files.js'

export const MAX_UPLOAD_BYTES = 512 * 1024 ** 2

export async function getFile (res: ServerResponse, url: URL, files: SandboxFiles): Promise<void> {
  const { fd, size } = files.openRead(url.searchParams.get('path') ?? '')
  res.writeHead(200, { 'content-type': 'application/octet-stream', 'content-length': size })
  await pipeline(createReadStream('', { fd, autoClose: true }), res)
}

async function writeBytes (files: SandboxFiles, path: string, data: Uint8Array): Promise<unknown> {
  const { fd, path: p } = await files.openWrite(path)
  await new Promise<void>((resolve, reject) => {
    const out = createWriteStream('', { fd, autoClose: true })
    out.on('error', reject)
    out.end(data, () => resolve())
  })
  return { name: posix.basename(p), type: 'file', path: p }
}

export async function postFile (req: IncomingMessage, res: ServerResponse, url: URL, files: SandboxFiles): Promise<unknown[]> {
  const queryPath = url.searchParams.get('path') ?? undefined
  const type = (req.headers['content-type'] ?? '').split(';')[0]!.trim().toLowerCase()
  if (type === 'application/octet-stream') {
    if (queryPath === undefined) throw new BadInputError('an octet-stream upload needs ?path=')
    if (req.headers['content-encoding'] !== undefined) throw new BadInputError('compressed uploads are not supported')
    const { fd, path } = await files.openWrite(queryPath)
    let total = 0
    const out = createWriteStream('', { fd, autoClose: true })
    req.on('data', (c: Buffer) => {
      total += c.length
      if (total > MAX_UPLOAD_BYTES) req.destroy(new LimitExceededError(`upload over ${MAX_UPLOAD_BYTES} bytes`))
    })
    await pipeline(req, out)
    return [{ name: posix.basename(path), type: 'file', path }]
  }
  if (type !== 'multipart/form-data') throw new BadInputError(`upload a file as multipart/form-data or application/octet-stream, not ${JSON.stringify(type)}`)
  const body = await readBody(req, MAX_UPLOAD_BYTES)
  let form: FormData
  try {
    form = await new Request('http://upload/', { method: 'POST', headers: { 'content-type': String(req.headers['content-type']) }, body }).formData()
  } catch (err) { throw new BadInputError(`the multipart body does not parse: ${(err as Error).message}`) }
  const written: unknown[] = []
  for (const part of form.getAll('file')) {
    if (typeof part === 'string') throw new BadInputError('the file part must be a file, not a field')
    const path = queryPath ?? part.name
    if (path === '' || path === 'blob') throw new BadInputError('no path: give ?path= or the file part\'s filename')
    written.push(await writeBytes(files, path, new Uint8Array(await part.arrayBuffer())))
  }
  if (written.length === 0) throw new BadInputError('the multipart body has no "file" part')
  return written
}
