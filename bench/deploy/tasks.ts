/**
 * What a deploy benchmark container runs: a python3 script over the
 * project tree at /work/project (python3 is the base image's runtime).
 * Both print one line that starts with the project's name, version and
 * file count, so every output can be checked against the corpus, and the
 * rest of the line (bytes read, a hash of paths and contents) must be the
 * same on every side, so no side can be fast by reading less.
 *
 * - 'load': what an SWE-style task does first. Discover the
 *   tests: stat every file of the tree. Load the project: parse
 *   package.json, read its entry module (`main`) and, transitively, every
 *   local module it requires or imports (a regex over `require('./…')`,
 *   `import … from './…'` and `import('./…')`). The working set is the
 *   project's module graph: most of eslint and webpack, one file of
 *   typescript (its 9 MB compiler), a tenth of rxjs (only the CJS build
 *   of its five).
 * - 'read-all' (default): the worst case for lazy loading: read and hash
 *   every file of the tree (a full-tree checksum), which is all of it.
 *   The default since the benchmark's first version, so figures compare.
 *
 * Bench-only: may import node built-ins.
 */
import type { TaskImage } from './corpus.js'

export type TaskKind = 'load' | 'read-all'
export const TASK_KINDS: TaskKind[] = ['load', 'read-all']

export interface DeployTask {
  kind: TaskKind
  /** argv of the container's command. */
  command: string[]
  /** One line for reports. */
  summary: string
  /** The start of the line the task must print for `image`. */
  expectedPrefix: (image: TaskImage) => string
}

const PROJECT_ROOT = '/work/project'

const LOAD_SCRIPT = `import hashlib, json, os, re
root = '${PROJECT_ROOT}'
n = 0
for d, dirs, files in os.walk(root):
    dirs.sort()
    for f in sorted(files):
        os.lstat(os.path.join(d, f)); n += 1
pkg = json.load(open(os.path.join(root, 'package.json')))
dep = re.compile(rb'''(?:require\\(\\s*|import\\s*\\(\\s*|from\\s*|import\\s+)['"](\\.{1,2}/[^'"]+)['"]''')
def resolve(p):
    for c in (p, p + '.js', p + '.cjs', p + '.mjs', p + '.json', os.path.join(p, 'index.js')):
        if os.path.isfile(c): return os.path.normpath(c)
entry = resolve(os.path.join(root, pkg.get('main') or 'index.js'))
todo = [entry] if entry else []
seen = set(todo); size = 0; h = hashlib.sha256()
while todo:
    p = todo.pop()
    with open(p, 'rb') as fh: b = fh.read()
    h.update(p.encode()); h.update(b); size += len(b)
    for m in dep.findall(b):
        q = resolve(os.path.join(os.path.dirname(p), m.decode(errors='replace')))
        if q and q not in seen and q.startswith(root + '/'): seen.add(q); todo.append(q)
print(pkg['name'], pkg['version'], n, len(seen), size, h.hexdigest())`

const READ_ALL_SCRIPT = `import hashlib, json, os
root = '${PROJECT_ROOT}'
h = hashlib.sha256(); n = 0; size = 0
for d, dirs, files in os.walk(root):
    dirs.sort()
    for f in sorted(files):
        p = os.path.join(d, f)
        with open(p, "rb") as fh: b = fh.read()
        h.update(p.encode()); h.update(b); n += 1; size += len(b)
pkg = json.load(open(os.path.join(root, "package.json")))
print(pkg["name"], pkg["version"], n, size, h.hexdigest())`

export const DEPLOY_TASKS: Record<TaskKind, DeployTask> = {
  load: {
    kind: 'load',
    command: ['python3', '-c', LOAD_SCRIPT],
    summary: 'python3 stats every file of /work/project, parses package.json, then reads and hashes the entry module and every local module it requires or imports, transitively',
    expectedPrefix: t => `${t.project} ${t.version} ${t.files} `
  },
  'read-all': {
    kind: 'read-all',
    command: ['python3', '-c', READ_ALL_SCRIPT],
    summary: 'python3 walks /work/project, reads and hashes every file, parses package.json',
    expectedPrefix: t => `${t.project} ${t.version} ${t.files} ${t.projectBytes} `
  }
}

/** The task named `kind`; throws for an unknown name. */
export function deployTask (kind: string): DeployTask {
  if (!(TASK_KINDS as string[]).includes(kind)) throw new Error(`--task must be one of ${TASK_KINDS.join(', ')}, got ${JSON.stringify(kind)}`)
  return DEPLOY_TASKS[kind as TaskKind]
}
