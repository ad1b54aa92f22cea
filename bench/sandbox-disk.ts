/**
 * What a short-lived sandbox's writable layer costs the node (issue 17,
 * part 1): its quota'd loop-ext4 disk and overlay set up, a small task
 * output written, everything removed, as a deploy container's sandbox
 * lives. Per sandbox: the bytes that reach the node's block device (the
 * deploy benchmark's node disk and count, bench/deploy/node-disk.ts: a
 * loop-mounted ext4 of its own, sectors written after syncfs) and the
 * set-up + teardown time.
 *
 *   node dist/bench/sandbox-disk.js [--old DIR] [--rounds N] [--per-round N] [--disk-size 1G] [--out DIR]
 *
 * With `--old DIR` (another built checkout, e.g. main at an earlier commit)
 * its overlay module runs too, in the same process and on the same node
 * disk: rounds of N sandboxes each, old and new interleaved, the order
 * alternating per round; each round's bytes are counted apart.
 *
 * Bench-only: may import anything.
 */
import { mkdir, writeFile } from 'node:fs/promises'
import { join, resolve } from 'node:path'
import { parseSize } from '../src/cli/human-units.js'
import * as thisBuild from '../src/runtime/overlay/sandbox-overlay.js'
import { benchArgs, type BenchOptions } from './bench-args.js'
import { fmt, markdownTable, median, quantile, REPORT_OPTIONS, startLoadSampler, writeReport } from './bench-report.js'
import { NodeDisk } from './deploy/node-disk.js'

const SPEC = {
  old: { type: 'string', value: 'DIR' },
  rounds: { type: 'string', default: '6', value: 'N' },
  'per-round': { type: 'string', default: '10', value: 'N' },
  'disk-size': { type: 'string', default: '1G', value: 'SIZE' },
  work: { type: 'string', default: '/var/tmp', value: 'DIR' },
  ...REPORT_OPTIONS
} satisfies BenchOptions
const ARGS = benchArgs('sandbox-disk', SPEC)
const ROUNDS = ARGS.number('rounds', { min: 1 })
const PER_ROUND = ARGS.number('per-round', { min: 1 })
const DISK_BYTES = parseSize(ARGS.string('disk-size')) ?? 0
if (DISK_BYTES < 16 * 1024 ** 2) throw new Error(`--disk-size: use a size of at least 16M such as 1G, got ${JSON.stringify(ARGS.string('disk-size'))}`)
const OLD = ARGS.optString('old')

type OverlayModule = Pick<typeof thisBuild, 'mountSandboxOverlay' | 'removeSandboxOverlay'>
interface Side { name: string, overlay: OverlayModule, ms: number[], writtenBytes: number, sandboxes: number }

async function main (): Promise<void> {
  const command = `node dist/bench/sandbox-disk.js${OLD === undefined ? '' : ` --old ${OLD}`} --rounds ${ROUNDS} --per-round ${PER_ROUND} --disk-size ${ARGS.string('disk-size')}`
  const sides: Side[] = [{ name: 'new (this checkout)', overlay: thisBuild, ms: [], writtenBytes: 0, sandboxes: 0 }]
  if (OLD !== undefined) {
    const overlay = await import(join(resolve(OLD), 'dist/src/runtime/overlay/sandbox-overlay.js')) as OverlayModule
    sides.unshift({ name: `old (${OLD})`, overlay, ms: [], writtenBytes: 0, sandboxes: 0 })
  }
  const load = startLoadSampler()
  const disk = await NodeDisk.create(join(ARGS.string('work'), `layerd-bench-sandbox-disk-${process.pid}`), 4 * DISK_BYTES + 2 * 1024 ** 3)
  try {
    const lower = join(disk.mountpoint, 'image')
    await mkdir(lower)
    await writeFile(join(lower, 'file'), 'from the image')
    let n = 0
    const one = async (side: Side, label: string): Promise<number> => {
      const stateDir = join(disk.mountpoint, `side${sides.indexOf(side)}`, 'sandboxes', `${label}${n++}`)
      const t0 = performance.now()
      const o = await side.overlay.mountSandboxOverlay({ lower, stateDir, diskBytes: DISK_BYTES })
      await writeFile(join(o.merged, 'task-output'), 'done\n')
      await side.overlay.removeSandboxOverlay(stateDir)
      return performance.now() - t0
    }
    for (const side of sides) await one(side, 'warm') // the disk template: made once per shape and home, not counted
    for (let r = 0; r < ROUNDS; r++) {
      for (const side of r % 2 === 0 ? sides : [...sides].reverse()) {
        await disk.markBaseline()
        for (let i = 0; i < PER_ROUND; i++) side.ms.push(await one(side, 's'))
        side.writtenBytes += (await disk.figures()).writtenBytes
        side.sandboxes += PER_ROUND
      }
      console.error(`  round ${r + 1}/${ROUNDS}: ${sides.map(s => `${s.name} ${fmt(s.writtenBytes / s.sandboxes / 1024, 1)} KiB`).join(', ')}`)
    }
  } finally {
    await disk.destroy()
  }
  const rows = sides.map(s => [s.name, String(s.sandboxes), fmt(s.writtenBytes / s.sandboxes / 1024, 1), fmt(median(s.ms), 1), fmt(quantile(s.ms, 0.9), 1)])
  const markdown = [
    `Sandboxes of a ${ARGS.string('disk-size')} loop-ext4 quota: set up, a 5-byte task output written, removed; ${ROUNDS} rounds of ${PER_ROUND} per side${sides.length > 1 ? ', interleaved, order alternating' : ''}. ` +
      'Written: sectors written to the node disk (a loop-mounted ext4 of its own) per sandbox, after syncfs.',
    '',
    markdownTable(['build', 'sandboxes', 'written KiB / sandbox', 'set-up + teardown p50 ms', 'p90 ms'], rows)
  ].join('\n')
  await writeReport({
    name: 'sandbox-disk', title: 'A short-lived sandbox\'s writable layer: bytes to the node disk and time', command, load: load.stop(), markdown,
    data: { diskBytes: DISK_BYTES, rounds: ROUNDS, perRound: PER_ROUND, sides: sides.map(({ overlay: _, ...s }) => ({ ...s, writtenBytesPerSandbox: s.writtenBytes / s.sandboxes })) }
  }, ARGS.string('out'))
}

await main()
