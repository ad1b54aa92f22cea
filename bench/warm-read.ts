/**
 * Warm read and metadata (issue 3): the whole python image tree through a
 * layerd mount with a warm chunk cache, against squashfuse_ll and kernel
 * squashfs over a squashfs image of the same tree, and (issue 15) the
 * eStargz peer stargz-store with a warm cache (stargzSystem below), in one
 * run, interleaved.
 *
 *   node dist/bench/warm-read.js [--reps N] [--comp zstd|gzip] [--no-peers] [--work DIR] [--out DIR]
 *
 * Set-up (not timed): python-v1's OCI layout pushed into a node's fs store,
 * mounted, `layerctl pull --all` (every chunk in the lmdb cache);
 * `mksquashfs ROOTFS img.sqfs -comp zstd` (mksquashfs defaults otherwise:
 * 128 KiB blocks) of python-v1's merged tree.
 * Workloads, per system and repetition:
 * - read: `tar -cf - -C MOUNT . | wc -c`
 * - metadata: `find MOUNT -ls > /dev/null`
 * each "cold" (everything reopened, then the page cache, dentries and
 * inodes dropped: layerd's daemon is restarted and the image remounted, so
 * its lmdb map is not resident; squashfuse_ll and the loop mount are
 * remounted) and then "hot" (the same command again at once).
 * Reports medians and the ratios to squashfuse_ll, CPU seconds of the
 * workload and of the serving process (layerd's daemon, squashfuse_ll), the
 * daemon's major page faults, and checks that every system produced the
 * same tar byte count.
 *
 * Bench-only: may import anything.
 */
import { mkdir, mkdtemp, readdir, readFile, rm } from 'node:fs/promises'
import { join } from 'node:path'
import { ensureDebianImages } from '../fixtures/debian-images.js'
import { layerdNode, type LayerdNode } from '../fixtures/layerd-harness.js'
import { dropPageCaches, REPORT_OPTIONS, fmt, markdownTable, MB, median, residentBytes, runInterleaved, shq, startLoadSampler, timeShell, writeReport } from './bench-report.js'
import { benchArgs, type BenchOptions } from './bench-args.js'
import { ensureStargzBinaries, publishEstargz, StargzNode } from './peers/stargz-store.js'
import { TestRegistry } from '../fixtures/docker-registry.js'

const SPEC = {
  reps: { type: 'string', default: '5', value: 'N' },
  comp: { type: 'string', default: 'zstd', value: 'ALGO' },
  'no-peers': { type: 'boolean' },
  work: { type: 'string', default: '/var/tmp', value: 'DIR' },
  ...REPORT_OPTIONS
} satisfies BenchOptions
const ARGS = benchArgs('warm-read', SPEC)
const REPS = ARGS.number('reps', { min: 1 })
const COMP = ARGS.string('comp')
const IMAGE = 'bench/python:v1'

/** A mounted system under test that can be reopened cold. */
interface System {
  name: string
  mnt: string
  /** Unmount and mount again (restarting whatever serves it), then drop the page cache. */
  reopenCold: () => Promise<void>
  close: () => Promise<void>
  /** The process serving the mount (none for the kernel). */
  serverPid: () => Promise<number | undefined>
}

interface Sample {
  workload: string
  variant: 'cold' | 'hot'
  seconds: number
  /** CPU seconds of the workload's own processes (tar, wc, find: kernel squashfs decompresses in their time). */
  clientCpuSeconds: number
  /** CPU seconds and major page faults of the serving process during the workload. */
  serverCpuSeconds?: number
  serverMajorFaults?: number
  tarBytes?: number
}

/** utime + stime (seconds) and majflt of `pid`, from /proc/PID/stat. */
async function processCounters (pid: number): Promise<{ cpuSeconds: number, majorFaults: number }> {
  const stat = await readFile(`/proc/${pid}/stat`, 'utf8')
  const f = stat.slice(stat.lastIndexOf(')') + 2).split(' ') // f[0] is field 3
  return { cpuSeconds: (Number(f[11]) + Number(f[12])) / 100, majorFaults: Number(f[9]) }
}

/** The squashfuse_ll process serving `mnt` (found by its command line, which names the mountpoint). */
async function squashfusePid (mnt: string): Promise<number | undefined> {
  for (const name of await readdir('/proc')) {
    if (!/^\d+$/.test(name)) continue
    const argv = await readFile(`/proc/${name}/cmdline`, 'utf8').then(c => c.split('\0'), (): string[] => [])
    if (argv[0]?.endsWith('squashfuse_ll') === true && argv.includes(mnt)) return Number(name)
  }
  return undefined
}

async function ok (node: LayerdNode, ...args: string[]): Promise<string> {
  const r = await node.layerctl(...args)
  if (r.code !== 0) throw new Error(`layerctl ${args.join(' ')} failed: ${r.stderr.trim()}`)
  return r.stdout
}

async function layerdSystem (work: string, ociLayout: string): Promise<System & { node: LayerdNode, lmdbResidentAfterDrop: number[], fetchedBytes: number[] }> {
  const node = layerdNode(join(work, 'layerd-home'))
  const mnt = join(work, 'mnt-layerd')
  await mkdir(mnt, { recursive: true })
  await ok(node, 'push', ociLayout, IMAGE)
  await node.startDaemon()
  await ok(node, 'mount', IMAGE, mnt)
  await ok(node, 'pull', IMAGE, '--all')
  const lmdbFile = join(node.home, 'cache', 'data.mdb')
  const sys = {
    name: 'layerd',
    mnt,
    node,
    serverPid: async () => await node.daemonPid(),
    lmdbResidentAfterDrop: [] as number[],
    fetchedBytes: [] as number[],
    reopenCold: async () => {
      const stats = JSON.parse(await ok(node, 'stats', mnt, '--json')) as { fetchedBytes: number }
      sys.fetchedBytes.push(stats.fetchedBytes)
      await node.stopDaemon() // SIGTERM unmounts; the lmdb map goes with the process
      await node.startDaemon()
      await ok(node, 'mount', IMAGE, mnt)
      await dropPageCaches()
      sys.lmdbResidentAfterDrop.push(await residentBytes(lmdbFile).catch(() => NaN))
    },
    close: async () => {
      const stats = JSON.parse(await ok(node, 'stats', mnt, '--json')) as { fetchedBytes: number }
      sys.fetchedBytes.push(stats.fetchedBytes)
      await node.stopDaemon()
    }
  }
  return sys
}

/**
 * stargz-store (bench/peers/stargz-store.ts) over the same image converted
 * to eStargz in a loopback registry, its layers stacked with overlayfs, the
 * whole tree read once in set-up so every byte is in its cache. "Cold" keeps
 * the store running (a restart always starts with empty caches: its cache
 * directories get new random names) and remounts the overlay, then drops
 * the page cache: its on-disk cache is warm, nothing is resident.
 */
async function stargzSystem (work: string, ociLayout: string): Promise<System & { fetchedBytes: () => Promise<number> }> {
  const bins = await ensureStargzBinaries()
  const registry = await TestRegistry.start(join(work, 'registry'), 'plain')
  try {
    const esgz = await publishEstargz(bins, ociLayout, 'latest', work, registry.hostPort, 'bench/python')
    const node = await StargzNode.start(bins, join(work, 'stargz'), registry.hostPort)
    const mnt = await node.rootfs(esgz)
    await timeShell(`tar -cf - -C ${shq(mnt)} . | wc -c`)
    const fetchedBytes = async (): Promise<number> => (await registry.requests()).reduce((n, r) => n + r.bytes, 0)
    return {
      name: 'stargz-store',
      mnt,
      serverPid: async () => node.pid,
      fetchedBytes,
      reopenCold: async () => {
        await node.remountRoots()
        await dropPageCaches()
      },
      close: async () => { await node.stop(); await registry.stop() }
    }
  } catch (err) {
    await registry.stop()
    throw err
  }
}

function squashSystem (name: string, mnt: string, mountCmd: string, fuse: boolean): System {
  return {
    name,
    mnt,
    serverPid: async () => fuse ? await squashfusePid(mnt) : undefined,
    reopenCold: async () => {
      await timeShell(`umount ${shq(mnt)}`)
      await timeShell(mountCmd)
      await dropPageCaches()
    },
    close: async () => { await timeShell(`umount ${shq(mnt)}`) }
  }
}

async function main (): Promise<void> {
  const imgs = await ensureDebianImages()
  const py = imgs.images['python-v1']
  const work = await mkdtemp(join(ARGS.string('work'), 'layerd-bench-warm-'))
  const command = `node dist/bench/warm-read.js --reps ${REPS} --comp ${COMP}${ARGS.flag('no-peers') ? ' --no-peers' : ''}`
  console.error(`${command}\n  work dir ${work}`)
  const load = startLoadSampler()
  const systems: System[] = []
  try {
    const sqfs = join(work, 'img.sqfs')
    const mksquashfs = `mksquashfs ${shq(py.rootfs)} ${shq(sqfs)} -comp ${COMP} -noappend -quiet`
    await timeShell(mksquashfs)
    const sqfsBytes = Number((await timeShell(`stat -c %s ${shq(sqfs)}`)).stdout.trim())
    const layerd = await layerdSystem(work, py.ociLayout)
    systems.push(layerd)
    const fuseMnt = join(work, 'mnt-squashfuse')
    const kernMnt = join(work, 'mnt-kernel')
    await mkdir(fuseMnt)
    await mkdir(kernMnt)
    const fuseMount = `squashfuse_ll ${shq(sqfs)} ${shq(fuseMnt)}`
    const kernMount = `mount -t squashfs -o loop,ro ${shq(sqfs)} ${shq(kernMnt)}`
    await timeShell(fuseMount)
    systems.push(squashSystem('squashfuse_ll', fuseMnt, fuseMount, true))
    await timeShell(kernMount)
    systems.push(squashSystem('kernel squashfs', kernMnt, kernMount, false))
    if (!ARGS.flag('no-peers')) systems.push(await stargzSystem(work, py.ociLayout))

    const workloads = [
      { name: 'read', script: (m: string) => `tar -cf - -C ${shq(m)} . | wc -c` },
      { name: 'metadata', script: (m: string) => `find ${shq(m)} -ls > /dev/null` }
    ]
    // One contender per system × workload; each repetition measures cold, then hot.
    const contenders = systems.flatMap(sys => workloads.map(w => ({
      name: `${sys.name} ${w.name}`,
      run: async (): Promise<Sample[]> => {
        const out: Sample[] = []
        await sys.reopenCold()
        const pid = await sys.serverPid()
        for (const variant of ['cold', 'hot'] as const) {
          const before = pid === undefined ? undefined : await processCounters(pid)
          const t = await timeShell(w.script(sys.mnt))
          const after = pid === undefined ? undefined : await processCounters(pid)
          out.push({
            workload: w.name,
            variant,
            seconds: t.seconds,
            clientCpuSeconds: t.cpuSeconds,
            ...(before !== undefined && after !== undefined ? { serverCpuSeconds: after.cpuSeconds - before.cpuSeconds, serverMajorFaults: after.majorFaults - before.majorFaults } : {}),
            ...(w.name === 'read' ? { tarBytes: Number(t.stdout.trim()) } : {})
          })
        }
        return out
      }
    })))
    const samples = await runInterleaved(REPS, contenders, ss => ss.map(s => `${s.variant} ${fmt(s.seconds)} s`).join(', '))
    const names = systems.map(s => s.name)
    const stargzFetched = await (systems.find(s => s.name === 'stargz-store') as { fetchedBytes?: () => Promise<number> } | undefined)?.fetchedBytes?.()
    for (const sys of systems) await sys.close()
    systems.length = 0

    const pick = (system: string, workload: string, variant: string): Sample[] =>
      samples.get(`${system} ${workload}`)!.flat().filter(s => s.variant === variant)
    const secs = (system: string, workload: string, variant: string): number => median(pick(system, workload, variant).map(s => s.seconds))
    const cpu = (system: string, workload: string, variant: string): string => {
      const xs = pick(system, workload, variant)
      const server = median(xs.filter(s => s.serverCpuSeconds !== undefined).map(s => s.serverCpuSeconds!))
      return `${fmt(median(xs.map(s => s.clientCpuSeconds)))} / ${Number.isNaN(server) ? '–' : fmt(server)}`
    }
    const tarBytes = new Set([...samples.entries()].filter(([k]) => k.endsWith(' read')).flatMap(([, v]) => v.flat().map(s => s.tarBytes)))
    const figures: Record<string, Record<string, number>> = {}
    const tables: string[] = []
    for (const w of workloads) {
      const rows: string[][] = []
      for (const name of names) {
        const cold = secs(name, w.name, 'cold')
        const hot = secs(name, w.name, 'hot')
        figures[`${name} ${w.name}`] = { cold, hot }
        const refCold = secs('squashfuse_ll', w.name, 'cold')
        const refHot = secs('squashfuse_ll', w.name, 'hot')
        const mbps = (s: number): string => w.name === 'read' ? ` (${fmt([...tarBytes][0]! / MB / s, 0)} MB/s)` : ''
        rows.push([name, `${fmt(cold)}${mbps(cold)}`, fmt(cold / refCold), cpu(name, w.name, 'cold'), `${fmt(hot)}${mbps(hot)}`, fmt(hot / refHot), cpu(name, w.name, 'hot')])
      }
      const title = w.name === 'read' ? '`tar -cf - -C MOUNT . | wc -c` (whole tree)' : '`find MOUNT -ls > /dev/null`'
      tables.push(`#### ${title}\n\n${markdownTable(['system', 'cold page cache s', '/ squashfuse_ll', 'CPU s client / server', 'hot s', '/ squashfuse_ll', 'CPU s client / server'], rows)}`)
    }
    const ratio = (w: string, v: string): number => figures[`layerd ${w}`]![v]! / figures[`squashfuse_ll ${w}`]![v]!
    const ratios = { readCold: ratio('read', 'cold'), readHot: ratio('read', 'hot'), metadataCold: ratio('metadata', 'cold'), metadataHot: ratio('metadata', 'hot') }
    const vsStargz = (w: string, v: string): number => names.includes('stargz-store') ? figures[`stargz-store ${w}`]![v]! / figures[`layerd ${w}`]![v]! : NaN
    const stargzRatios = { readCold: vsStargz('read', 'cold'), readHot: vsStargz('read', 'hot'), metadataCold: vsStargz('metadata', 'cold'), metadataHot: vsStargz('metadata', 'hot') }
    const markdown = [
      `Tree: python-v1 (pushed as its 2-layer OCI layout; layerd serves the merged view). squashfs: \`mksquashfs ROOTFS img.sqfs -comp ${COMP} -noappend\` ` +
        `(${fmt(sqfsBytes / MB)} MB, 128 KiB blocks), built once outside the timing. layerd's cache warmed by \`layerctl pull --all\`. ` +
        `Medians of ${REPS} interleaved repetitions. Cold: daemon restarted / FUSE and loop mounts remounted, then \`echo 3 > drop_caches\`; hot: the same command again at once.`,
      '',
      ...tables.flatMap(t => [t, '']),
      `Target (issue 3): layerd within 1.5x of squashfuse_ll on the warm read → **${fmt(ratios.readCold)}x** with a cold page cache, **${fmt(ratios.readHot)}x** hot. ` +
        `Metadata: ${fmt(ratios.metadataCold)}x cold, ${fmt(ratios.metadataHot)}x hot.`,
      '',
      names.includes('stargz-store')
        ? `Against stargz-store (the eStargz peer, its cache filled by one full read in set-up, ${fmt((stargzFetched ?? NaN) / MB)} MB from its registry in all; cold = overlay remounted and page cache dropped, the store kept running), layerd is **${fmt(stargzRatios.readCold)}x** faster on the cold read, ${fmt(stargzRatios.readHot)}x hot; metadata ${fmt(stargzRatios.metadataCold)}x cold, ${fmt(stargzRatios.metadataHot)}x hot.`
        : 'stargz-store left out (--no-peers).',
      '',
      'CPU s: median CPU seconds of the workload\'s processes (tar + wc, or find; kernel squashfs decompresses in their system time) / of the serving process (layerd\'s daemon, squashfuse_ll; 10 ms ticks).',
      '',
      `layerd's daemon during each cold read: ${pick('layerd', 'read', 'cold').map(s => `${fmt(s.serverCpuSeconds ?? NaN)} CPU s, ${s.serverMajorFaults ?? '?'} major faults`).join('; ')} ` +
        '(major faults: lmdb map pages read from disk; with the block device\'s readahead each brings in many pages).',
      '',
      `Checks: tar byte count ${[...tarBytes].join(' / ')} (${tarBytes.size === 1 ? 'the same on every system' : '**differs between systems**'}); ` +
        `layerd fetchedBytes per mount during the runs: ${[...new Set(layerd.fetchedBytes)].join(', ')} (0 = all from the warm cache); ` +
        `lmdb data.mdb resident after each cold drop: ${[...new Set(layerd.lmdbResidentAfterDrop.map(b => fmt(b / MB, 1)))].join(', ')} MB.`
    ].join('\n')
    await writeReport({
      name: 'warm-read',
      title: 'Warm read and metadata: layerd vs squashfuse_ll, kernel squashfs and stargz-store',
      command,
      load: load.stop(),
      markdown,
      data: { reps: REPS, comp: COMP, mksquashfs, sqfsBytes, tarBytes: [...tarBytes], figures, ratios, stargzRatios, stargzFetchedBytes: stargzFetched, layerdFetchedBytes: layerd.fetchedBytes, lmdbResidentAfterDrop: layerd.lmdbResidentAfterDrop, samples: Object.fromEntries(samples) }
    }, ARGS.string('out'))
  } finally {
    for (const sys of systems) await sys.close().catch(err => console.error(`close ${sys.name}: ${(err as Error).message}`))
    await rm(work, { recursive: true, force: true })
  }
}

await main()
