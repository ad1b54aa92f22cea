/**
 * Cold start (issue 3): time to `python3 -c 'import json, sqlite3, ssl'` in
 * the real Debian python image from a cold node, layerd against "download,
 * decompress and untar the whole image, then run", in one run, interleaved.
 *
 *   node dist/bench/cold-start.js [--reps N] [--s3 s3rver,radosgw] [--work DIR] [--out DIR]
 *
 * Set-up (not timed): python-v1's OCI layout is pushed once into a shared
 * fs store in the work dir. Each repetition, in this order:
 * - layerd, control API: a fresh LAYERD_HOME (empty chunk cache) on the
 *   shared store, its daemon started and ready, a control connection open
 *   (as createSandbox or a node agent holds one); drop the page cache; time
 *   the `mount` call + `chroot MOUNT /usr/bin/python3 -c …`. Then
 *   `stats --json` (fetchedBytes, storedBytes, imageBytes), umount, stop.
 * - layerd, daemon running: the same with `layerctl mount` (a CLI process
 *   per mount: Node start and module loading, page cache dropped).
 * - full extraction, gzip: drop the page cache; time
 *   `gzip -dc BLOB | tar -x -C DIR` for each layer blob of the OCI layout in
 *   order (whiteouts applied, if a layer has any), then the same chroot.
 * - layerd including daemon start: as the first, but no daemon is running
 *   when the clock starts (`layerctl mount` starts it).
 * - full extraction, pigz: as the gzip one with `pigz -dc`.
 * - stargz-store (the eStargz peer, bench/peers/stargz-store.ts), registry
 *   on loopback: the same image converted to eStargz (set-up, not timed) in
 *   a loopback docker-registry; a fresh stargz-store (empty caches, no
 *   prefetch, no background fetch) running and mounted; drop the page
 *   cache; time the lookup of each layer + the overlay mount, then the same
 *   chroot. Bytes: what the registry wrote (its log).
 * - Over the network, through the deploy benchmark's link model
 *   (bench/deploy/throttle-proxy.ts; --bandwidth, --rtt-ms): layerd
 *   (control API) on an S3 store (s3rver) behind the throttle, and
 *   stargz-store reading its registry behind a throttle of the same link;
 *   the S3 row once more with credentials from a profile file, so that its
 *   reads go through the AWS SDK, not S3HttpReader (the A/B of issue 15's
 *   SDK-free read path). `--s3 s3rver,radosgw` runs the S3 rows against
 *   each engine named (default s3rver; radosgw is Ceph's gateway on a
 *   one-node cluster, fixtures/radosgw.ts, which checks signatures).
 * The local rows read from local disk (the store, the layout) or loopback
 * after the drop. `--no-peers` leaves the stargz-store rows out (they need
 * ../shared/peers/stargz-store.sh).
 * Reports medians, the speedup, and bytes fetched against the image's
 * stored (compressed chunk) size and its gzip layer size.
 *
 * Bench-only: may import anything.
 */
import { mkdir, mkdtemp, readFile, rm, writeFile } from 'node:fs/promises'
import { join } from 'node:path'
import { ensureDebianImages } from '../fixtures/debian-images.js'
import { layerdNode } from '../fixtures/layerd-harness.js'
import { coldLayerdRun, type ColdMountMode, type ColdSample, type ColdStore } from './cold-start-layerd.js'
import { dropPageCaches, REPORT_OPTIONS, fmt, markdownTable, MB, median, runInterleaved, shq, startLoadSampler, timeShell, writeReport } from './bench-report.js'
import { benchArgs, type BenchOptions } from './bench-args.js'
import { describeLink, parseBandwidth, type LinkSpec } from './deploy/link-model.js'
import { ThrottleProxy } from './deploy/throttle-proxy.js'
import { ensureStargzBinaries, publishEstargz, StargzNode, type EstargzImage, type StargzBinaries } from './peers/stargz-store.js'
import { parseS3Engines, startS3Engine, type S3Engine, type S3EngineName } from '../fixtures/s3-engine.js'
import { TestRegistry } from '../fixtures/docker-registry.js'

const SPEC = {
  reps: { type: 'string', default: '7', value: 'N' },
  work: { type: 'string', default: '/var/tmp', value: 'DIR' },
  bandwidth: { type: 'string', default: '1g', value: 'BITS' },
  'rtt-ms': { type: 'string', default: '1', value: 'MS' },
  'no-peers': { type: 'boolean' },
  s3: { type: 'string', default: 's3rver', value: 'ENGINES' },
  ...REPORT_OPTIONS
} satisfies BenchOptions
const ARGS = benchArgs('cold-start', SPEC)
const REPS = ARGS.number('reps', { min: 1 })
const LINK: LinkSpec = { bitsPerSecond: parseBandwidth(ARGS.string('bandwidth')), rttMs: ARGS.number('rtt-ms', { integer: false }) }
const PEERS = !ARGS.flag('no-peers')
const S3_ENGINE_NAMES = ((): S3EngineName[] => {
  try {
    return parseS3Engines(ARGS.string('s3'))
  } catch (err) {
    process.stderr.write(`cold-start: --s3: ${(err as Error).message}\n`)
    process.exit(2)
  }
})()
const S3_BUCKET = 'layerd-cold'
const IMAGE = 'bench/python:v1'
const WORKLOAD = `/usr/bin/python3 -c 'import json, sqlite3, ssl'`

type Sample = ColdSample

const LOCAL_STARGZ = 'stargz-store (registry on loopback, daemon running)'
const NET_STARGZ = 'stargz-store, registry through the link'
const LOCAL_TRACED = 'layerd (control API), published trace'
/** The S3 rows' names; s3rver's keep the names of earlier runs. */
function netNames (engine: S3EngineName): { layerd: string, sdk: string, traced: string } {
  const store = engine === 's3rver' ? 'S3 store' : `S3 store (${engine})`
  return {
    layerd: `layerd (control API), ${store} through the link`,
    sdk: `layerd (control API), ${store} through the link, reads through the AWS SDK (profile credentials)`,
    traced: `layerd (control API), ${store} through the link, published trace`
  }
}
/** The engine of the headline S3 rows: the first named. */
const NET = netNames(S3_ENGINE_NAMES[0]!)

/** Record the workload's access trace on a node of `url` and publish it (`layerctl trace publish`). Not timed. */
async function publishTrace (home: string, url: string, env: NodeJS.ProcessEnv): Promise<void> {
  const node = layerdNode(home, { store: url, env })
  const mnt = join(home, 'mnt')
  await mkdir(mnt, { recursive: true })
  await node.startDaemon()
  try {
    const step = async (...args: string[]): Promise<void> => {
      const r = await node.layerctl(...args)
      if (r.code !== 0) throw new Error(`layerctl ${args.join(' ')}: ${r.stderr}`)
    }
    await step('mount', IMAGE, mnt)
    await timeShell(`exec chroot ${shq(mnt)} ${WORKLOAD}`)
    await step('umount', mnt)
    await step('trace', 'publish', IMAGE)
  } finally {
    await node.stopDaemon()
    await rm(home, { recursive: true, force: true })
  }
}

/**
 * stargz-store's overlay mount sometimes fails with ELOOP (dmesg: "overlayfs: conflicting lowerdir path":
 * two of its layers' `diff` dirs came back as one inode). Such a rep is run again once on a fresh
 * stargz-store node, and the retry is counted in the report; a second failure ends the run.
 */
const STARGZ_RETRIES: Record<string, number> = {}

function isStargzOverlayConflict (err: unknown): boolean {
  return err instanceof Error && err.message.includes('mount -t overlay') && err.message.includes('Too many levels of symbolic links')
}

/** A cold stargz-store node reading `esgz` from the registry at `hostPort` (the registry, or a throttle in front of it). */
function stargz (bins: StargzBinaries, esgz: EstargzImage, registry: TestRegistry, hostPort: string, work: string) {
  const once = stargzOnce(bins, esgz, registry, hostPort, work)
  return async (rep: number): Promise<Sample> => {
    try {
      return await once(rep, 0)
    } catch (err) {
      if (!isStargzOverlayConflict(err)) throw err
      STARGZ_RETRIES[hostPort] = (STARGZ_RETRIES[hostPort] ?? 0) + 1
      process.stderr.write(`  rep ${rep + 1}: stargz-store's overlay mount failed with ELOOP (conflicting lowerdir path); once more on a fresh stargz-store node\n`)
      return await once(rep, 1)
    }
  }
}

function stargzOnce (bins: StargzBinaries, esgz: EstargzImage, registry: TestRegistry, hostPort: string, work: string) {
  return async (rep: number, attempt: number): Promise<Sample> => {
    const t0 = performance.now()
    const node = await StargzNode.start(bins, join(work, `stargz-${hostPort.replace(/\W/g, '-')}-${rep}${attempt === 0 ? '' : `-retry${attempt}`}`), hostPort)
    const startSeconds = (performance.now() - t0) / 1000
    try {
      const before = (await registry.requests()).length
      await dropPageCaches()
      const t1 = performance.now()
      const root = await node.rootfs({ ...esgz, ref: `${hostPort}/${esgz.ref.slice(esgz.ref.indexOf('/') + 1)}` })
      const prepareSeconds = (performance.now() - t1) / 1000
      const run = await timeShell(`exec chroot ${shq(root)} ${WORKLOAD}`)
      const requests = (await registry.requests()).slice(before)
      return {
        prepareSeconds, runSeconds: run.seconds, totalSeconds: prepareSeconds + run.seconds, startSeconds,
        fetchedBytes: requests.reduce((n, r) => n + r.bytes, 0), storedBytes: esgz.storedBytes, fetches: requests.filter(r => r.method === 'GET').length
      }
    } finally {
      await node.stop()
    }
  }
}

interface Layer { digest: string, mediaType: string, size: number, blob: string, whiteouts: string[] }

/** The layers of the OCI layout's single image, with the whiteout entries each holds. */
async function layoutLayers (layout: string): Promise<Layer[]> {
  const blobPath = (d: string): string => join(layout, 'blobs', ...d.split(':'))
  const index = JSON.parse(await readFile(join(layout, 'index.json'), 'utf8')) as { manifests: Array<{ digest: string }> }
  const manifest = JSON.parse(await readFile(blobPath(index.manifests[0]!.digest), 'utf8')) as { layers: Array<{ digest: string, mediaType: string, size: number }> }
  const layers: Layer[] = []
  for (const l of manifest.layers) {
    if (!l.mediaType.endsWith('+gzip')) throw new Error(`${layout}: layer ${l.digest} is ${l.mediaType}, the baseline expects gzip`)
    const names = (await timeShell(`gzip -dc ${shq(blobPath(l.digest))} | tar -t`)).stdout
    const whiteouts = names.split('\n').filter(n => /(^|\/)\.wh\./.test(n))
    layers.push({ ...l, blob: blobPath(l.digest), whiteouts })
  }
  return layers
}

/** Shell steps that apply one layer's whiteouts (before its extraction) and extract it. */
function extractScript (layer: Layer, dir: string, gunzip: string): string {
  const steps: string[] = []
  for (const w of layer.whiteouts) {
    const parent = w.includes('/') ? w.slice(0, w.lastIndexOf('/')) : '.'
    const name = w.slice(w.lastIndexOf('/') + 1)
    if (name === '.wh..wh..opq') steps.push(`find ${shq(join(dir, parent))} -mindepth 1 -maxdepth 1 -exec rm -rf {} +`)
    else steps.push(`rm -rf ${shq(join(dir, parent, name.slice('.wh.'.length)))}`)
  }
  const exclude = layer.whiteouts.length > 0 ? ` --exclude='.wh.*'` : ''
  steps.push(`${gunzip} ${shq(layer.blob)} | tar -x --numeric-owner${exclude} -C ${shq(dir)}`)
  return steps.join(' && ')
}

async function main (): Promise<void> {
  const imgs = await ensureDebianImages()
  const py = imgs.images['python-v1']
  const work = await mkdtemp(join(ARGS.string('work'), 'layerd-bench-cold-'))
  const command = `node dist/bench/cold-start.js --reps ${REPS} --s3 ${S3_ENGINE_NAMES.join(',')} --bandwidth ${ARGS.string('bandwidth')} --rtt-ms ${LINK.rttMs}${PEERS ? '' : ' --no-peers'}`
  console.error(`${command}\n  work dir ${work}`)
  const load = startLoadSampler()
  const storeUrl = `file://${join(work, 'store')}`
  const proxies: ThrottleProxy[] = []
  const engines: S3Engine[] = []
  let registry: TestRegistry | undefined
  try {
    const layers = await layoutLayers(py.ociLayout)
    const compressedImageBytes = layers.reduce((n, l) => n + l.size, 0)
    const pusher = layerdNode(join(work, 'pusher'), { store: storeUrl })
    await mkdir(pusher.home, { recursive: true })
    const pushed = await pusher.layerctl('push', py.ociLayout, IMAGE)
    if (pushed.code !== 0) throw new Error(`push failed: ${pushed.stderr}`)

    // Copies of the fs store with a published access trace (`layerctl trace publish`, recorded by one run of the workload).
    const tracedFsUrl = `file://${join(work, 'store-traced')}`
    await timeShell(`cp -a ${shq(join(work, 'store'))} ${shq(join(work, 'store-traced'))}`)
    await publishTrace(join(work, 'tracer-fs'), tracedFsUrl, {})

    const layerd = (mode: ColdMountMode, store: ColdStore): ((rep: number) => Promise<Sample>) => coldLayerdRun({ work, image: IMAGE, workload: WORKLOAD }, mode, store)
    const extract = (gunzip: string) => async (rep: number): Promise<Sample> => {
      const dir = join(work, `extract-${rep}`)
      await mkdir(dir)
      try {
        await dropPageCaches()
        const prep = await timeShell(layers.map(l => extractScript(l, dir, gunzip)).join(' && '))
        const run = await timeShell(`exec chroot ${shq(dir)} ${WORKLOAD}`)
        return { prepareSeconds: prep.seconds, runSeconds: run.seconds, totalSeconds: prep.seconds + run.seconds }
      } finally {
        await rm(dir, { recursive: true, force: true })
      }
    }
    /**
     * The network side on one S3 engine: the same objects pushed to it (not timed), one store with a published
     * trace, a link in front of it, and its three rows. The SDK row has its credentials from a profile file, not
     * the AWS_* variables: S3ObjectStore then reads through the AWS SDK, as every read did before S3HttpReader.
     */
    const s3Rows = async (engineName: S3EngineName): Promise<Array<{ name: string, run: (rep: number) => Promise<Sample> }>> => {
      const engine = await startS3Engine(engineName, join(work, engineName), S3_BUCKET)
      engines.push(engine)
      const keys = { AWS_ACCESS_KEY_ID: engine.credentials.accessKeyId, AWS_SECRET_ACCESS_KEY: engine.credentials.secretAccessKey }
      const direct = { ...keys, LAYERD_S3_ENDPOINT: engine.endpoint }
      const url = `s3://${S3_BUCKET}/store`
      const tracedUrl = `s3://${S3_BUCKET}/traced`
      for (const [to, home] of [[url, 'pusher'], [tracedUrl, 'pusher-traced']] as const) {
        const node = layerdNode(join(work, `${engineName}-${home}`), { store: to, env: direct })
        await mkdir(node.home, { recursive: true })
        const pushedTo = await node.layerctl('push', py.ociLayout, IMAGE)
        if (pushedTo.code !== 0) throw new Error(`push to ${engineName} failed: ${pushedTo.stderr}`)
      }
      await publishTrace(join(work, `${engineName}-tracer`), tracedUrl, direct)
      const link = await ThrottleProxy.start({ upstreamHost: '127.0.0.1', upstreamPort: engine.port, link: LINK, name: engineName })
      proxies.push(link)
      const s3Endpoint = `http://${link.hostPort}`
      const profile = join(work, `${engineName}-aws-credentials`)
      await writeFile(profile, `[default]\naws_access_key_id = ${engine.credentials.accessKeyId}\naws_secret_access_key = ${engine.credentials.secretAccessKey}\n`)
      const names = netNames(engineName)
      return [
        { name: names.layerd, run: layerd('api', { url, s3Endpoint, env: keys }) },
        { name: names.sdk, run: layerd('api', { url, s3Endpoint, env: { AWS_ACCESS_KEY_ID: '', AWS_SECRET_ACCESS_KEY: '', AWS_SHARED_CREDENTIALS_FILE: profile } }) },
        { name: names.traced, run: layerd('api', { url: tracedUrl, s3Endpoint, env: keys }) }
      ]
    }
    const netRows = new Map<S3EngineName, Array<{ name: string, run: (rep: number) => Promise<Sample> }>>()
    for (const e of S3_ENGINE_NAMES) netRows.set(e, await s3Rows(e))
    const contenders = [
      { name: 'layerd (control API)', run: layerd('api', { url: storeUrl }) },
      { name: 'full extraction (gzip -dc | tar -x)', run: extract('gzip -dc') },
      { name: 'layerd (layerctl mount, daemon running)', run: layerd('cli', { url: storeUrl }) },
      { name: 'layerd (layerctl mount, incl. daemon start)', run: layerd('cli-start', { url: storeUrl }) },
      { name: 'full extraction (pigz -dc | tar -x)', run: extract('pigz -dc') },
      ...(netRows.get(S3_ENGINE_NAMES[0]!) ?? []).slice(0, 2),
      { name: LOCAL_TRACED, run: layerd('api', { url: tracedFsUrl }) },
      ...(netRows.get(S3_ENGINE_NAMES[0]!) ?? []).slice(2),
      ...S3_ENGINE_NAMES.slice(1).flatMap(e => netRows.get(e) ?? [])
    ]
    if (PEERS) {
      const bins = await ensureStargzBinaries()
      registry = await TestRegistry.start(join(work, 'registry'), 'plain')
      const esgz = await publishEstargz(bins, py.ociLayout, 'latest', work, registry.hostPort, 'bench/python')
      const regLink = await ThrottleProxy.start({ upstreamHost: '127.0.0.1', upstreamPort: registry.port, link: LINK, name: 'registry' })
      proxies.push(regLink)
      contenders.splice(1, 0, { name: LOCAL_STARGZ, run: stargz(bins, esgz, registry, registry.hostPort, work) })
      contenders.push({ name: NET_STARGZ, run: stargz(bins, esgz, registry, regLink.hostPort, work) })
    }
    const samples = await runInterleaved(REPS, contenders, s => `${fmt(s.prepareSeconds)} + ${fmt(s.runSeconds)} = ${fmt(s.totalSeconds)} s` +
      (s.fetchedBytes !== undefined ? `, fetched ${fmt(s.fetchedBytes / MB)} MB` : ''))

    const figures = contenders.map(c => {
      const xs = samples.get(c.name)!
      const m = (f: (s: Sample) => number | undefined): number => median(xs.map(f).filter((v): v is number => v !== undefined))
      return { name: c.name, prepareSeconds: m(s => s.prepareSeconds), daemonMountSeconds: m(s => s.daemonMountSeconds), runSeconds: m(s => s.runSeconds), totalSeconds: m(s => s.totalSeconds), fetchedBytes: m(s => s.fetchedBytes), fetches: m(s => s.fetches), storedBytes: m(s => s.storedBytes), imageBytes: m(s => s.imageBytes), samples: xs }
    })
    const byName = (name: string): typeof figures[0] | undefined => figures.find(f => f.name === name)
    const need = (name: string): typeof figures[0] => byName(name) ?? (() => { throw new Error(`no figures for ${name}`) })()
    const api = need('layerd (control API)')
    const gz = need('full extraction (gzip -dc | tar -x)')
    const up = need('layerd (layerctl mount, daemon running)')
    const start = need('layerd (layerctl mount, incl. daemon start)')
    const pigz = need('full extraction (pigz -dc | tar -x)')
    const netLayerd = need(NET.layerd)
    const netLayerdSdk = need(NET.sdk)
    const localStargz = byName(LOCAL_STARGZ)
    const netStargz = byName(NET_STARGZ)
    const localTraced = need(LOCAL_TRACED)
    const netTraced = need(NET.traced)
    /** Per S3 engine: its rows against stargz-store through the link, and against the first engine's. */
    const perEngine = Object.fromEntries(S3_ENGINE_NAMES.map(e => {
      const names = netNames(e)
      const [l, sdk, tr] = [need(names.layerd), need(names.sdk), need(names.traced)]
      return [e, {
        totalSeconds: l.totalSeconds,
        networkSpeedupVsStargz: netStargz === undefined ? NaN : netStargz.totalSeconds / l.totalSeconds,
        tracedNetworkSpeedupVsStargz: netStargz === undefined ? NaN : netStargz.totalSeconds / tr.totalSeconds,
        httpReadsSpeedupVsSdkReads: sdk.totalSeconds / l.totalSeconds,
        timeOverFirstEngine: l.totalSeconds / netLayerd.totalSeconds
      }]
    }))
    const stored = (f: typeof figures[0]): string => Number.isNaN(f.storedBytes) ? '' : ` (${fmt(f.fetchedBytes / f.storedBytes * 100, 1)}%)`
    const rows = figures.map(f => [f.name, fmt(f.prepareSeconds) + (Number.isNaN(f.daemonMountSeconds) ? '' : ` (daemon: ${fmt(f.daemonMountSeconds)})`), fmt(f.runSeconds), fmt(f.totalSeconds), fmt(gz.totalSeconds / f.totalSeconds),
      Number.isNaN(f.fetchedBytes) ? `${fmt(compressedImageBytes / MB)} (all layers)` : fmt(f.fetchedBytes / MB) + stored(f), Number.isNaN(f.fetches) ? '' : String(f.fetches)])
    const startMedian = (f: typeof figures[0] | undefined): number => f === undefined ? NaN : median(f.samples.map(s => s.startSeconds).filter((v): v is number => v !== undefined))
    const ratios = {
      apiSpeedupVsGzip: gz.totalSeconds / api.totalSeconds,
      apiSpeedupVsPigz: pigz.totalSeconds / api.totalSeconds,
      speedupVsGzip: gz.totalSeconds / up.totalSeconds,
      speedupVsPigz: pigz.totalSeconds / up.totalSeconds,
      speedupVsGzipInclDaemonStart: gz.totalSeconds / start.totalSeconds,
      speedupVsPigzInclDaemonStart: pigz.totalSeconds / start.totalSeconds,
      fetchedOverStored: up.fetchedBytes / up.storedBytes,
      fetchedOverCompressedImage: up.fetchedBytes / compressedImageBytes,
      fetchedOverImageBytes: up.fetchedBytes / up.imageBytes,
      localSpeedupVsStargz: localStargz === undefined ? NaN : localStargz.totalSeconds / api.totalSeconds,
      networkSpeedupVsStargz: netStargz === undefined ? NaN : netStargz.totalSeconds / netLayerd.totalSeconds,
      networkSpeedupVsStargzSdkReads: netStargz === undefined ? NaN : netStargz.totalSeconds / netLayerdSdk.totalSeconds,
      httpReadsSpeedupVsSdkReads: netLayerdSdk.totalSeconds / netLayerd.totalSeconds,
      stargzFetchedOverStored: localStargz === undefined ? NaN : localStargz.fetchedBytes / localStargz.storedBytes,
      networkFetchedOverStored: netLayerd.fetchedBytes / netLayerd.storedBytes,
      stargzStartSeconds: startMedian(localStargz),
      tracedLocalSpeedupVsStargz: localStargz === undefined ? NaN : localStargz.totalSeconds / localTraced.totalSeconds,
      tracedNetworkSpeedupVsStargz: netStargz === undefined ? NaN : netStargz.totalSeconds / netTraced.totalSeconds,
      perEngine
    }
    const whiteouts = layers.reduce((n, l) => n + l.whiteouts.length, 0)
    const markdown = [
      `Workload: \`chroot ROOT ${WORKLOAD}\` in python-v1 (${layers.length} gzip layers, ${fmt(compressedImageBytes / MB)} MB compressed; ${whiteouts} whiteout entries). ` +
        `Medians of ${REPS} interleaved repetitions; page cache dropped before each; fresh LAYERD_HOME (cold chunk cache) for each layerd run and a fresh stargz-store root for each stargz run. ` +
        `Local rows: store and layout on local disk, stargz's registry on loopback. Network rows: ${describeLink(LINK)} (bench/deploy/throttle-proxy.ts), one link in front of each S3 engine (${S3_ENGINE_NAMES.join(', ')}) and one in front of the registry; the headline S3 rows are ${S3_ENGINE_NAMES[0]}'s.`,
      '',
      markdownTable(['contender', 'mount / extract s (daemon-side mount)', 'python s', 'total s', 'speedup vs gzip extraction', 'MB fetched (% of stored)', 'GETs'], rows),
      '',
      '"daemon-side mount" is the time the daemon reports for the mount (its own work); the rest of the mount column is the caller: the control round trip, or the whole CLI process (Node start, module loading, control socket). ' +
        "stargz-store's mount column is the lookup of each layer's `diff` (manifest, config, footer and TOC fetches) plus the overlay mount; its bytes are what the registry wrote.",
      '',
      `Speedup (target ≥ 3x): **${fmt(ratios.apiSpeedupVsGzip)}x** vs gzip extraction and ${fmt(ratios.apiSpeedupVsPigz)}x vs pigz through the control API (what createSandbox and a node agent use); ` +
        `with a \`layerctl mount\` process per mount ${fmt(ratios.speedupVsGzip)}x and ${fmt(ratios.speedupVsPigz)}x; ` +
        `counting daemon start: ${fmt(ratios.speedupVsGzipInclDaemonStart)}x and ${fmt(ratios.speedupVsPigzInclDaemonStart)}x.`,
      '',
      localStargz === undefined
        ? 'stargz-store rows left out (--no-peers).'
        : `Against stargz-store (issue 15 targets: ≥ 2x local, ≥ 1.5x over the network): **${fmt(ratios.localSpeedupVsStargz)}x local**, **${fmt(ratios.networkSpeedupVsStargz)}x over the link**. ` +
          `stargz-store fetched ${fmt(localStargz.fetchedBytes / MB)} MB = ${fmt(ratios.stargzFetchedOverStored * 100, 1)}% of its ${fmt(localStargz.storedBytes / MB)} MB eStargz layers. ` +
          `With a published access trace (\`layerctl trace publish\`, prefetched at mount; stargz-store's counterpart, prioritized files with prefetch, is off in its rows): ${fmt(ratios.tracedLocalSpeedupVsStargz)}x local, ${fmt(ratios.tracedNetworkSpeedupVsStargz)}x over the link. ` +
          `Reads through the AWS SDK (the S3 row with profile credentials) instead of S3HttpReader: ${fmt(ratios.networkSpeedupVsStargzSdkReads)}x over the link; S3HttpReader is ${fmt(ratios.httpReadsSpeedupVsSdkReads)}x faster than the SDK row. ` +
          `Daemon start to serving: stargz-store ${fmt(ratios.stargzStartSeconds)} s; layerd: the difference of the two \`layerctl mount\` rows, ${fmt(start.totalSeconds - up.totalSeconds)} s.`,
      ...(Object.keys(STARGZ_RETRIES).length === 0
        ? []
        : ['', `stargz-store reps run again on a fresh node after its overlay mount failed with ELOOP ("conflicting lowerdir path"): ${Object.values(STARGZ_RETRIES).reduce((a, b) => a + b, 0)} (the retry's time is the rep's sample).`]),
      '',
      `Bytes (targets: < 15% of storedBytes, issue 15: ≤ 7%): layerd fetched **${fmt(up.fetchedBytes / MB)} MB = ${fmt(ratios.fetchedOverStored * 100, 1)}% of storedBytes** ` +
        `(${fmt(up.storedBytes / MB)} MB, the compressed chunks the image references), ${fmt(ratios.fetchedOverCompressedImage * 100, 1)}% of the ${fmt(compressedImageBytes / MB)} MB gzip layers that extraction reads, ` +
        `${fmt(ratios.fetchedOverImageBytes * 100, 1)}% of imageBytes (${fmt(up.imageBytes / MB)} MB uncompressed); over the link (S3 readahead on) ${fmt(ratios.networkFetchedOverStored * 100, 1)}%.`,
      ...(S3_ENGINE_NAMES.length < 2
        ? []
        : ['', 'By S3 engine, through the link: ' + S3_ENGINE_NAMES.map(e => {
            const r = perEngine[e]!
            return `${e} ${fmt(r.totalSeconds)} s (${fmt(r.timeOverFirstEngine)}x ${S3_ENGINE_NAMES[0]}'s time), ${fmt(r.networkSpeedupVsStargz)}x against stargz-store, ${fmt(r.tracedNetworkSpeedupVsStargz)}x with a published trace, S3HttpReader ${fmt(r.httpReadsSpeedupVsSdkReads)}x the SDK`
          }).join('; ') + '.'])
    ].join('\n')
    await writeReport({ name: 'cold-start', title: 'Cold start: python3 -c "import json, sqlite3, ssl" — layerd vs full extraction and stargz-store', command, load: load.stop(), markdown, data: { reps: REPS, link: LINK, compressedImageBytes, whiteouts, figures, ratios, stargzRetries: STARGZ_RETRIES } }, ARGS.string('out'))
  } finally {
    for (const p of proxies) await p.close()
    await registry?.stop()
    for (const e of engines) await e.stop()
    await rm(work, { recursive: true, force: true })
  }
}

await main()
