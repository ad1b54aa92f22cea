/**
 * envd's `filesystem.Filesystem` service (unary Connect calls; messages from
 * the `e2b` package's filesystem/filesystem.proto): `Stat { path }`,
 * `ListDir { path, depth }`, `MakeDir { path }` (already_exists when it was
 * there, which the SDK answers with false), `Move { source, destination }`,
 * `Remove { path }`. Every path stays inside the sandbox (./sandbox-files.ts).
 * Watching (`WatchDir`, `CreateWatcher`, `GetWatcherEvents`, `RemoveWatcher`)
 * is not served: unimplemented.
 *
 * May import: src/errors.ts, ./ modules.
 */
import { BadInputError } from '../errors.js'
import type { SandboxFiles } from './sandbox-files.js'

const MAX_DEPTH = 32

export const filesystemMethods: Record<string, (msg: Record<string, unknown>, files: SandboxFiles) => Promise<unknown>> = {
  Stat: async (msg, files) => ({ entry: await files.stat(msg.path) }),
  ListDir: async (msg, files) => {
    const depth = msg.depth ?? 1
    if (typeof depth !== 'number' || !Number.isInteger(depth) || depth < 1 || depth > MAX_DEPTH) throw new BadInputError(`depth must be a whole number from 1 to ${MAX_DEPTH}`)
    return { entries: await files.list(msg.path, depth) }
  },
  MakeDir: async (msg, files) => {
    if (!await files.makeDir(msg.path)) throw Object.assign(new Error(`${String(msg.path)}: already exists`), { code: 'EEXIST' })
    return { entry: await files.stat(msg.path) }
  },
  Move: async (msg, files) => ({ entry: await files.move(msg.source, msg.destination) }),
  Remove: async (msg, files) => { await files.remove(msg.path); return {} }
}

export const UNSERVED_FILESYSTEM_METHODS = new Set(['WatchDir', 'CreateWatcher', 'GetWatcherEvents', 'RemoveWatcher'])
