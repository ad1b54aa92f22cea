/**
 * Pushing straight from a registry (issue 12), side by side with docker, in
 * one run, through the deploy benchmark's throttle (bench/deploy/
 * throttle-proxy.ts: 1 Gbit/s, RTT 1 ms by default) in front of a real
 * docker-registry on loopback holding the Debian python image:
 *
 *   node dist/bench/registry-push.js [--reps N] [--bandwidth 1g] [--rtt-ms 1]
 *
 * Contenders, interleaved, the order rotating with each repetition:
 * - `layerctl push docker://PROXY/deb/python:v1` into a fresh LAYERD_HOME
 *   (its default fs store): download, convert and store, overlapped;
 * - `docker pull PROXY/deb/python:v1` on a private dockerd (its own
 *   containerd, data root and socket), the image removed before each pull;
 * - `skopeo copy docker://PROXY/… oci:DIR` then `layerctl push oci:DIR`
 *   (the two-step way: download whole, then convert), fresh home.
 * Target: the direct push no slower than `docker pull` alone.
 * Every step starts after a `sync` (untimed). Also reported: CPU seconds of
 * the client processes (dockerd's and containerd's own CPU are not
 * counted: they are not our children), and bytes through the throttle.
 *
 * Bench-only: may import anything.
 */
import { mkdir, mkdtemp, rm } from 'node:fs/promises'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { ensureDebianImages } from '../fixtures/debian-images.js'
import { benchArgs, type BenchOptions } from './bench-args.js'
import { fmt, LAYERCTL_JS, markdownTable, median, REPORT_OPTIONS, runInterleaved, shq, startLoadSampler, timeShell, writeReport, type Timed } from './bench-report.js'
import { DockerNode } from './deploy/docker-node.js'
import { describeLink, parseBandwidth, type LinkSpec } from './deploy/link-model.js'
import { LocalRegistry } from './deploy/local-registry.js'
import { ThrottleProxy } from './deploy/throttle-proxy.js'

const SPEC = {
  reps: { type: 'string', default: '3', value: 'N' },
  bandwidth: { type: 'string', default: '1g', value: 'BITS' },
  'rtt-ms': { type: 'string', default: '1', value: 'MS' },
  work: { type: 'string', default: tmpdir(), value: 'DIR' },
  ...REPORT_OPTIONS
} satisfies BenchOptions
const ARGS = benchArgs('registry-push', SPEC)
const REPS = ARGS.number('reps', { min: 1 })
const LINK: LinkSpec = { bitsPerSecond: parseBandwidth(ARGS.string('bandwidth')), rttMs: ARGS.number('rtt-ms', { integer: false }) }

interface Sample extends Timed { bytesDown: number }

async function main (): Promise<void> {
  const images = await ensureDebianImages()
  const python = images.images['python-v1']
  const work = await mkdtemp(join(ARGS.string('work'), 'layerd-registry-push-'))
  const runDir = await mkdtemp(join(tmpdir(), 'lrp-'))
  const load = startLoadSampler()
  const registry = await LocalRegistry.start(join(work, 'registry'))
  let docker: DockerNode | undefined
  let proxy: ThrottleProxy | undefined
  try {
    await registry.push(python.ociLayout, 'deb/python:v1')
    proxy = await ThrottleProxy.start({ upstreamHost: '127.0.0.1', upstreamPort: registry.port, link: LINK, name: 'registry' })
    docker = await DockerNode.start({ dataDir: join(work, 'docker'), runDir })
    const image = `${proxy.hostPort}/deb/python:v1`
    const sync = async (): Promise<void> => { await timeShell('sync') }
    const measured = async (script: string, env?: NodeJS.ProcessEnv): Promise<Sample> => {
      await sync()
      const before = proxy!.stats().bytesDown
      const t = await timeShell(script, env === undefined ? {} : { env })
      return { ...t, bytesDown: proxy!.stats().bytesDown - before }
    }
    const freshHome = async (name: string, rep: number): Promise<NodeJS.ProcessEnv> => {
      const home = join(work, `${name}-${rep}`)
      await rm(home, { recursive: true, force: true })
      await mkdir(home, { recursive: true })
      return { ...process.env, LAYERD_HOME: home, LAYERD_STORE: `file://${join(home, 'store')}` }
    }
    const layerctl = `${shq(process.execPath)} ${shq(LAYERCTL_JS)}`
    const samples = await runInterleaved<Sample>(REPS, [
      {
        name: 'layerctl push docker://',
        run: async rep => await measured(`${layerctl} push docker://${image} deb/python:v1 --tls-verify=false`, await freshHome('direct', rep))
      },
      {
        name: 'docker pull',
        run: async () => {
          await docker!.docker('rmi', '-f', image)
          await docker!.docker('image', 'prune', '-af')
          await sync()
          const before = proxy!.stats().bytesDown
          const t0 = process.hrtime.bigint()
          await docker!.pull(image)
          return { seconds: Number(process.hrtime.bigint() - t0) / 1e9, cpuSeconds: NaN, stdout: '', bytesDown: proxy!.stats().bytesDown - before }
        }
      },
      {
        name: 'skopeo copy + layerctl push oci:',
        run: async rep => {
          const env = await freshHome('twostep', rep)
          const oci = join(env.LAYERD_HOME!, 'oci')
          return await measured(`skopeo copy --quiet --src-tls-verify=false docker://${image} oci:${oci}:latest && ${layerctl} push oci:${oci}:latest deb/python:v1`, env)
        }
      }
    ], s => `${fmt(s.seconds)} s, ${fmt(s.bytesDown / 1e6, 1)} MB down`, { rotate: true })

    const docker50 = median(samples.get('docker pull')!.map(s => s.seconds))
    const rows = [...samples].map(([name, ss]) => {
      const wall = median(ss.map(s => s.seconds))
      const cpu = median(ss.map(s => s.cpuSeconds))
      return [name, fmt(wall), Number.isNaN(cpu) ? 'n/a (daemon)' : fmt(cpu), fmt(median(ss.map(s => s.bytesDown)) / 1e6, 1), fmt(wall / docker50)]
    })
    const direct = median(samples.get('layerctl push docker://')!.map(s => s.seconds))
    const twoStep = median(samples.get('skopeo copy + layerctl push oci:')!.map(s => s.seconds))
    const verdict = direct <= docker50 ? '✓' : '✗'
    const markdown = [
      `Link: ${describeLink(LINK)} (bench/deploy/throttle-proxy.ts, one proxy shared by every contender's connections). Image: python-v1 (2 layers, ${fmt(python.layers.reduce((n, l) => n + l.size, 0) / 1e6, 1)} MB compressed). Medians of ${REPS} interleaved reps, order rotating.`,
      '',
      markdownTable(['contender', 'wall s', 'client CPU s', 'MB through the link', '÷ docker pull'], rows),
      '',
      `- ${verdict} target (no slower than \`docker pull\` alone): direct push ${fmt(direct)} s against ${fmt(docker50)} s (${fmt(direct / docker50)}x).`,
      `- Download then convert (skopeo copy + push) takes ${fmt(twoStep)} s: the direct push saves ${fmt(twoStep - direct)} s (${fmt((1 - direct / twoStep) * 100, 0)}%) by converting layers as they arrive.`
    ].join('\n')
    await writeReport({
      name: 'registry-push',
      title: 'Push from a registry (layerctl push docker://) against docker pull',
      command: `node dist/bench/registry-push.js --reps ${REPS} --bandwidth ${ARGS.string('bandwidth')} --rtt-ms ${LINK.rttMs}`,
      load: load.stop(),
      markdown,
      data: { link: LINK, reps: REPS, samples: Object.fromEntries([...samples].map(([k, v]) => [k, v.map(s => ({ seconds: s.seconds, cpuSeconds: s.cpuSeconds, bytesDown: s.bytesDown }))])) }
    }, ARGS.string('out'))
  } finally {
    await docker?.stop()
    await timeShell(`umount ${shq(join(work, 'docker', 'docker'))} 2>/dev/null || true`)
    await proxy?.close()
    await registry.stop()
    await rm(work, { recursive: true, force: true })
    await rm(runDir, { recursive: true, force: true })
  }
}

await main()
