/**
 * Object key rules, shared by every ObjectStore backend so that a key that
 * works in one store works in all of them, and a key can never name a path
 * outside an FsObjectStore's root.
 *
 * A key is one or more `/`-separated components. Each component is 1–255
 * UTF-8 bytes, is not `.` or `..`, does not start with `.tmp-` (reserved for
 * FsObjectStore's in-flight writes) and holds no control character (NUL
 * included; S3 listings cannot carry them in XML). The whole key is at most
 * 1024 UTF-8 bytes (the S3 limit).
 *
 * May import: src/errors.ts.
 */
import { BadInputError } from '../errors.js'

export const MAX_KEY_BYTES = 1024
export const MAX_KEY_COMPONENT_BYTES = 255
/** Name prefix of FsObjectStore's temporary files; no key component may start with it. */
export const TEMP_NAME_PREFIX = '.tmp-'

// eslint-disable-next-line no-control-regex
const CONTROL_CHAR_RE = /[\u0000-\u001f\u007f]/

/** Why `component` is not a valid key component, or undefined when it is. */
function componentProblem (component: string): string | undefined {
  if (component === '') return 'empty path component (leading, trailing or double "/")'
  if (component === '.' || component === '..') return `path component "${component}" is not allowed`
  if (component.startsWith(TEMP_NAME_PREFIX)) return `path components starting with "${TEMP_NAME_PREFIX}" are reserved`
  if (CONTROL_CHAR_RE.test(component)) return 'control characters (NUL included) are not allowed'
  if (Buffer.byteLength(component) > MAX_KEY_COMPONENT_BYTES) return `a path component is longer than ${MAX_KEY_COMPONENT_BYTES} bytes`
  return undefined
}

/** Why `key` is not a valid object key, or undefined when it is. Synchronous. */
export function objectKeyProblem (key: string): string | undefined {
  if (typeof key !== 'string' || key === '') return 'key is empty'
  if (Buffer.byteLength(key) > MAX_KEY_BYTES) return `key is longer than ${MAX_KEY_BYTES} bytes`
  for (const component of key.split('/')) {
    const problem = componentProblem(component)
    if (problem !== undefined) return problem
  }
  return undefined
}

/**
 * Throws BadInputError naming the key and the store when `key` breaks the
 * rules above. Synchronous.
 */
export function assertValidKey (key: string, storeUrl: string): void {
  const problem = objectKeyProblem(key)
  if (problem !== undefined) throw new BadInputError(`invalid object key ${JSON.stringify(key)} for store ${storeUrl}: ${problem}`)
}

/**
 * Checks a list() prefix: any string whose complete components (all but the
 * text after the last `/`) are valid key components, and whose tail has no
 * control characters. The empty prefix lists everything. Throws BadInputError.
 */
export function assertValidPrefix (prefix: string, storeUrl: string): void {
  if (typeof prefix !== 'string') throw new BadInputError(`invalid list prefix for store ${storeUrl}: not a string`)
  if (prefix === '') return
  const slash = prefix.lastIndexOf('/')
  let problem = Buffer.byteLength(prefix) > MAX_KEY_BYTES ? `prefix is longer than ${MAX_KEY_BYTES} bytes` : undefined
  if (problem === undefined && slash >= 0) {
    for (const component of prefix.slice(0, slash).split('/')) {
      problem = componentProblem(component)
      if (problem !== undefined) break
    }
  }
  if (problem === undefined && CONTROL_CHAR_RE.test(prefix.slice(slash + 1))) problem = 'control characters (NUL included) are not allowed'
  if (problem !== undefined) throw new BadInputError(`invalid list prefix ${JSON.stringify(prefix)} for store ${storeUrl}: ${problem}`)
}

/**
 * Checks getRange() arguments: non-negative safe integers. Throws
 * BadInputError naming the key and the range. Synchronous.
 */
export function assertValidRange (key: string, offset: number, length: number, storeUrl: string): void {
  if (!Number.isSafeInteger(offset) || offset < 0 || !Number.isSafeInteger(length) || length < 0) {
    throw new BadInputError(`invalid range offset=${offset} length=${length} for object ${key} in store ${storeUrl}: must be non-negative integers`)
  }
}

/** The message every backend uses for a missing object. */
export function notFoundMessage (key: string, storeUrl: string): string {
  return `object ${key} not found in store ${storeUrl}`
}

/** The message every backend uses when an object is shorter than a range asked for. */
export function shortObjectMessage (key: string, storeUrl: string, offset: number, length: number, available: number | undefined): string {
  const got = available === undefined ? 'fewer bytes' : `${available} byte${available === 1 ? '' : 's'}`
  return `object ${key} in store ${storeUrl} is shorter than the range asked for: wanted ${length} bytes at offset ${offset}, got ${got}`
}
