/**
 * servedByRunSocket: what layerd's run socket serves in its runner, and what
 * it sends back to the Node CLI (anything that needs the caller's own
 * process: its registry credentials, its working directory).
 */
import t from 'tap'
import { commandSettings } from './main.js'
import { servedByRunSocket } from './run-socket-commands.js'

const HOME = { LAYERD_HOME: '/var/lib/layerd-test' }
const served = (argv: string[], env: Record<string, string> = HOME): boolean => {
  const target = commandSettings(argv, env)
  if (target === undefined) throw new Error(`${argv.join(' ')} does not parse`)
  return servedByRunSocket(target.command, target.args, env)
}

t.test('servedByRunSocket() serves run and a containerd pull of a layerd image', async t => {
  t.ok(served(['run', 'deb/python:v1', '--', 'true']))
  t.ok(served(['containerd', 'pull', 'deb/python:v1']))
  t.ok(served(['containerd', 'pull', 'deb/python:v1', '--address', '/run/c.sock', '--namespace', 'k8s.io', '--json']))
  t.ok(served(['containerd', 'pull', 'sha256:' + 'a'.repeat(64)]), 'a manifest digest')
  t.ok(served(['containerd', 'pull', 'deb/python:v1'], { ...HOME, CONTAINERD_ADDRESS: '/run/c.sock' }), 'an absolute address from the environment')
})

t.test('servedByRunSocket() leaves to the Node CLI what needs the caller\'s process', async t => {
  t.notOk(served(['containerd', 'pull', 'docker://registry.example/a/b:1']), 'a registry image: the caller\'s credentials')
  t.notOk(served(['containerd', 'pull', 'deb/python:v1', '--address', 'c.sock']), 'a relative --address: the caller\'s cwd')
  t.notOk(served(['containerd', 'pull', 'deb/python:v1'], { ...HOME, CONTAINERD_ADDRESS: 'c.sock' }), 'a relative address from the environment')
  t.notOk(served(['containerd', 'config']), 'containerd config')
  t.notOk(served(['containerd', 'pull']), 'a pull without an image (the usage error is the Node CLI\'s)')
  t.notOk(served(['containerd', 'pull', 'a:1', 'b:1']), 'a pull of two images')
  t.notOk(served(['ps', '--json']), 'another command')
})
