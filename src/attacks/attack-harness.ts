/**
 * The attack suite's harness (issue 6): a node with its own layerd over a
 * store holding the real Debian python image, sandboxes made through the
 * library API (`createSandbox`), and a loop that runs one attack against a
 * list of tiers, skipping (with the reason printed) every tier this host
 * cannot run, so the same suite covers the VM tiers once they are wired in.
 *
 * The pushed store is made once per version of the code that writes it
 * (format, image, store) and cached next to the Debian fixtures; every test
 * file copies it into its own test directory (68 MB, a fraction of a
 * second), so files can tamper with their copy and a push (≈10 s) is not
 * paid per file.
 *
 * May import: src/, fixtures/, tap (types), node built-ins.
 */
import { createHash } from 'node:crypto'
import { cp, mkdir, readdir, readFile, rename, rm } from 'node:fs/promises'
import { dirname, join } from 'node:path'
import { fileURLToPath } from 'node:url'
import type { Test } from 'tap'
import { ensureDebianImages, type DebianImage } from '../../fixtures/debian-images.js'
import { acquireLock, fixturesDir } from '../../fixtures/fixture-cache.js'
import { layerdNode, type LayerdNode } from '../../fixtures/layerd-harness.js'
import { runCommand } from '../../fixtures/run-command.js'
import { connectDaemon } from '../daemon/client/daemon-launcher.js'
import { digestHex } from '../format/digest.js'
import { parseRef } from '../format/ref.js'
import { pushImage } from '../image/push.js'
import type { ExecResult, SandboxLimits, Tier } from '../runtime/sandbox.js'
import { createSandbox, type ManagedSandbox } from '../sandbox/create-sandbox.js'
import { driverFor } from '../sandbox/tier-drivers.js'
import { DISK_TEMPLATE_DIR } from '../runtime/overlay/sandbox-overlay.js'
import { mountsUnder } from '../host/mount-table.js'
import { openMemoryNodeDb } from '../state/node-db.js'
import { resolveSettings } from '../state/settings.js'
import { openStore } from '../store/open-store.js'

export const ATTACK_IMAGE = 'deb/python:v1'
export const MIB = 1024 ** 2
/** Default limits of an attack sandbox: small, so floods and hogs hit them fast. */
export const ATTACK_LIMITS: SandboxLimits = { diskBytes: 64 * MIB, memoryBytes: 256 * MIB, pids: 256 }
/** The Linux tiers (bubblewrap, OCI runtime). */
export const LINUX_TIERS: readonly Tier[] = ['process', 'container']

const STORE_CACHE_VERSION = 1
const STORE_LOCK_TIMEOUT_MS = 10 * 60 * 1000
const DIST_SRC = join(dirname(fileURLToPath(import.meta.url)), '..')

/** Key of the cached store: the fixture image and every module that decides the store's bytes. */
async function storeCacheKey (python: DebianImage): Promise<string> {
  const h = createHash('sha256').update(`v${STORE_CACHE_VERSION}\n${python.manifestDigest}\n`)
  for (const dir of ['format', 'image', 'store']) {
    const files = (await readdir(join(DIST_SRC, dir), { recursive: true })).filter(f => f.endsWith('.js') && !f.endsWith('.test.js')).sort()
    for (const f of files) h.update(`${dir}/${f}\n`).update(await readFile(join(DIST_SRC, dir, f)))
  }
  return h.digest('hex').slice(0, 16)
}

/**
 * A copy of a store holding {@link ATTACK_IMAGE} (the fixture's python-v1
 * image) at `dest`. Pushes into the cache first when this code version has
 * no cached store (≈10 s, under a cross-process lock). Async.
 */
export async function copyPushedStore (dest: string): Promise<void> {
  const python = (await ensureDebianImages()).images['python-v1']
  const root = join(fixturesDir(), `attack-store-v${STORE_CACHE_VERSION}`)
  const cached = join(root, await storeCacheKey(python))
  await mkdir(root, { recursive: true })
  const release = await acquireLock(`${root}.lock`, STORE_LOCK_TIMEOUT_MS)
  try {
    if (!(await readdir(cached).then(() => true, () => false))) {
      for (const old of await readdir(root)) await rm(join(root, old), { recursive: true, force: true })
      const building = `${cached}.building-${process.pid}`
      const store = openStore(`file://${building}`)
      try {
        await pushImage(python.dockerArchive, parseRef(ATTACK_IMAGE), { store, db: openMemoryNodeDb() })
      } finally {
        await store.close()
      }
      await rename(building, cached)
    }
  } finally {
    await release()
  }
  await cp(cached, dest, { recursive: true })
}

export interface AttackNode {
  home: string
  /** The store directory (this node's own copy) and its URL. */
  storeDir: string
  store: string
  layerd: LayerdNode
  /** The fixture's merged tree of {@link ATTACK_IMAGE}: what the mount must keep serving. */
  fixtureRootfs: string
  /** A sandbox of `tier` from `image` (default the python image), destroyed in `t`'s teardown. */
  sandbox: (t: Test, tier: Tier, limits?: Partial<SandboxLimits>, image?: string) => Promise<ManagedSandbox>
  /** Where layerd mounts an image for sandboxes: `<home>/images/<manifest hex>`. */
  imageMount: (sb: Pick<ManagedSandbox, 'manifest'>) => string
}

/**
 * A node in `<t.testdir>/<name>` with its own store copy and a layerd
 * started now and stopped at `t`'s end: call it inside a subtest, or end
 * the file with {@link shutdownTest} (tap runs the root test's teardown
 * only after everything else, too late to assert on). `storeDir` overrides
 * the store (tests that tamper prepare their own copy). Async.
 */
export async function startAttackNode (t: Test, name = 'node', opts: { storeDir?: string, dir?: string } = {}): Promise<AttackNode> {
  const dir = opts.dir ?? t.testdir()
  const images = await ensureDebianImages()
  const storeDir = opts.storeDir ?? join(dir, `${name}-store`)
  if (opts.storeDir === undefined) await copyPushedStore(storeDir)
  const home = join(dir, name)
  const store = `file://${storeDir}`
  const layerd = layerdNode(home, { store })
  // Started detached, logging to <home>/layerd.log (as layerctl starts it): it outlives no test, see below.
  ;(await connectDaemon({ home })).close()
  const pid = await layerd.daemonPid()
  // If this test process dies early, still ask layerd to unmount and go.
  const onExit = (): void => { try { if (pid !== undefined) process.kill(pid, 'SIGTERM') } catch {} }
  process.once('exit', onExit)
  // Stops whichever daemon serves this home by then (a test may have killed and restarted it).
  t.teardown(async () => {
    await layerd.stopDaemon()
    process.off('exit', onExit)
    // Safety net for a test that failed half-way (a killed daemon leaves its dead mount): the next run must find nothing mounted.
    for (const m of await mountsUnder(home)) await runCommand('umount', ['-l', m]).catch(() => {})
  })
  return {
    home,
    storeDir,
    store,
    layerd,
    fixtureRootfs: images.images['python-v1'].rootfs,
    sandbox: async (tt, tier, limits = {}, image = ATTACK_IMAGE) => {
      const sb = await createSandbox({ image, tier, home, store, limits: { ...ATTACK_LIMITS, ...limits } })
      tt.teardown(async () => { await sb.destroy() })
      return sb
    },
    imageMount: sb => join(home, 'images', digestHex(sb.manifest as `sha256:${string}`))
  }
}

/** Why `tier` cannot run here, or undefined. Async. */
export async function tierUnavailableReason (tier: Tier): Promise<string | undefined> {
  // The VM tiers find their guest kernel through the settings (LAYERD_VM_KERNEL_DIR, which the kernel fixture sets), as createSandbox does.
  return await driverFor(tier, { vm: resolveSettings({}).vm }).unavailableReason()
}

/**
 * Register `${tier}: ${title}` for each tier; a tier this host cannot run
 * is registered as skipped with the driver's reason (shown in tap's
 * output). `opts.todo[tier]` names a known hole: the test still runs and
 * passes the reason to `fn`, which marks its assertions `{ todo }` so their
 * failure shows (as `not ok … # TODO reason`) without failing the suite.
 * Async (asks each driver once).
 */
export async function forEachTier (t: Test, tiers: readonly Tier[], title: string, fn: (t: Test, tier: Tier, todo: { todo?: string }) => Promise<void>, opts: { todo?: Partial<Record<Tier, string>> } = {}): Promise<void> {
  for (const tier of tiers) {
    const why = await tierUnavailableReason(tier)
    const todo = opts.todo?.[tier]
    t.test(`${tier}: ${title}${todo === undefined ? '' : ' (known hole, see TODO)'}`, why !== undefined ? { skip: `${tier} tier unavailable here: ${why}` } : {}, async t => {
      await fn(t, tier, todo === undefined ? {} : { todo })
    })
  }
}

/** Run a shell script inside (`sh -c`). */
export async function sh (sb: ManagedSandbox, script: string, opts: { timeoutMs?: number, user?: string } = {}): Promise<ExecResult> {
  return await sb.exec({ cmd: ['sh', '-c', script], ...opts })
}

/** Run a python program inside, fed on stdin (so the command line, visible in /proc, stays `python3 -`). */
export async function python (sb: ManagedSandbox, program: string, opts: { timeoutMs?: number, user?: string, args?: string[] } = {}): Promise<ExecResult> {
  const { args = [], ...rest } = opts
  return await sb.exec({ cmd: ['python3', '-', ...args], stdin: Buffer.from(program), ...rest })
}

/** stdout as text, with stderr appended when the command failed (for assertion messages). */
export function describe (r: ExecResult): string {
  return `exit ${r.exitCode}${r.timedOut ? ' (timed out)' : ''} in ${Math.round(r.durationMs)} ms\nstdout: ${r.stdout.toString().slice(0, 2000)}\nstderr: ${r.stderr.toString().slice(0, 2000)}`
}

/** Parse the last line of stdout as JSON (the python probes print one JSON report). */
export function jsonReport<T = Record<string, string>> (r: ExecResult): T {
  const lines = r.stdout.toString().trim().split('\n')
  try {
    return JSON.parse(lines[lines.length - 1]!) as T
  } catch (err) {
    throw new Error(`no JSON report from the sandbox: ${describe(r)}`, { cause: err })
  }
}

/**
 * The last test of a file: layerd stops cleanly and leaves nothing behind
 * (no mount under the node's home, no sandbox state). Registers the test.
 */
export function shutdownTest (t: Test, node: AttackNode): void {
  t.test('layerd stops cleanly and the node keeps nothing mounted or left over', async t => {
    await node.layerd.stopDaemon()
    t.same(await mountsUnder(node.home), [], 'no mount left under the node\'s home')
    // The pre-made empty disks are the node's, kept for the next sandbox; anything else would be a sandbox's leftover.
    const left = (await readdir(join(node.home, 'sandboxes')).catch(() => [])).filter(n => n !== DISK_TEMPLATE_DIR)
    t.same(left, [], 'no sandbox state left')
  })
}
