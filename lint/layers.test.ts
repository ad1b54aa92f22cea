import t from 'tap'
import { spawnSync } from 'node:child_process'
import { mkdirSync, readFileSync, symlinkSync, writeFileSync } from 'node:fs'
import { dirname, join } from 'node:path'
import { fileURLToPath, pathToFileURL } from 'node:url'

// Compiled to dist/lint/: the repository root is two levels up.
const ROOT = join(dirname(fileURLToPath(import.meta.url)), '..', '..')
const DEPCRUISE = join(ROOT, 'node_modules', '.bin', 'depcruise')
const CONFIG = join(ROOT, '.dependency-cruiser.mjs')

interface Layer { name: string, paths: string[], mayImport: string[] }
interface LayersModule {
  loadLayers: (file?: string) => Layer[]
  layerOf: (layers: Layer[], path: string) => Layer | undefined
}
const lib = await import(pathToFileURL(join(ROOT, 'lint', 'layers.mjs')).href) as LayersModule

/** A scratch tree with the given files, a tsconfig and the repository's node_modules. */
function tree (dir: string, files: Record<string, string>): void {
  writeFileSync(join(dir, 'tsconfig.json'), JSON.stringify({ compilerOptions: { module: 'NodeNext', moduleResolution: 'NodeNext' } }))
  writeFileSync(join(dir, 'package.json'), JSON.stringify({ name: 'scratch', type: 'module', devDependencies: { tap: '*' } }))
  symlinkSync(join(ROOT, 'node_modules'), join(dir, 'node_modules'))
  for (const [path, text] of Object.entries(files)) {
    mkdirSync(dirname(join(dir, path)), { recursive: true })
    writeFileSync(join(dir, path), text)
  }
}

function cruise (dir: string): { status: number | null, out: string } {
  const r = spawnSync(DEPCRUISE, ['src', '--config', CONFIG, '--output-type', 'err'], { cwd: dir, encoding: 'utf8' })
  return { status: r.status, out: r.stdout + r.stderr }
}

t.test('layerOf() places a module by its most specific entry', async t => {
  const layers = lib.loadLayers()
  const of = (p: string): string | undefined => lib.layerOf(layers, p)?.name
  t.equal(of('src/format/toc.ts'), 'format')
  t.equal(of('src/daemon/client/control-client.ts'), 'daemon-client', 'a file beats its folder')
  t.equal(of('src/daemon/mounts/mount-manager.ts'), 'daemon-mounts', 'a folder beats its parent')
  t.equal(of('src/daemon/layerd-daemon.ts'), 'daemon')
  t.equal(of('src/daemon/layerd.test.ts'), 'tests', 'a test file is test code wherever it lives')
  t.equal(of('src/runtime/tier-driver.conformance.ts'), 'tests')
  t.equal(of('cli/demo.ts'), 'tools')
  t.equal(of('cli/layerctl.ts'), 'entry')
  t.equal(of('src/nowhere/x.ts'), undefined)
})

t.test('loadLayers() refuses a table with a cycle or an unknown layer, naming it', async t => {
  const dir = t.testdir({
    'cycle.json': JSON.stringify({ layers: [{ name: 'a', paths: ['a/'], role: '', mayImport: ['b'] }, { name: 'b', paths: ['b/'], role: '', mayImport: ['a'] }] }),
    'unknown.json': JSON.stringify({ layers: [{ name: 'a', paths: ['a/'], role: '', mayImport: ['zz'] }] })
  })
  t.throws(() => lib.loadLayers(join(dir, 'cycle.json')), /cycle: a → b → a/)
  t.throws(() => lib.loadLayers(join(dir, 'unknown.json')), /"a" may import "zz", which is not a layer/)
})

t.test("npm run lint's rules refuse imports the table does not allow, and pass those it does", async t => {
  const bad = t.testdir({})
  tree(bad, {
    'src/errors.ts': 'export class LayerdError extends Error {}\n',
    'src/daemon/mounts/mount-manager.ts': "import { LayerdError } from '../../errors.js'\nexport const m = LayerdError\n",
    'src/daemon/client/control-protocol.ts': 'export interface SharedImage { mountpoint: string }\n',
    'src/format/bad.ts': "import { m } from '../daemon/mounts/mount-manager.js'\nexport const x = m\n",
    'src/sandbox/inner.ts': "import { m } from '../daemon/mounts/mount-manager.js'\nimport type { SharedImage } from '../daemon/client/control-protocol.js'\nexport const y: SharedImage | typeof m = m\n",
    'src/cache/uses-tap.ts': "import t from 'tap'\nexport const z = t\n",
    'src/daemon/control/reaches-in.ts': "import { m } from '../mounts/mount-manager.js'\nexport const w = m\n"
  })
  const r = cruise(bad)
  t.equal(r.status, 4, `depcruise exits with the number of violations:\n${r.out}`)
  t.match(r.out, /error layer:format-not-daemon-mounts: src\/format\/bad\.ts → src\/daemon\/mounts\/mount-manager\.ts/)
  t.match(r.out, /error layer:sandbox-not-daemon-mounts: src\/sandbox\/inner\.ts → src\/daemon\/mounts\/mount-manager\.ts/)
  t.match(r.out, /error no-dev-dependency-in-production: src\/cache\/uses-tap\.ts → .*node_modules\/tap\//)
  t.match(r.out, /error layer:daemon-control-not-daemon-mounts: src\/daemon\/control\/reaches-in\.ts → src\/daemon\/mounts\/mount-manager\.ts/, 'the rooms inside the daemon are guarded too')
  t.notMatch(r.out, /control-protocol/, 'the daemon client side is open to sandbox')

  const good = t.testdir({})
  tree(good, {
    'src/errors.ts': 'export class LayerdError extends Error {}\n',
    'src/format/ok.ts': "import { LayerdError } from '../errors.js'\nexport const x = LayerdError\n",
    'src/cache/ok.ts': "import { x } from '../format/ok.js'\nexport const y = x\n",
    'src/cache/ok.test.ts': "import t from 'tap'\nimport { y } from './ok.js'\nt.ok(y)\n"
  })
  const ok = cruise(good)
  t.equal(ok.status, 0, ok.out)
  t.match(ok.out, /no dependency violations found/)
})

t.test("layers-table.mjs --check passes on README.md and names the row that differs", async t => {
  const check = (readme: string): { status: number | null, out: string } => {
    const r = spawnSync(process.execPath, [join(ROOT, 'lint', 'layers-table.mjs'), '--check', '--readme', readme], { encoding: 'utf8' })
    return { status: r.status, out: r.stdout + r.stderr }
  }
  const real = check(join(ROOT, 'README.md'))
  t.equal(real.status, 0, real.out)

  const text = readFileSync(join(ROOT, 'README.md'), 'utf8')
  const edited = text.replace(/^\| runtime \| (.*) \| [^|]+ \|$/m, '| runtime | $1 | errors, format, daemon |')
  t.not(edited, text, 'the runtime row was edited')
  const dir = t.testdir({ 'README.md': edited })
  const r = check(join(dir, 'README.md'))
  t.equal(r.status, 1)
  t.match(r.out, /differs from .*layers\.json/)
  t.match(r.out, /README: {6}\| runtime \|.*errors, format, daemon \|/)
})
