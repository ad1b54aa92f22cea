/**
 * Which layerctl invocations layerd's run socket serves (run-connection.ts)
 * instead of a Node CLI process of their own: those whose answer depends on
 * nothing of the caller's but its arguments and the environment the C front
 * sends (native/layerctl.c: LAYERD_* and RUN_SOCKET_ENV).
 *
 * - `run`: a sandbox; a Node process per run capped a node near 10 runs/s.
 * - `containerd pull` of a layerd image: a `containerdPull` call to layerd
 *   anyway, so the Node process (~0.4 s of every cold container start
 *   through containerd) was all of the client's cost. Not a `docker://`
 *   image (pulled in the caller's process, with its registry credentials:
 *   auth files and credential helpers the runner does not share), and not a
 *   relative containerd address (the caller's working directory).
 *
 * Everything else gets the fallback frame: the Node CLI answers it.
 *
 * May import: this folder.
 */
import { isAbsolute } from 'node:path'
import type { CommandArgs } from './command.js'

/** Variables besides LAYERD_* that the C front sends and a served command reads (`containerd pull`'s defaults). Mirrored in native/layerctl.c. */
export const RUN_SOCKET_ENV = ['CONTAINERD_ADDRESS', 'CONTAINERD_NAMESPACE'] as const

/** Whether the run socket serves `command` with `args` for a caller with `env`. Sync; never throws. */
export function servedByRunSocket (command: string, args: CommandArgs, env: Record<string, string | undefined>): boolean {
  if (command === 'run') return true
  if (command !== 'containerd') return false
  const [sub, image, ...more] = args.positionals
  if (sub !== 'pull' || image === undefined || more.length > 0 || image.startsWith('docker://')) return false
  const address = args.values.address ?? env.CONTAINERD_ADDRESS
  return address === undefined || (typeof address === 'string' && isAbsolute(address))
}
