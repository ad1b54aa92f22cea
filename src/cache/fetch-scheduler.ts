/**
 * FetchScheduler: bounded concurrency with two priorities. Demand jobs
 * (a reader is waiting) have their own slots and are never queued behind
 * prefetch jobs; a prefetch job starts only when no demand job is waiting
 * and a prefetch slot is free. A queued prefetch job that a reader starts
 * waiting for is promoted to demand.
 *
 * May import: nothing from the project.
 */

export type FetchPriority = 'demand' | 'prefetch'

export interface FetchJob {
  priority: FetchPriority
  state: 'queued' | 'running' | 'done'
  /** Does the work; must not reject (jobs report their own failures). */
  run: () => Promise<void>
}

/** A FIFO with O(1) shift, and removal by identity for promotion. */
class JobQueue {
  #items: Array<FetchJob | undefined> = []
  #head = 0
  #size = 0

  get size (): number { return this.#size }

  push (job: FetchJob): void { this.#items.push(job); this.#size++ }

  shift (): FetchJob | undefined {
    while (this.#head < this.#items.length) {
      const job = this.#items[this.#head]
      // Let go of the slot at once: a job's pendings hold its fetched chunks until the job is collected.
      this.#items[this.#head++] = undefined
      if (job !== undefined) {
        this.#size--
        this.#compact()
        return job
      }
    }
    return undefined
  }

  remove (job: FetchJob): boolean {
    const i = this.#items.indexOf(job, this.#head)
    if (i < 0) return false
    this.#items[i] = undefined
    this.#size--
    return true
  }

  drain (): FetchJob[] {
    const jobs = this.#items.slice(this.#head).filter((j): j is FetchJob => j !== undefined)
    this.#items = []
    this.#head = 0
    this.#size = 0
    return jobs
  }

  #compact (): void {
    if (this.#head > 1024 && this.#head * 2 > this.#items.length) {
      this.#items = this.#items.slice(this.#head)
      this.#head = 0
    }
  }
}

export class FetchScheduler {
  readonly #limits: Record<FetchPriority, number>
  readonly #queues: Record<FetchPriority, JobQueue> = { demand: new JobQueue(), prefetch: new JobQueue() }
  readonly #active: Record<FetchPriority, number> = { demand: 0, prefetch: 0 }
  readonly #running = new Set<Promise<void>>()

  constructor (limits: Record<FetchPriority, number>) {
    this.#limits = { ...limits }
  }

  /** Jobs waiting, and running, per priority. Sync. */
  queued (p: FetchPriority): number { return this.#queues[p].size }
  running (p: FetchPriority): number { return this.#active[p] }

  /** Queue a job and start what the limits allow. Sync. */
  submit (job: FetchJob): void {
    job.state = 'queued'
    this.#queues[job.priority].push(job)
    this.#pump()
  }

  /** Move a queued prefetch job to the demand queue. Sync; false if it already runs. */
  promote (job: FetchJob): boolean {
    if (job.state !== 'queued' || job.priority === 'demand') return false
    if (!this.#queues.prefetch.remove(job)) return false
    job.priority = 'demand'
    this.#queues.demand.push(job)
    this.#pump()
    return true
  }

  /** Remove and return every queued job (running ones go on). Sync. */
  drain (): FetchJob[] {
    return [...this.#queues.demand.drain(), ...this.#queues.prefetch.drain()]
  }

  /** Resolves when no job is running. Async. */
  async idle (): Promise<void> {
    while (this.#running.size > 0) await Promise.allSettled([...this.#running])
  }

  #pump (): void {
    const demand = this.#queues.demand
    while (demand.size > 0 && this.#active.demand < this.#limits.demand) this.#start(demand.shift()!, 'demand')
    const prefetch = this.#queues.prefetch
    while (demand.size === 0 && prefetch.size > 0 && this.#active.prefetch < this.#limits.prefetch) {
      this.#start(prefetch.shift()!, 'prefetch')
    }
  }

  #start (job: FetchJob, slot: FetchPriority): void {
    job.state = 'running'
    this.#active[slot]++
    const p: Promise<void> = job.run().catch(() => {}).finally(() => {
      job.state = 'done'
      this.#active[slot]--
      this.#running.delete(p)
      this.#pump()
    })
    this.#running.add(p)
  }
}
