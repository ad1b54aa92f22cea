/**
 * FaultyObjectStore: a decorator for tests and benchmarks that injects
 * failures, corruption and latency into a real store, and counts what
 * reaches it.
 *
 * With no rules it is a counting store: push tests read `counters` to prove
 * that a rerun uploads only what is missing (`counters.puts`,
 * `counters.bytesPut`, `putKeys`).
 *
 * A FaultRule matches calls by op and key prefix; among matching calls it
 * skips the first `skip`, then fires `times` times:
 * - fail the 3rd put:          `{ ops: ['put'], skip: 2, times: 1 }`
 * - fail every op after 10:    `{ skip: 10 }`
 * - fail puts under blobs/:    `{ ops: ['put'], keyPrefix: 'blobs/' }`
 * - lost acknowledgement:      `{ ops: ['put'], when: 'after' }` (stored, then throws)
 * - corrupt a blob's reads:    `{ ops: ['get', 'getRange'], keyPrefix: 'blobs/x', effect: 'corrupt' }`
 *
 * May import: src/errors.ts, ./object-store.ts.
 */
import { setTimeout as sleep } from 'node:timers/promises'
import { StoreUnavailableError } from '../errors.js'
import { bodyLength, type ObjectBody } from './object-body.js'
import type { ListedObject, ObjectStat, ObjectStore } from './object-store.js'

export type StoreOp = 'get' | 'getRange' | 'put' | 'stat' | 'list' | 'delete'

export interface FaultRule {
  /** Ops the rule applies to; default all. */
  ops?: readonly StoreOp[]
  /** Only keys (for list: prefixes) starting with this; default all. */
  keyPrefix?: string
  /** Matching calls let through before the rule fires. Default 0. */
  skip?: number
  /** Times the rule fires, then it goes quiet. Default unlimited. */
  times?: number
  /** 'fail' (default) throws; 'corrupt' flips a bit in the bytes get/getRange return. */
  effect?: 'fail' | 'corrupt'
  /** For 'fail': throw before calling the store (default) or after it succeeded. */
  when?: 'before' | 'after'
  /** What to throw; default a StoreUnavailableError naming the op and key. */
  error?: (op: StoreOp, key: string) => Error
}

export interface StoreCounters {
  /** Calls that reached the store below and succeeded, per op (an injected 'after' failure still counts). */
  gets: number
  getRanges: number
  puts: number
  stats: number
  lists: number
  deletes: number
  /** Bytes written by successful puts. */
  bytesPut: number
  /** Bytes returned by successful get and getRange calls. */
  bytesGot: number
  /** Failures injected by rules. */
  injectedFailures: number
  /** Reads corrupted by rules. */
  injectedCorruptions: number
}

interface ActiveRule { rule: FaultRule, seen: number, fired: number }

const zeroCounters = (): StoreCounters => ({
  gets: 0, getRanges: 0, puts: 0, stats: 0, lists: 0, deletes: 0, bytesPut: 0, bytesGot: 0, injectedFailures: 0, injectedCorruptions: 0
})

export class FaultyObjectStore implements ObjectStore {
  readonly url: string
  readonly remote: boolean
  readonly inner: ObjectStore
  counters: StoreCounters = zeroCounters()
  /** Keys of successful puts, in order (repeats included). */
  putKeys: string[] = []
  /** Added to every call before it reaches the store; for benchmarks. */
  latencyMs: number
  #rules: ActiveRule[] = []

  constructor (inner: ObjectStore, options: { rules?: FaultRule[], latencyMs?: number } = {}) {
    this.inner = inner
    this.url = inner.url
    this.remote = inner.remote === true
    this.latencyMs = options.latencyMs ?? 0
    for (const rule of options.rules ?? []) this.addFault(rule)
  }

  /** Adds a rule; its `skip` counts calls from now on. Synchronous. */
  addFault (rule: FaultRule): void {
    this.#rules.push({ rule, seen: 0, fired: 0 })
  }

  /** Removes every rule. Synchronous. */
  clearFaults (): void {
    this.#rules = []
  }

  /** Zeroes the counters and putKeys. Synchronous. */
  resetCounters (): void {
    this.counters = zeroCounters()
    this.putKeys = []
  }

  async get (key: string): Promise<Buffer> {
    const rules = await this.#enter('get', key)
    const data = await this.inner.get(key)
    this.counters.gets++
    this.counters.bytesGot += data.length
    this.#afterSuccess('get', key, rules)
    return this.#maybeCorrupt(rules, data)
  }

  async getRange (key: string, offset: number, length: number): Promise<Buffer> {
    const rules = await this.#enter('getRange', key)
    const data = await this.inner.getRange(key, offset, length)
    this.counters.getRanges++
    this.counters.bytesGot += data.length
    this.#afterSuccess('getRange', key, rules)
    return this.#maybeCorrupt(rules, data)
  }

  async put (key: string, data: ObjectBody): Promise<void> {
    const rules = await this.#enter('put', key)
    await this.inner.put(key, data)
    this.counters.puts++
    this.counters.bytesPut += bodyLength(data)
    this.putKeys.push(key)
    this.#afterSuccess('put', key, rules)
  }

  async stat (key: string): Promise<ObjectStat | undefined> {
    const rules = await this.#enter('stat', key)
    const result = await this.inner.stat(key)
    this.counters.stats++
    this.#afterSuccess('stat', key, rules)
    return result
  }

  async * list (prefix: string): AsyncIterable<string> {
    const rules = await this.#enter('list', prefix)
    yield * this.inner.list(prefix)
    this.counters.lists++
    this.#afterSuccess('list', prefix, rules)
  }

  async * listObjects (prefix: string): AsyncIterable<ListedObject> {
    const rules = await this.#enter('list', prefix)
    yield * this.inner.listObjects(prefix)
    this.counters.lists++
    this.#afterSuccess('list', prefix, rules)
  }

  async delete (key: string): Promise<void> {
    const rules = await this.#enter('delete', key)
    await this.inner.delete(key)
    this.counters.deletes++
    this.#afterSuccess('delete', key, rules)
  }

  async close (): Promise<void> {
    await this.inner.close()
  }

  /**
   * Applies latency, then the rules that fire for this call: throws for a
   * 'before' failure; returns the fired 'after' and 'corrupt' rules.
   */
  async #enter (op: StoreOp, key: string): Promise<FaultRule[]> {
    if (this.latencyMs > 0) await sleep(this.latencyMs)
    const fired: FaultRule[] = []
    for (const active of this.#rules) {
      const { rule } = active
      if (rule.ops !== undefined && !rule.ops.includes(op)) continue
      if (rule.keyPrefix !== undefined && !key.startsWith(rule.keyPrefix)) continue
      active.seen++
      if (active.seen <= (rule.skip ?? 0) || active.fired >= (rule.times ?? Infinity)) continue
      active.fired++
      fired.push(rule)
    }
    const failNow = fired.find(r => (r.effect ?? 'fail') === 'fail' && (r.when ?? 'before') === 'before')
    if (failNow !== undefined) throw this.#injected(failNow, op, key)
    return fired
  }

  #afterSuccess (op: StoreOp, key: string, fired: FaultRule[]): void {
    const failNow = fired.find(r => (r.effect ?? 'fail') === 'fail' && r.when === 'after')
    if (failNow !== undefined) throw this.#injected(failNow, op, key)
  }

  #injected (rule: FaultRule, op: StoreOp, key: string): Error {
    this.counters.injectedFailures++
    return rule.error?.(op, key) ?? new StoreUnavailableError(`cannot ${op} ${key} in store ${this.url}: injected failure`)
  }

  #maybeCorrupt (fired: FaultRule[], data: Buffer): Buffer {
    if (!fired.some(r => r.effect === 'corrupt') || data.length === 0) return data
    this.counters.injectedCorruptions++
    const corrupted = Buffer.from(data)
    const at = corrupted.length >> 1
    corrupted[at] = (corrupted[at] as number) ^ 0x01
    return corrupted
  }
}
