/**
 * Attack 9 (issue 6): hostile image content. The image keeps its setuid
 * bits, file capabilities and device nodes (the store is faithful), and
 * its config asks for privileges; in the process and container tiers all
 * of it is inert (see hostile-image.ts for the policy). Push refuses a
 * symlink that climbs out of the image root.
 */
import t from 'tap'
import { randomBytes } from 'node:crypto'
import { access, open, readFile, rm } from 'node:fs/promises'
import { join } from 'node:path'
import { buildLayerTar, dir, symlink } from '../../fixtures/layer-dsl.js'
import { writeOciLayout } from '../../fixtures/oci-layout.js'
import { parseRef } from '../format/ref.js'
import { pushImage } from '../image/push.js'
import { CONTAINER_CAPABILITIES } from '../runtime/container/oci-config.js'
import type { Tier } from '../runtime/sandbox.js'
import { openMemoryNodeDb } from '../state/node-db.js'
import { openStore } from '../store/open-store.js'
import { LINUX_TIERS, describe, forEachTier, jsonReport, python, sh, shutdownTest, startAttackNode } from './attack-harness.js'
import { assertContained, takeBaseline } from './containment.js'
import { ASKED_CAPABILITIES, HOSTILE_IMAGE, pushHostileImage } from './hostile-image.js'

const CAP_BITS: Record<string, number> = { CAP_CHOWN: 0, CAP_DAC_OVERRIDE: 1, CAP_DAC_READ_SEARCH: 2, CAP_FOWNER: 3, CAP_FSETID: 4, CAP_KILL: 5, CAP_SETGID: 6, CAP_SETUID: 7, CAP_SETPCAP: 8, CAP_NET_BIND_SERVICE: 10, CAP_NET_ADMIN: 12, CAP_SYS_MODULE: 16, CAP_SYS_ADMIN: 21 }
const capMask = (caps: string[]): bigint => caps.reduce((m, c) => m | (1n << BigInt(CAP_BITS[c]!)), 0n)
const TIER_CAPABILITIES: Partial<Record<Tier, bigint>> = { process: 0n, container: capMask(CONTAINER_CAPABILITIES) }
const exists = async (p: string): Promise<boolean> => await access(p).then(() => true, () => false)
/** createSandbox makes <home> and <home>/sandboxes mode 0700: bwrap, run as a non-root user, cannot reach the sandbox's root. */

const work = t.testdir()
const node = await startAttackNode(t, 'node', { dir: work })
const tag = randomBytes(6).toString('hex')
const hostile = await pushHostileImage(join(work, 'layout'), node.storeDir, tag)
t.teardown(async () => { await rm(hostile.escapeTarget, { recursive: true, force: true }) })

await forEachTier(t, LINUX_TIERS, 'a config asking for root, capabilities, a volume and a WorkingDir through a host symlink gets none of them', async (t, tier) => {
  const sb = await node.sandbox(t, tier, {}, HOSTILE_IMAGE)
  const before = await takeBaseline(node)
  t.notOk(await exists(hostile.escapeTarget), `creating the sandbox did not follow the image's /opt/escape symlink onto the host (${hostile.escapeTarget})`)
  const r = await sh(sb, 'id -u; grep -E "^(CapEff|CapBnd|NoNewPrivs)" /proc/self/status; pwd; readlink -f .; test -e /host && echo "/host exists"; mount -t tmpfs none /mnt 2>/dev/null; echo "mount=$?"')
  const out = r.stdout.toString()
  t.match(out, /^0$/m, `the image's User 0 applies: ${describe(r)}`)
  const capEff = BigInt(`0x${/^CapEff:\s+([0-9a-f]+)$/m.exec(out)?.[1] ?? 'ff'}`)
  const capBnd = BigInt(`0x${/^CapBnd:\s+([0-9a-f]+)$/m.exec(out)?.[1] ?? 'ff'}`)
  t.equal(capEff, TIER_CAPABILITIES[tier], `root holds the tier's fixed capability set (0x${capEff.toString(16)}), whatever the labels ask`)
  if (tier === 'container') t.equal(capBnd & capMask(ASKED_CAPABILITIES), 0n, 'none of the asked-for capabilities is even in the bounding set')
  else t.match(out, /^CapEff:\s+0+$/m, 'nothing effective; with no_new_privs and nosuid, no exec can raise it')
  t.match(out, /^NoNewPrivs:\s+1$/m, 'no_new_privs is set')
  t.match(out, /^mount=(?!0)\d+$/m, 'mount is refused')
  t.notMatch(out, /\/host exists/, 'the config\'s volume is not created, let alone bound to the host')
  // bwrap keeps the logical path, runc chdirs to the resolved one; either way it resolves inside the sandbox's root.
  t.match(out, new RegExp(`^(/opt/escape/work|/tmp/layerd-attack-escape-${tag}/work)\n/tmp/layerd-attack-escape-${tag}/work$`, 'm'), 'the WorkingDir was made inside the sandbox, through the symlink resolved in its own root')
  t.notOk(await exists(hostile.escapeTarget), 'and still nothing on the host')
  await assertContained(t, node, before, { mounts: [node.imageMount(sb)] })
})

await forEachTier(t, LINUX_TIERS, 'setuid, setgid and file-capability binaries from the image give a non-root user nothing', async (t, tier, todo) => {
  const sb = await node.sandbox(t, tier, {}, HOSTILE_IMAGE)
  const r = await sh(sb, 'stat -c "%a %u" /opt/hostile/suid-id /opt/hostile/sgid-id; /opt/hostile/suid-id -u; /opt/hostile/sgid-id -g; /opt/hostile/cap-cat /etc/shadow > /dev/null; echo "shadow=$?"', { user: 'nobody' })
  // The process tier runs a non-root user's bwrap unprivileged, in a user namespace where host root maps to nobody: root-owned files show uid 65534.
  const owner = tier === 'process' ? 65534 : 0
  t.equal(r.stdout.toString(), `4755 ${owner}\n2755 ${owner}\n65534\n65534\nshadow=1\n`, `the bits are kept but inert: euid and egid stay nobody's, file capabilities do not apply: ${describe(r)}`, todo)
  t.match(r.stderr.toString(), /cap-cat: \/etc\/shadow: Permission denied/, 'cat with file capabilities cannot read /etc/shadow', todo)
})

await forEachTier(t, LINUX_TIERS, 'device nodes from the image (/dev/mem, /dev/kmsg, the host\'s disk) cannot be opened, even by root', async (t, tier) => {
  const sb = await node.sandbox(t, tier, {}, HOSTILE_IMAGE)
  const r = await python(sb, `import errno, json, os, stat
out = {}
for name, flags in [('mem', os.O_RDONLY), ('kmsg', os.O_WRONLY), ('disk', os.O_RDWR)]:
    p = '/opt/hostile/' + name
    kind = 'char' if stat.S_ISCHR(os.lstat(p).st_mode) else 'block' if stat.S_ISBLK(os.lstat(p).st_mode) else 'other'
    try:
        os.close(os.open(p, flags))
        out[name] = kind + ' opened'
    except OSError as e:
        out[name] = kind + ' ' + errno.errorcode[e.errno]
print(json.dumps(out))`, { user: 'root' })
  t.same(jsonReport(r), { mem: 'char EACCES', kmsg: 'char EACCES', disk: 'block EACCES' }, `the nodes are kept but refused (the overlay is nodev): ${describe(r)}`)
})

t.test('on the host, layerd\'s mount of the hostile image is nosuid, nodev and read-only: host root cannot open its device nodes', async t => {
  const sb = await node.sandbox(t, LINUX_TIERS[0]!, {}, HOSTILE_IMAGE)
  const mount = node.imageMount(sb)
  const line = (await readFile('/proc/self/mountinfo', 'utf8')).split('\n').find(l => l.split(' ')[4] === mount)
  t.ok(line !== undefined, 'the image is mounted')
  const options = line!.split(' ')[5]!.split(',')
  t.same(['ro', 'nosuid', 'nodev'].filter(o => !options.includes(o)), [], `mount options ${options.join(',')}`)
  const opened = await open(join(mount, 'opt/hostile/disk'), 'r').then(async fh => { await fh.close(); return 'opened' }, (err: NodeJS.ErrnoException) => err.code)
  t.equal(opened, 'EACCES', `host root cannot open the image's node of the host disk (${hostile.hostDisk.major}:${hostile.hostDisk.minor})`)
})

t.test('push refuses an image whose relative symlink climbs out of the image root', async t => {
  const layout = await writeOciLayout(join(work, 'escaping-layout'), { layers: [{ tar: buildLayerTar([dir('opt/'), symlink('opt/up', '../../../../../../etc')]) }] })
  const store = openStore(`file://${join(work, 'escaping-store')}`)
  t.teardown(() => store.close())
  await t.rejects(pushImage(layout.dir, parseRef('hostile/escape:v1'), { store, db: openMemoryNodeDb() }), { code: 'ERR_BAD_INPUT', message: /opt\/up/ })
})

shutdownTest(t, node)
