/**
 * Where containerd's API protos are (see containerd-protos.ts, which loads
 * them), without loading gRPC: the daemon checks at start that they are
 * there, and loads grpc-js only when containerd first connects (issue 14:
 * grpc-js and the protos are ~15 MB of an idle daemon's RSS).
 *
 * May import: src/errors.ts, node built-ins.
 */
import { existsSync } from 'node:fs'
import { join } from 'node:path'
import { UnsupportedError } from '../errors.js'

const GOCODE_SRC = '/usr/share/gocode/src'
const API_PREFIX = 'github.com/containerd/containerd/api'

/** The API files layerd uses, relative to the include root. */
export const CONTAINERD_PROTOS = {
  snapshots: `${API_PREFIX}/services/snapshots/v1/snapshots.proto`,
  content: `${API_PREFIX}/services/content/v1/content.proto`,
  images: `${API_PREFIX}/services/images/v1/images.proto`,
  leases: `${API_PREFIX}/services/leases/v1/leases.proto`
} as const

/** The include root holding containerd's API, or throws UnsupportedError naming the package to install. Sync. */
export function containerdApiRoot (env: NodeJS.ProcessEnv = process.env): string {
  const root = env.LAYERD_CONTAINERD_API ?? GOCODE_SRC
  if (!existsSync(join(root, CONTAINERD_PROTOS.snapshots))) {
    throw new UnsupportedError(`containerd's API protos are not at ${join(root, API_PREFIX)}: install golang-github-containerd-containerd-dev (apt), or set LAYERD_CONTAINERD_API`)
  }
  return root
}
