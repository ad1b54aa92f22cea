/**
 * Image references: `NAME:TAG`, docker-style. NAME is lowercase path
 * components separated by `/`; TAG is `[A-Za-z0-9_][A-Za-z0-9_.-]{0,127}`.
 * A missing tag means `latest`.
 */
import { UsageError } from '../errors.js'

export interface ImageRef { name: string, tag: string }

const NAME_COMPONENT_RE = /^[a-z0-9]+(?:(?:[._]|__|-+)[a-z0-9]+)*$/
const TAG_RE = /^[A-Za-z0-9_][A-Za-z0-9_.-]{0,127}$/
const MAX_NAME_LENGTH = 255

/** Parse `NAME[:TAG]`. Throws UsageError naming the input on anything malformed. */
export function parseRef (input: string): ImageRef {
  const at = input.lastIndexOf(':')
  const slash = input.lastIndexOf('/')
  const hasTag = at > slash && at !== -1
  const name = hasTag ? input.slice(0, at) : input
  const tag = hasTag ? input.slice(at + 1) : 'latest'
  if (name.length === 0 || name.length > MAX_NAME_LENGTH || !name.split('/').every(c => NAME_COMPONENT_RE.test(c))) {
    throw new UsageError(`invalid image name ${JSON.stringify(input)}: use lowercase letters, digits, '.', '_', '-' and '/' (for example debian/python:3.11)`)
  }
  if (!TAG_RE.test(tag)) {
    throw new UsageError(`invalid tag in ${JSON.stringify(input)}: a tag is 1-128 of [A-Za-z0-9_.-] and does not start with '.' or '-'`)
  }
  return { name, tag }
}

export function formatRef (ref: ImageRef): string {
  return `${ref.name}:${ref.tag}`
}
