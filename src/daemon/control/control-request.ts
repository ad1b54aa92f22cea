/**
 * The control server's door: one request line (already split and decoded)
 * checked against the map of control-protocol.ts before any handler sees it.
 * Pure and total: whatever the line holds, the answer is a checked request
 * or a BadRequestError that names the method and the field (never a throw,
 * never a TypeError from a handler reading a field that is not there).
 *
 * Only own properties are looked at, so `__proto__`, `constructor` or
 * `toString` are unknown methods and unknown params like any other name.
 * Values are described by their JSON type, never echoed whole: a line may be
 * a megabyte of nesting.
 *
 * May import: this folder (control-protocol.ts).
 */
import {
  BadRequestError, CONTROL_PARAMS, isControlMethod, type ControlMethod, type ControlRequest, type FieldSpec
} from '../client/control-protocol.js'

export type CheckedLine = { ok: true, request: ControlRequest } | { ok: false, id: number | null, error: BadRequestError }

/** Longest piece of a caller's string quoted back in an error. */
const QUOTE_CHARS = 80

/** Check one request line (UTF-8 decoded, newline removed). Sync; never throws. */
export function checkRequestLine (line: string): CheckedLine {
  let value: unknown
  try {
    value = JSON.parse(line)
  } catch (err) {
    return bad(null, `control request is not valid JSON: ${quote((err as Error).message, 160, false)}`)
  }
  if (!isPlainObject(value)) return bad(null, `control request must be a JSON object with "id", "method" and "params", got ${jsonType(value)}`)
  const id = Object.hasOwn(value, 'id') ? value.id : undefined
  if (!(typeof id === 'number' && Number.isSafeInteger(id))) {
    return bad(null, `control request: "id" must be an integer, got ${id === undefined ? 'nothing' : jsonType(id)}`)
  }
  const method = Object.hasOwn(value, 'method') ? value.method : undefined
  if (typeof method !== 'string') return bad(id, `control request ${id}: "method" must be a string, got ${method === undefined ? 'nothing' : jsonType(method)}`)
  if (!isControlMethod(method)) {
    return bad(id, `control request ${id}: unknown method ${quote(method)}; methods: ${Object.keys(CONTROL_PARAMS).join(', ')}`)
  }
  for (const key of Object.keys(value)) {
    if (key !== 'id' && key !== 'method' && key !== 'params') return bad(id, `control request ${id} (${method}): unknown field ${quote(key)}`)
  }
  const params = Object.hasOwn(value, 'params') ? value.params : {}
  if (!isPlainObject(params)) return bad(id, `control request ${id} (${method}): "params" must be an object, got ${jsonType(params)}`)
  const problem = checkParams(method, params)
  if (problem !== undefined) return bad(id, `control request ${id} (${method}): ${problem}`)
  return { ok: true, request: { id, method, params } as ControlRequest }
}

/** What is wrong with `params` for `method`, or undefined. */
function checkParams (method: ControlMethod, params: Record<string, unknown>): string | undefined {
  const spec: Readonly<Record<string, FieldSpec>> = CONTROL_PARAMS[method]
  for (const key of Object.keys(params)) {
    if (!Object.hasOwn(spec, key)) {
      const known = Object.keys(spec)
      return `unknown param ${quote(key)} (${known.length === 0 ? 'it takes none' : `it takes ${known.join(', ')}`})`
    }
  }
  for (const [key, field] of Object.entries(spec)) {
    const optional = field.endsWith('?')
    const kind = optional ? field.slice(0, -1) : field
    const v = params[key]
    if (v === undefined) {
      if (optional) continue
      return `params.${key} is missing (${describeKind(kind)})`
    }
    const problem = checkField(kind, v)
    if (problem !== undefined) return `params.${key} ${problem}`
  }
  return undefined
}

function checkField (kind: string, v: unknown): string | undefined {
  if (kind === 'boolean') return typeof v === 'boolean' ? undefined : `must be true or false, got ${jsonType(v)}`
  if (kind === 'number') return typeof v === 'number' && Number.isFinite(v) && v >= 0 ? undefined : `must be a number >= 0, got ${typeof v === 'number' ? String(v) : jsonType(v)}`
  if (typeof v !== 'string') return `must be ${describeKind(kind)}, got ${jsonType(v)}`
  if (v.includes('\0')) return 'must not contain a NUL character'
  if (kind === 'path' && !v.startsWith('/')) return `must be an absolute path, got ${quote(v)}`
  return undefined
}

function describeKind (kind: string): string {
  return kind === 'path' ? 'a string: an absolute path' : kind === 'boolean' ? 'true or false' : kind === 'number' ? 'a number >= 0' : 'a string'
}

function isPlainObject (v: unknown): v is Record<string, unknown> {
  return typeof v === 'object' && v !== null && !Array.isArray(v)
}

/** `null`, `an array`, `a string`, … : what a JSON value is. */
export function jsonType (v: unknown): string {
  if (v === null) return 'null'
  if (Array.isArray(v)) return 'an array'
  if (typeof v === 'object') return 'an object'
  return `a ${typeof v}`
}

function quote (s: string, max = QUOTE_CHARS, json = true): string {
  const cut = s.length > max ? `${s.slice(0, max)}…` : s
  return json ? JSON.stringify(cut) : cut
}

function bad (id: number | null, message: string): CheckedLine {
  return { ok: false, id, error: new BadRequestError(message) }
}
