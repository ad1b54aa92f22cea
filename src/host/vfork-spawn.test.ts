import t from 'tap'
import { spawnSync } from 'node:child_process'
import { mkdtempSync, readFileSync, readdirSync, readlinkSync, writeFileSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { spawnVfork, type VforkChild } from './vfork-spawn.js'

const PATH = '/usr/bin:/bin'

async function collect (child: VforkChild): Promise<{ status: [number | null, string | null], stdout: string, stderr: string }> {
  let stdout = ''
  let stderr = ''
  child.stdout.on('data', (d: Buffer) => { stdout += d.toString() })
  child.stderr.on('data', (d: Buffer) => { stderr += d.toString() })
  return { status: await child.closed, stdout, stderr }
}

t.test('spawnVfork(): stdin, stdout, stderr, extra fds, exit code, cwd and env as given', async t => {
  const child = spawnVfork(['sh', '-c', 'cat; printf "%s|%s|" "$X" "$(pwd)"; cat <&3; cat <&4; echo oops >&2; exit 7'],
    { env: { PATH, X: 'given' }, cwd: '/tmp', extraPipes: 2 })
  t.ok(child.pid > 0)
  child.stdin.end('in|')
  child.extra[0]!.end('three|')
  child.extra[1]!.end('four')
  t.same(await collect(child), { status: [7, null], stdout: 'in|given|/tmp|three|four', stderr: 'oops\n' })
})

t.test('spawnVfork(): a signal ends the child; kill() after the exit reaches nobody', async t => {
  const child = spawnVfork(['sleep', '30'], { env: { PATH } })
  child.stdin.end()
  setTimeout(() => child.kill('SIGKILL'), 20)
  t.same((await collect(child)).status, [null, 'SIGKILL'])
  t.doesNotThrow(() => child.kill('SIGKILL'), 'the reaped pid is not signalled')
})

t.test('spawnVfork(): the child gets default signal dispositions and an empty mask (Node ignores SIGPIPE)', async t => {
  const child = spawnVfork(['sh', '-c', 'grep -E "^Sig(Ign|Blk)" /proc/self/status'], { env: { PATH } })
  child.stdin.end()
  const { stdout } = await collect(child)
  const mask = (name: string): bigint => BigInt('0x' + new RegExp(`${name}:\\s*([0-9a-f]+)`).exec(stdout)![1]!)
  const sigpipe = 1n << 12n // bit 13 - 1
  t.equal(mask('SigIgn') & sigpipe, 0n, 'SIGPIPE is not ignored')
  t.equal(mask('SigBlk'), 0n, 'nothing blocked')
})

t.test('spawnVfork(): a program not in the child\'s PATH is ENOENT, and nothing is left open', async t => {
  // Pipe fds of this process, counted around 20 failed spawns: each would leak its 6 pipe ends if the error
  // path did not close them. Other fds come and go with the event loop, so only pipes count, with a little slack.
  const pipes = (): number => readdirSync('/proc/self/fd').filter(fd => { try { return readlinkSync(`/proc/self/fd/${fd}`).startsWith('pipe:') } catch { return false } }).length
  const before = pipes()
  for (let i = 0; i < 10; i++) {
    t.throws(() => spawnVfork(['layerd-no-such-tool'], { env: { PATH } }), { code: 'ENOENT' })
    t.throws(() => spawnVfork(['/nonexistent/tool'], { env: { PATH } }), { code: 'ENOENT', syscall: 'posix_spawn' })
  }
  t.ok(pipes() <= before + 2, `no pipe leaked (${before} pipe fds before, ${pipes()} after 20 failed spawns)`)
})

t.test('the child is made with clone(CLONE_VM | CLONE_VFORK), not a fork that copies our page tables', async t => {
  // strace sees every clone of a small node script that spawns `true` through spawnVfork, through the sandbox
  // tiers' runner (exec-runner.ts: runc, crun and bwrap are started there), and, as a check that the test can
  // tell them apart, through child_process.spawn.
  const dir = mkdtempSync(join(tmpdir(), 'layerd-vfork-'))
  const script = join(dir, 'spawn.mjs')
  const moduleUrl = new URL('./vfork-spawn.js', import.meta.url).href
  const runnerUrl = new URL('../runtime/process/exec-runner.js', import.meta.url).href
  writeFileSync(script, [
    `import { spawnVfork } from ${JSON.stringify(moduleUrl)}`,
    `import { runToCompletion } from ${JSON.stringify(runnerUrl)}`,
    "import { spawn } from 'node:child_process'",
    `const how = process.argv[2]`,
    "if (how === 'vfork') { const c = spawnVfork(['true'], { env: { PATH: '/usr/bin:/bin' } }); c.stdin.end(); c.stdout.resume(); c.stderr.resume(); await c.closed }",
    "else if (how === 'runner') await runToCompletion({ argv: ['true'], env: { PATH: '/usr/bin:/bin' }, kill: async () => {} }, {})",
    "else await new Promise(resolve => spawn('true').on('close', resolve))"
  ].join('\n'))
  const clones = (how: string): string[] => {
    const log = join(dir, `${how}.strace`)
    const r = spawnSync('strace', ['-f', '-qq', '-e', 'trace=clone,clone3,fork,vfork', '-o', log, process.execPath, script, how], { encoding: 'utf8' })
    t.equal(r.status, 0, `${how}: ${r.stderr}`)
    // Threads (CLONE_THREAD) are V8's and libuv's; a process clone is any other.
    return readFileSync(log, 'utf8').split('\n').filter(l => /\b(clone3?|v?fork)\(/.test(l) && !l.includes('CLONE_THREAD'))
  }
  const vfork = clones('vfork')
  t.equal(vfork.length, 1, vfork.join('\n'))
  t.match(vfork[0], /CLONE_VM/, 'shares the address space')
  t.match(vfork[0], /CLONE_VFORK/, 'the parent waits only until exec')
  const runner = clones('runner')
  t.equal(runner.length, 1, runner.join('\n'))
  t.match(runner[0], /CLONE_VM\|CLONE_VFORK/, 'the tiers\' runtime process too')
  const fork = clones('fork')
  t.equal(fork.length, 1, fork.join('\n'))
  t.notMatch(fork[0], /CLONE_VM/, 'child_process.spawn forks (the check can fail)')
})
