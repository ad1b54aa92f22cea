/**
 * The 'vm' tier boots the kernel inside the image when there is one:
 * `/boot/vmlinuz-<release>` with its modules in `/usr/lib/modules/<release>`
 * (or `/lib/modules`). They are read straight out of the block view with
 * debugfs (e2fsprogs), so only the blocks of those files are fetched, never
 * the whole image: the kernel, modules.dep, modules.builtin and just the
 * modules the guest needs (with their dependencies, from modules.dep).
 * An image kernel without modules.dep gets its whole module tree copied.
 *
 * The copy lands in `<cacheDir>/image-kernels/<release>-<identity>`;
 * prepareGuestKernel then makes the vmlinux and initrd from it.
 *
 * May import: src/errors.ts, src/host/, this folder, node built-ins.
 */
import { createHash } from 'node:crypto'
import { access, mkdir, rename, rm, writeFile } from 'node:fs/promises'
import { dirname, join } from 'node:path'
import { BadInputError, UnsupportedError } from '../../errors.js'
import { runHost } from '../../host/host-command.js'
import { GUEST_MODULES_OPTIONAL, GUEST_MODULES_REQUIRED } from './kernel-modules.js'
import type { GuestKernelSource } from './guest-kernel.js'

const MAX_LISTING_BYTES = 64 * 1024 * 1024
const MODULE_ROOTS = ['/usr/lib/modules', '/lib/modules']

async function debugfs (image: string, request: string): Promise<string> {
  try {
    return await runHost('debugfs', ['-R', request, image], { timeoutMs: Infinity, maxStdoutBytes: MAX_LISTING_BYTES, missing: 'debugfs (e2fsprogs) is not installed' })
  } catch (err) {
    if (err instanceof UnsupportedError) throw err
    throw new BadInputError(`debugfs -R ${JSON.stringify(request)} ${image} failed: ${(err as Error).message}`, { cause: err })
  }
}

/** Names in directory `dir` of the image (`ls -p`: /inode/mode/uid/gid/name/size/). Empty when it does not exist. */
async function listDir (image: string, dir: string): Promise<Array<{ name: string, mode: number }>> {
  const out = await debugfs(image, `ls -p ${dir}`)
  return out.split('\n').flatMap(line => {
    const f = line.split('/')
    return f.length >= 7 && f[5] !== '.' && f[5] !== '..' ? [{ name: f[5]!, mode: parseInt(f[2]!, 8) }] : []
  })
}

function compareReleases (a: string, b: string): number {
  const pa = a.split(/[.-]/).map(x => Number.isNaN(Number(x)) ? x : Number(x))
  const pb = b.split(/[.-]/).map(x => Number.isNaN(Number(x)) ? x : Number(x))
  for (let i = 0; i < Math.max(pa.length, pb.length); i++) {
    const x = pa[i] ?? -1; const y = pb[i] ?? -1
    if (x !== y) return x < y ? -1 : 1
  }
  return 0
}

export interface ImageKernel {
  release: string
  kernelPath: string
  modulesRoot: string
  /** Changes when the kernel or its modules.dep do (a digest of their inodes' debugfs stat): part of the cache key. */
  identity: string
}

/**
 * The newest `/boot/vmlinuz-<release>` in the block view whose modules
 * directory exists, or undefined when the image has no kernel. Async.
 */
export async function findImageKernel (blockView: string): Promise<ImageKernel | undefined> {
  const boot = (await listDir(blockView, '/boot')).map(e => /^vmlinuz-(.+)$/.exec(e.name)?.[1]).filter((r): r is string => r !== undefined)
  for (const release of boot.sort(compareReleases).reverse()) {
    for (const root of MODULE_ROOTS) {
      if (!(await listDir(blockView, root)).some(e => e.name === release)) continue
      const kernelPath = `/boot/vmlinuz-${release}`
      const modulesRoot = `${root}/${release}`
      const stats = await debugfs(blockView, `stat ${kernelPath}`) + await debugfs(blockView, `stat ${modulesRoot}/modules.dep`).catch(() => '')
      return { release, kernelPath, modulesRoot, identity: createHash('sha256').update(stats).digest('hex').slice(0, 16) }
    }
  }
  return undefined
}

/** modules.dep: relative module path → its dependencies' relative paths. */
function parseModulesDep (text: string): Map<string, string[]> {
  const deps = new Map<string, string[]>()
  for (const line of text.split('\n')) {
    const colon = line.indexOf(':')
    if (colon <= 0) continue
    deps.set(line.slice(0, colon).trim(), line.slice(colon + 1).trim().split(/\s+/).filter(p => p !== ''))
  }
  return deps
}

function moduleName (path: string): string {
  return (path.split('/').pop() ?? '').replace(/\.ko(\.(xz|zst|gz))?$/, '').replace(/-/g, '_')
}

async function dump (image: string, from: string, to: string): Promise<void> {
  await mkdir(dirname(to), { recursive: true })
  await debugfs(image, `dump ${from} ${to}`)
  await access(to).catch(() => { throw new BadInputError(`${from} could not be read from ${image}`) })
}

/**
 * Copy the image kernel and the modules the guest needs out of the block
 * view into `cacheDir`. Async. Resolves with a kernel source for
 * prepareGuestKernel. Throws BadInputError when a file cannot be read.
 */
export async function copyImageKernel (blockView: string, kernel: ImageKernel, destDir: string): Promise<GuestKernelSource> {
  const ready = join(destDir, '.complete')
  const modulesDir = join(destDir, 'lib/modules', kernel.release)
  const result = { kernel: join(destDir, 'boot', `vmlinuz-${kernel.release}`), modulesDir }
  if (await access(ready).then(() => true, () => false)) return result
  const tmp = `${destDir}.tmp-${process.pid}`
  await rm(tmp, { recursive: true, force: true })
  const tmpModules = join(tmp, 'lib/modules', kernel.release)
  await dump(blockView, kernel.kernelPath, join(tmp, 'boot', `vmlinuz-${kernel.release}`))
  await mkdir(tmpModules, { recursive: true })
  const builtin = await debugfs(blockView, `cat ${kernel.modulesRoot}/modules.builtin`)
  await writeFile(join(tmpModules, 'modules.builtin'), builtin)
  const depText = await debugfs(blockView, `cat ${kernel.modulesRoot}/modules.dep`)
  const deps = parseModulesDep(depText)
  if (deps.size === 0) {
    await debugfs(blockView, `rdump ${kernel.modulesRoot}/kernel ${tmpModules}`)
  } else {
    const byName = new Map([...deps.keys()].map(p => [moduleName(p), p]))
    const wanted = new Set<string>()
    const add = (path: string): void => {
      if (wanted.has(path)) return
      wanted.add(path)
      for (const d of deps.get(path) ?? []) add(d)
    }
    for (const name of [...GUEST_MODULES_REQUIRED, ...GUEST_MODULES_OPTIONAL]) {
      const path = byName.get(name)
      if (path !== undefined) add(path)
    }
    for (const rel of wanted) await dump(blockView, `${kernel.modulesRoot}/${rel}`, join(tmpModules, rel))
    await writeFile(join(tmpModules, 'modules.dep'), depText)
  }
  await writeFile(join(tmp, '.complete'), '')
  await rm(destDir, { recursive: true, force: true })
  await mkdir(dirname(destDir), { recursive: true })
  await rename(tmp, destDir)
  return result
}
