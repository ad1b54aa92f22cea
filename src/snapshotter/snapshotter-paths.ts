/**
 * The names a node's containerd settings use, apart from the snapshotter's
 * code, so that `layerctl` can print them without loading gRPC.
 *
 * May import: node built-ins.
 */
import { join } from 'node:path'

/** The proxy snapshotter's name in containerd's config and `--snapshotter`. */
export const SNAPSHOTTER_NAME = 'layerd'

/** containerd's own socket, when neither --address nor CONTAINERD_ADDRESS names one. */
export const DEFAULT_CONTAINERD_ADDRESS = '/run/containerd/containerd.sock'

/** `<home>/snapshotter.sock`. */
export function snapshotterSocketPath (home: string): string { return join(home, 'snapshotter.sock') }
