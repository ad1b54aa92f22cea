/**
 * The kernel and initrd a layerd VM boots, made from a kernel source: a
 * kernel image (bzImage such as Debian's /boot/vmlinuz-*, or an ELF
 * vmlinux) plus its module tree (`lib/modules/<release>`).
 *
 * `prepareGuestKernel` extracts the ELF vmlinux (vmlinux-extract.ts: PVH
 * boot, and Firecracker needs it) once per kernel file, and builds the
 * initrd (initrd-builder.ts) once per (modules, agent source, busybox),
 * both cached under `cacheDir` (files written whole, then renamed), so a
 * changed agent source rebuilds the initrd by itself.
 *
 * Where a kernel source is found when none is given (`findGuestKernelSource`,
 * from the settings the composition root resolved): the kernel setting
 * (LAYERD_VM_KERNEL, + LAYERD_VM_MODULES, default
 * `<kernel dir>/../lib/modules/<release>`), else the first
 * `linux-image-*` directory (a `dpkg-deb -x` of Debian's package) under
 * the kernel directory setting (LAYERD_VM_KERNEL_DIR) or
 * /var/lib/layerd/guest-kernel. (Tests' fixture kernel: fixtures/guest-kernel.ts
 * points LAYERD_VM_KERNEL_DIR at it.)
 *
 * May import: src/errors.ts, this folder, node built-ins.
 */
import { createHash } from 'node:crypto'
import { createReadStream } from 'node:fs'
import { access, mkdir, readdir, readFile, rename, writeFile } from 'node:fs/promises'
import { basename, dirname, join } from 'node:path'
import { NotFoundError } from '../../errors.js'
import { agentSourcePath, buildGuestAgent, buildInitrd, DEFAULT_BUSYBOX } from './initrd-builder.js'
import { extractVmlinux } from './vmlinux-extract.js'

export interface GuestKernelSource {
  /** bzImage or ELF vmlinux. */
  kernel: string
  /** `…/lib/modules/<release>`. */
  modulesDir: string
}

export interface GuestKernel {
  /** ELF vmlinux (boots through PVH under QEMU; what Firecracker takes). */
  vmlinux: string
  initrd: string
  /** Kernel release (the modules directory's name). */
  release: string
}

export const DEFAULT_VM_CACHE_DIR = '/var/cache/layerd/vm'
export const GUEST_KERNEL_DIRS = ['/var/lib/layerd/guest-kernel']

const exists = async (p: string): Promise<boolean> => await access(p).then(() => true, () => false)

async function fileSha256 (path: string): Promise<string> {
  const h = createHash('sha256')
  for await (const c of createReadStream(path)) h.update(c as Buffer)
  return h.digest('hex')
}

async function treeKey (dir: string): Promise<string> {
  const h = createHash('sha256')
  const walk = async (d: string, rel: string): Promise<void> => {
    for (const e of (await readdir(d, { withFileTypes: true })).sort((a, b) => (a.name < b.name ? -1 : 1))) {
      if (e.isDirectory()) await walk(join(d, e.name), `${rel}${e.name}/`)
      else h.update(`${rel}${e.name}\n`)
    }
  }
  await walk(dir, '')
  return h.digest('hex')
}

/**
 * vmlinux + initrd for `src`, from `cacheDir` when already made. Async.
 * Throws NotFoundError for a missing file or required module,
 * UnsupportedError when a host tool (cc, busybox-static, xz) is missing.
 */
export async function prepareGuestKernel (src: GuestKernelSource, cacheDir = DEFAULT_VM_CACHE_DIR, busybox = DEFAULT_BUSYBOX): Promise<GuestKernel> {
  for (const p of [src.kernel, src.modulesDir]) if (!await exists(p)) throw new NotFoundError(`guest kernel: ${p} does not exist`)
  const release = basename(src.modulesDir)
  // Two cache entries: the vmlinux depends on the kernel file only; the initrd on modules, agent and busybox.
  const kernelKey = (await fileSha256(src.kernel)).slice(0, 16)
  const initrdKey = createHash('sha256')
    .update(await treeKey(src.modulesDir)).update(await readFile(agentSourcePath())).update(await fileSha256(busybox))
    .digest('hex').slice(0, 16)
  const result: GuestKernel = {
    vmlinux: join(cacheDir, `vmlinux-${release}-${kernelKey}`),
    initrd: join(cacheDir, `initrd-${release}-${initrdKey}.cpio`),
    release
  }
  await mkdir(cacheDir, { recursive: true })
  if (!await exists(result.vmlinux)) {
    const vmlinux = await extractVmlinux(await readFile(src.kernel), src.kernel)
    const tmp = `${result.vmlinux}.tmp-${process.pid}`
    await writeFile(tmp, vmlinux)
    await rename(tmp, result.vmlinux)
  }
  if (!await exists(result.initrd)) {
    const agent = await buildGuestAgent(join(cacheDir, 'agent'))
    // Uncompressed: the guest unpacks a 6 MB cpio in ~0.1 s under TCG, against ~0.3-0.4 s to gunzip it first.
    await buildInitrd({ modulesDir: src.modulesDir, out: result.initrd, agent, busybox, compression: 'none' })
  }
  return result
}

/** The only `lib/modules/<release>` under `root`, or undefined. */
async function modulesDirIn (root: string): Promise<string | undefined> {
  for (const base of [join(root, 'lib/modules'), join(root, 'usr/lib/modules')]) {
    const releases = await readdir(base).catch(() => [] as string[])
    if (releases.length > 0) return join(base, releases.sort().at(-1)!)
  }
  return undefined
}

/** A kernel source in an extracted linux-image package directory: boot/vmlinuz-<release> and its modules. */
export async function kernelSourceIn (root: string): Promise<GuestKernelSource | undefined> {
  const modulesDir = await modulesDirIn(root)
  if (modulesDir === undefined) return undefined
  const kernel = join(root, 'boot', `vmlinuz-${basename(modulesDir)}`)
  return await exists(kernel) ? { kernel, modulesDir } : undefined
}

/** Where the host's guest kernel is, as the settings say (src/state/settings.ts VmSettings: LAYERD_VM_KERNEL, LAYERD_VM_MODULES, LAYERD_VM_KERNEL_DIR). */
export interface GuestKernelSearch { kernel?: string, modules?: string, kernelDir?: string }

/**
 * The host-provided guest kernel (see the module doc for the search
 * order), or undefined when there is none. Async.
 */
export async function findGuestKernelSource (where: GuestKernelSearch = {}, extraDirs: string[] = []): Promise<GuestKernelSource | undefined> {
  const kernel = where.kernel
  if (kernel !== undefined && kernel !== '') {
    const modules = where.modules
    if (modules !== undefined && modules !== '') return { kernel, modulesDir: modules }
    const fromPackage = await kernelSourceIn(dirname(dirname(kernel)))
    if (fromPackage !== undefined) return { kernel, modulesDir: fromPackage.modulesDir }
    return undefined
  }
  const dirs = [where.kernelDir ?? '', ...extraDirs, ...GUEST_KERNEL_DIRS].filter(d => d !== '')
  for (const dir of dirs) {
    const entries = (await readdir(dir).catch(() => [] as string[])).filter(n => n.startsWith('linux-image-')).sort().reverse()
    for (const e of entries) {
      const src = await kernelSourceIn(join(dir, e))
      if (src !== undefined) return src
    }
  }
  return undefined
}
