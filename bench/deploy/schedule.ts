/**
 * How containers are laid out and started, the same for every side:
 * container i goes to node n = i mod M (round robin: a scheduler with no
 * image affinity, as a large cluster's is in effect); the j-th container of
 * node n runs task image (n + j) mod K, so every node cycles through all K
 * images (i mod K would hand node n only the images ≡ n mod gcd(M, K)) and
 * each image gets N / K containers (RL rollouts: a group of samples per
 * task). Each node starts its containers in order, at most C at a time.
 *
 * Time to ready of a container: from the moment its deploy starts (it
 * takes one of the node's C slots) until its task has finished (docker
 * run returned / exec returned), so it includes the image pull or mount,
 * or waiting for the node's in-flight pull of the same image, the
 * container's creation and start, and the task itself; not its removal.
 *
 * Bench-only: may import nothing outside this folder.
 */

export interface Placement<T> {
  /** Container index, 0-based, cluster-wide. */
  index: number
  node: number
  task: T
}

/** Containers per node, in start order. Pure. */
export function placeContainers<T> (containers: number, nodes: number, tasks: T[]): Array<Array<Placement<T>>> {
  if (tasks.length === 0) throw new Error('no task images to place')
  const out: Array<Array<Placement<T>>> = Array.from({ length: nodes }, () => [])
  for (let i = 0; i < containers; i++) {
    const node = i % nodes
    const j = Math.floor(i / nodes)
    out[node]!.push({ index: i, node, task: tasks[(node + j) % tasks.length]! })
  }
  return out
}

export interface ContainerTiming {
  index: number
  node: number
  /** ms after the node's deploy started that this container's deploy started. */
  startMs: number
  /** Time to ready, ms. */
  readyMs: number
  /** ms after the node's deploy started that the container was removed. */
  endMs: number
}

/**
 * Run `deploy` for every placement with at most `concurrency` in flight,
 * in order. Resolves when all finished, with the node's wall time and each
 * container's timing. `deploy` resolves with its time to ready (ms) and
 * must finish the container's removal before resolving. Rejects with the
 * first failure (after the ones in flight settle).
 */
export async function runWithConcurrency<T> (
  placements: Array<Placement<T>>,
  concurrency: number,
  deploy: (p: Placement<T>) => Promise<{ readyMs: number }>
): Promise<{ seconds: number, timings: ContainerTiming[] }> {
  const t0 = performance.now()
  const timings: ContainerTiming[] = []
  let next = 0
  let failure: unknown
  const worker = async (): Promise<void> => {
    while (next < placements.length && failure === undefined) {
      const p = placements[next++]!
      const startMs = performance.now() - t0
      try {
        const { readyMs } = await deploy(p)
        timings.push({ index: p.index, node: p.node, startMs, readyMs, endMs: performance.now() - t0 })
      } catch (err) {
        failure ??= err
      }
    }
  }
  await Promise.all(Array.from({ length: Math.max(1, concurrency) }, worker))
  if (failure !== undefined) throw failure
  return { seconds: (performance.now() - t0) / 1000, timings: timings.sort((a, b) => a.index - b.index) }
}

export { quantile } from '../bench-report.js'

/**
 * Cluster-wide readiness curve: the k-th smallest ready time (seconds
 * after its node's deploy started) for k = 1..N. Nodes are parallel
 * machines, so each node's clock starts at 0. Pure.
 */
export function readinessCurve (timings: ContainerTiming[]): number[] {
  return timings.map(t => (t.startMs + t.readyMs) / 1000).sort((a, b) => a - b)
}
