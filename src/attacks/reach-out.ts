/**
 * Attack 6: reaching out of the sandbox. From inside, a python program
 * looks for host paths it should never see (layerd's socket and cache, the
 * store, the image mount, another sandbox's upper and root, a marker file
 * in the host's /tmp) directly and through every path trick: `..` above /,
 * a symlink to / followed by `..`, /proc/self/root, /proc/1/root,
 * /proc/self/cwd, and chdir('..') loops. It also looks at what the kernel
 * shows about the outside (mount table, command lines, environments, open
 * fds, network interfaces), connects to a TCP port and an abstract socket
 * the host listens on, ptraces pid 1, and signals every process it can
 * (`kill(-1, SIGKILL)`) while a neighbour sandbox is running.
 *
 * May import: ./attack-harness.ts, ./containment.ts, src/, tap (types).
 */
import { randomBytes } from 'node:crypto'
import { mkdir, readdir, rm, writeFile } from 'node:fs/promises'
import { createServer, type Server } from 'node:net'
import { join } from 'node:path'
import type { Test } from 'tap'
import { socketPath } from '../daemon/client/control-protocol.js'
import type { Tier } from '../runtime/sandbox.js'
import { describe, jsonReport, python, sh, type AttackNode } from './attack-harness.js'
import { assertContained, takeBaseline } from './containment.js'

export const REACH_OUT_PROGRAM = String.raw`
import ctypes, errno, json, os, signal, socket, sys
probe = json.load(open('/tmp/probe.json'))  # not argv: its own command line must not carry the secrets it looks for
found = []
def seen(how, path):
    try:
        os.lstat(path)
        found.append('%s: %s' % (how, path))
    except OSError:
        pass
os.makedirs('/tmp/trick', exist_ok=True)
if not os.path.islink('/tmp/trick/root'):
    os.symlink('/', '/tmp/trick/root')
for p in probe['paths']:
    rel = p.lstrip('/')
    for how, candidate in [('direct', p), ('dotdot', '/../../../../' + rel), ('symlink', '/tmp/trick/root/../../../' + rel),
                           ('proc-self-root', '/proc/self/root/' + rel), ('proc-1-root', '/proc/1/root/../../' + rel),
                           ('proc-self-cwd', '/proc/self/cwd/../../../../' + rel)]:
        seen(how, candidate)
    os.chdir('/')
    for _ in range(16):
        os.chdir('..')
    seen('chdir-dotdot', rel)
texts = {}
for name in ['/proc/self/mountinfo', '/proc/self/mounts', '/proc/net/dev']:
    texts[name] = open(name).read()
for pid in [p for p in os.listdir('/proc') if p.isdigit()]:
    for f in ['cmdline', 'environ']:
        try:
            texts['/proc/%s/%s' % (pid, f)] = open('/proc/%s/%s' % (pid, f), 'rb').read().replace(b'\0', b' ').decode(errors='replace')
        except OSError:
            pass
leaks = sorted('%s mentions %s' % (name, s) for name, text in texts.items() for s in probe['secrets'] if s in text)
fds = {}
for fd in os.listdir('/proc/self/fd'):
    try:
        fds[fd] = os.readlink('/proc/self/fd/' + fd)
    except OSError:
        pass
def connect(family, address):
    s = socket.socket(family, socket.SOCK_STREAM)
    s.settimeout(5)
    try:
        s.connect(address)
        return 'connected'
    except OSError as e:
        return errno.errorcode.get(e.errno, str(e))
    finally:
        s.close()
libc = ctypes.CDLL(None, use_errno=True)
def ptrace_attach(pid):
    if libc.ptrace(16, pid, None, None) < 0:
        return errno.errorcode.get(ctypes.get_errno(), '?')
    return 'attached'
interfaces = sorted(l.split(':')[0].strip() for l in texts['/proc/net/dev'].splitlines()[2:])
child = os.fork()
if child == 0:
    signal.pause()
    os._exit(0)
try:
    os.kill(-1, signal.SIGKILL)
    _, status = os.waitpid(child, 0)
    killed = 'killed its own child' if os.WIFSIGNALED(status) and os.WTERMSIG(status) == signal.SIGKILL else 'child survived'
except OSError as e:
    killed = errno.errorcode.get(e.errno, '?')
print(json.dumps({
    'found': found,
    'leaks': leaks,
    'fds': fds,
    'interfaces': interfaces,
    'tcp to the host': connect(socket.AF_INET, ('127.0.0.1', probe['port'])),
    'abstract socket of the host': connect(socket.AF_UNIX, '\0' + probe['abstract']),
    "layerd's socket": connect(socket.AF_UNIX, probe['socket']),
    'ptrace pid 1': ptrace_attach(1),
    'kill -1': killed,
}))
`

export interface ReachOutReport {
  found: string[]
  leaks: string[]
  fds: Record<string, string>
  interfaces: string[]
  'tcp to the host': string
  'abstract socket of the host': string
  "layerd's socket": string
  'ptrace pid 1': string
  'kill -1': string
}

async function listen (server: Server, address: number | string): Promise<void> {
  await new Promise<void>((resolve, reject) => { server.once('error', reject); server.listen(address, resolve) })
}

/** The whole attack on one Linux tier: attacker and neighbour sandboxes, host listeners and a host marker. */
export async function reachOutAttack (t: Test, node: AttackNode, tier: Tier): Promise<void> {
  const tag = randomBytes(6).toString('hex')
  const hostMarker = `/tmp/layerd-attack-marker-${tag}`
  await mkdir(hostMarker)
  t.teardown(async () => { await rm(hostMarker, { recursive: true, force: true }) })
  await writeFile(join(hostMarker, 'secret'), 'host secret')
  const tcp = createServer(s => s.end('host service\n'))
  const abstract = createServer(s => s.end('host service\n'))
  await listen(tcp, 0)
  await listen(abstract, `\0layerd-attack-${tag}`)
  t.teardown(() => { tcp.close(); abstract.close() })
  const port = (tcp.address() as { port: number }).port

  const neighbour = await node.sandbox(t, tier)
  const attacker = await node.sandbox(t, tier)
  await sh(neighbour, `echo neighbour-${tag} > /tmp/neighbour-secret`)
  const before = await takeBaseline(node)
  const mount = node.imageMount(attacker)
  const paths = [node.home, socketPath(node.home), join(node.home, 'cache'), node.storeDir, mount,
    neighbour.stateDir, neighbour.upperDir!, join(neighbour.upperDir!, 'tmp/neighbour-secret'), hostMarker, join(hostMarker, 'secret'), '/work', '/var/cache/layerd-fixtures']
  const probe = { paths, secrets: [node.home, node.storeDir, neighbour.id, tag], port, abstract: `layerd-attack-${tag}`, socket: socketPath(node.home) }
  await attacker.exec({ cmd: ['sh', '-c', 'cat > /tmp/probe.json'], stdin: Buffer.from(JSON.stringify(probe)) })
  // The neighbour runs while the attacker signals everything it can.
  const [r, survivor] = await Promise.all([
    python(attacker, REACH_OUT_PROGRAM, { user: 'root', timeoutMs: 60_000 }),
    sh(neighbour, 'sleep 2; cat /tmp/neighbour-secret', { timeoutMs: 60_000 })
  ])
  const report = jsonReport<ReachOutReport>(r)
  t.same(report.found, [], `none of ${paths.length} host paths is reachable by any of 7 path tricks`)
  t.same(report.leaks, [], 'the mount table, command lines and environments name no host path and no other sandbox')
  t.same(Object.values(report.fds).filter(target => target.startsWith('/') && !target.startsWith('/dev/') && !target.startsWith('/proc/')), [], `no inherited fd points at a host file or directory: ${JSON.stringify(report.fds)}`)
  t.same(report.interfaces, ['lo'], 'the only network interface is its own loopback')
  t.equal(report['tcp to the host'], 'ECONNREFUSED', 'the host\'s loopback TCP service is out of reach (own network namespace)')
  t.equal(report['abstract socket of the host'], 'ECONNREFUSED', 'the host\'s abstract unix socket is out of reach')
  t.equal(report["layerd's socket"], 'ENOENT', 'layerd\'s control socket does not exist inside')
  t.equal(report['ptrace pid 1'], 'EPERM', 'ptrace is refused')
  t.equal(report['kill -1'], 'killed its own child', 'kill(-1, SIGKILL) reached the attacker\'s own processes, and only those (own pid namespace)')
  t.equal(survivor.stdout.toString(), `neighbour-${tag}\n`, `the neighbour sandbox ran on: ${describe(survivor)}`)
  t.same((await readdir(hostMarker)).sort(), ['secret'], 'the host marker directory is untouched')
  const neighbourFiles = await readdir(join(neighbour.upperDir!, 'tmp'))
  t.same(neighbourFiles, ['neighbour-secret'], 'the neighbour\'s upper holds only its own file')
  await assertContained(t, node, before, { mounts: [mount] })
}
