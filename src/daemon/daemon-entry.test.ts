import { mkdtempSync, rmSync } from 'node:fs'
import { readFile } from 'node:fs/promises'
import { spawn } from 'node:child_process'
import t, { type Test } from 'tap'
import { awaitDaemonReady, layerdNode } from '../../fixtures/layerd-harness.js'
import { DAEMON_ENTRY, DAEMON_MODULES_ENTRY, connectDaemon } from './client/daemon-launcher.js'

/** A fresh home, short enough for its socket's path (107 bytes at most), removed after the test. */
function shortHome (t: Test): string {
  const home = mkdtempSync('/tmp/layerd-entry-')
  t.teardown(() => { rmSync(home, { recursive: true, force: true }) })
  return home
}

/** Start a daemon at a fresh home as layerctl does (`holder`: under the holder or alone), ping it, stop it; what `ping` says of its code, and its argv[1]. */
async function startAndPing (t: Test, holder: boolean): Promise<{ code: unknown, entry: string | undefined }> {
  const home = shortHome(t)
  const node = layerdNode(home)
  t.teardown(node.stopDaemon)
  const client = await connectDaemon({ home, holder })
  try {
    const ping = await client.call('ping')
    const argv = (await readFile(`/proc/${ping.pid}/cmdline`, 'utf8')).split('\0')
    return { code: ping.code, entry: argv.find(a => a.endsWith('.cjs') || a.endsWith('.js')) }
  } finally {
    client.close()
    await node.stopDaemon()
  }
}

t.test('connectDaemon() starts layerd from its bundle (dist/layerd/layerd.cjs), not the unbundled modules, alone and under the holder', async t => {
  t.match(DAEMON_ENTRY, /\/dist\/layerd\/layerd\.cjs$/)
  for (const holder of [false, true]) {
    // The first start under this test's node flags may write its code cache; the second must use it.
    await startAndPing(t, holder)
    const { code, entry } = await startAndPing(t, holder)
    t.equal(entry, DAEMON_ENTRY, `${holder ? 'under the holder' : 'alone'}: the process runs the bundled entry`)
    t.same(code, { bundle: true, codeCache: 'accepted' }, `${holder ? 'under the holder' : 'alone'}: it runs the bundle, compiled from its code cache (no flag changed at run time)`)
  }
})

t.test('layerd run from dist/layerd/main.js says it runs the unbundled modules', async t => {
  const home = shortHome(t)
  const node = layerdNode(home)
  t.teardown(node.stopDaemon)
  await awaitDaemonReady(spawn(process.execPath, [DAEMON_MODULES_ENTRY, '--foreground', '--home', home], { stdio: ['ignore', 'ignore', 'pipe'] }), home, 20_000)
  const client = await connectDaemon({ home, autoStart: false })
  try { t.same((await client.call('ping')).code, { bundle: false }) } finally { client.close() }
})
