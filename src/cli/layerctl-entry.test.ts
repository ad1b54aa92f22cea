import { spawnSync } from 'node:child_process'
import { writeFileSync } from 'node:fs'
import { join } from 'node:path'
import t from 'tap'
import { LAYERCTL_ENTRY } from '../../fixtures/layerd-harness.js'

t.test('layerctl (dist/cli/layerctl.js) runs its bundle with its code cache, not the modules', async t => {
  const dir = t.testdir({})
  // A preload that prints, at exit, what runCachedScript recorded (src/start/cached-script.cts) — nothing when the modules ran.
  const probe = join(dir, 'probe.cjs')
  writeFileSync(probe, "process.on('exit', () => { process.stderr.write('RUN ' + JSON.stringify(globalThis[Symbol.for('layerd.cachedScriptRun')] ?? null) + '\\n') })\n")
  const run = (): { file?: string, codeCache?: string } | null => {
    const { stderr } = spawnSync(process.execPath, ['-r', probe, LAYERCTL_ENTRY, 'help'], { encoding: 'utf8', stdio: ['ignore', 'ignore', 'pipe'] })
    const line = stderr.split('\n').find(l => l.startsWith('RUN '))
    return line === undefined ? null : JSON.parse(line.slice(4)) as { file?: string, codeCache?: string } | null
  }
  run() // these flags (-r) have their own cache: the first run may write it
  const second = run()
  t.match(second, { file: /\/dist\/cli\/layerctl\.bundle\.cjs$/, codeCache: 'accepted' })
})
