/**
 * Attack 3: low-level calls against image files and the mount (the paper's
 * agents corrupted XFS metadata through an ioctl). One python program
 * (python3 is in the image) issues them and reports each call's errno:
 *
 * - inode-flag and file-system ioctls (FS_IOC_SETFLAGS as chattr does,
 *   FS_IOC_FSSETXATTR, FIEMAP, FIBMAP, XFS_IOC_FSGEOMETRY,
 *   XFS_IOC_GOINGDOWN, FIFREEZE) on a lower (image) file, a file of the
 *   sandbox's own, and the root directory;
 * - setxattr (user., trusted.overlay., security.capability) and
 *   removexattr on lower files;
 * - mknod of character and block devices;
 * - O_DIRECT reads and writes, mmap writes (shared on a read-only fd,
 *   shared on a read-write fd, private) of lower files;
 * - name_to_handle_at / open_by_handle_at (the "shocker" escape).
 *
 * It runs inside each Linux tier, and on the host as root with every
 * capability (chroot into layerd's FUSE mount, the image's own python):
 * the mount must refuse too. Calls that are allowed inside (a user xattr, an
 * O_DIRECT or mmap write) act on the sandbox's copy-up only; afterwards the
 * mount still serves the fixture's bytes and no xattrs, and the store is
 * unchanged.
 *
 * May import: ./attack-harness.ts, ./containment.ts, src/, fixtures/, tap (types).
 */
import { spawn } from 'node:child_process'
import { join } from 'node:path'
import type { ExecResult } from '../runtime/sandbox.js'

export const LOW_LEVEL_PROGRAM = String.raw`
import ctypes, errno, fcntl, json, mmap, os, struct, sys
mode = sys.argv[1]
res = {}
def attempt(name, fn):
    try:
        r = fn()
        res[name] = 'ok' if r is None else 'ok:%s' % r
    except OSError as e:
        res[name] = errno.errorcode.get(e.errno, str(e.errno))
def ioctl(path, req, arg):
    fd = os.open(path, os.O_RDONLY)
    try:
        fcntl.ioctl(fd, req, arg)
    finally:
        os.close(fd)
IOCTLS = {
    'FS_IOC_SETFLAGS': (0x40086602, struct.pack('l', 0x10)),   # chattr +i
    'FS_IOC_FSSETXATTR': (0x401c5820, bytes(28)),
    'FS_IOC_FIEMAP': (0xc020660b, struct.pack('QQIIII', 0, 2**64 - 1, 0, 0, 0, 0)),
    'FIBMAP': (1, struct.pack('i', 0)),
    'XFS_IOC_FSGEOMETRY': (0x8100587e, bytes(256)),
    'XFS_IOC_GOINGDOWN': (0x8004587d, struct.pack('I', 2)),
    'FIFREEZE': (0xc0045877, struct.pack('i', 0)),
}
targets = {'lower': '/usr/bin/python3.11', 'root': '/'}
if mode == 'sandbox':
    with open('/tmp/own-file', 'w') as f:
        f.write('mine')
    targets['own'] = '/tmp/own-file'
for tname, path in targets.items():
    for iname, (req, arg) in IOCTLS.items():
        attempt('%s %s' % (iname, tname), lambda: ioctl(path, req, arg))
attempt('setxattr user', lambda: os.setxattr('/usr/bin/python3.11', 'user.evil', b'1'))
attempt('setxattr trusted.overlay', lambda: os.setxattr('/usr/bin/bash', 'trusted.overlay.redirect', b'/etc'))
attempt('setxattr security.capability', lambda: os.setxattr('/usr/bin/cat', 'security.capability', bytes.fromhex('0100000202000000000000000000000000000000')))
attempt('removexattr', lambda: os.removexattr('/usr/bin/head', 'user.none'))
attempt('mknod char 1:1', lambda: os.mknod('/tmp/mem', 0o600 | 0o020000, os.makedev(1, 1)))
attempt('mknod block 8:0', lambda: os.mknod('/tmp/sda', 0o600 | 0o060000, os.makedev(8, 0)))
def o_direct(path, flags, write):
    fd = os.open(path, flags | os.O_DIRECT)
    buf = mmap.mmap(-1, 4096)
    try:
        if write:
            buf.write(b'EVIL' * 1024)
            return os.pwritev(fd, [buf], 0)
        return os.preadv(fd, [buf], 0)
    finally:
        os.close(fd)
attempt('O_DIRECT read', lambda: o_direct('/usr/bin/bash', os.O_RDONLY, False))
attempt('O_DIRECT write', lambda: o_direct('/usr/bin/tail', os.O_WRONLY, True))
def map_write(path, flags, share):
    fd = os.open(path, flags)
    try:
        m = mmap.mmap(fd, 4096, share, mmap.PROT_READ | mmap.PROT_WRITE)
        m[0:4] = b'EVIL'
        m.flush()
        m.close()
    finally:
        os.close(fd)
attempt('mmap shared, read-only fd', lambda: map_write('/usr/bin/sh', os.O_RDONLY, mmap.MAP_SHARED))
attempt('mmap shared, read-write fd', lambda: map_write('/usr/bin/env', os.O_RDWR, mmap.MAP_SHARED))
attempt('mmap private', lambda: map_write('/usr/bin/id', os.O_RDONLY, mmap.MAP_PRIVATE))
if mode == 'sandbox':
    libc = ctypes.CDLL(None, use_errno=True)
    def syscall(n, *args):
        if libc.syscall(n, *args) < 0:
            e = ctypes.get_errno()
            raise OSError(e, os.strerror(e))
    handle = ctypes.create_string_buffer(struct.pack('II', 120, 0) + bytes(120))
    mount_id = ctypes.c_int()
    attempt('name_to_handle_at', lambda: syscall(303, -100, b'/etc/passwd', handle, ctypes.byref(mount_id), 0))
    attempt('open_by_handle_at', lambda: syscall(304, -100, handle, 0))
else:
    for name, fn in [('open read-write', lambda: os.close(os.open('/usr/bin/ls', os.O_RDWR))),
                     ('truncate', lambda: os.truncate('/usr/bin/ls', 0)),
                     ('chmod setuid', lambda: os.chmod('/usr/bin/ls', 0o4755)),
                     ('chown', lambda: os.chown('/usr/bin/ls', 1, 1)),
                     ('utime', lambda: os.utime('/usr/bin/ls', (0, 0))),
                     ('rename', lambda: os.rename('/usr/bin/ls', '/usr/bin/ls2')),
                     ('unlink', lambda: os.unlink('/usr/bin/ls')),
                     ('link', lambda: os.link('/usr/bin/ls', '/tmp/ls')),
                     ('symlink', lambda: os.symlink('/etc', '/tmp/etc')),
                     ('mkdir', lambda: os.mkdir('/tmp/d'))]:
        attempt(name, fn)
print(json.dumps(res, sort_keys=True))
`

const IOCTL_NAMES = ['FS_IOC_SETFLAGS', 'FS_IOC_FSSETXATTR', 'FS_IOC_FIEMAP', 'FIBMAP', 'XFS_IOC_FSGEOMETRY', 'XFS_IOC_GOINGDOWN', 'FIFREEZE']

/**
 * The answer to each call inside a process or container sandbox: the
 * seccomp deny list refuses every listed ioctl with EPERM on any file (the
 * kernel never sees them); the rest are refused by missing capabilities
 * or the overlay, or act on the sandbox's copy-up (`ok`).
 */
export const EXPECTED_IN_SANDBOX: Readonly<Record<string, string>> = {
  ...Object.fromEntries(['lower', 'own', 'root'].flatMap(target => IOCTL_NAMES.map(i => [`${i} ${target}`, 'EPERM']))),
  'setxattr user': 'ok', // on the sandbox's copy-up of python3.11: checked below not to reach the image
  'setxattr trusted.overlay': 'EPERM',
  'setxattr security.capability': 'EPERM',
  removexattr: 'ENOTSUP',
  'mknod char 1:1': 'EPERM',
  'mknod block 8:0': 'EPERM',
  'O_DIRECT read': 'ok:4096',
  'O_DIRECT write': 'ok:4096', // to the sandbox's copy-up of tail
  'mmap shared, read-only fd': 'EACCES',
  'mmap shared, read-write fd': 'ok', // to the sandbox's copy-up of env
  'mmap private': 'ok', // private pages: nothing is written back
  name_to_handle_at: 'EPERM',
  open_by_handle_at: 'EPERM'
}

/**
 * The answer to each call made by host root (all capabilities, no seccomp)
 * directly on layerd's mount: the kernel mount is read-only (EROFS for every
 * change), FUSE has no fiemap (EOPNOTSUPP), no freeze (EOPNOTSUPP) and
 * forwards no other ioctl (ENOTTY); FIBMAP of a file answers block 0 (FUSE
 * maps no blocks: nothing about the host disk leaks).
 */
export const EXPECTED_ON_HOST_MOUNT: Readonly<Record<string, string>> = {
  ...Object.fromEntries(['lower', 'root'].flatMap(target => [
    [`FS_IOC_SETFLAGS ${target}`, 'EROFS'],
    [`FS_IOC_FSSETXATTR ${target}`, 'EROFS'],
    [`FS_IOC_FIEMAP ${target}`, 'ENOTSUP'], // python's name for EOPNOTSUPP (the same number on Linux)
    [`XFS_IOC_FSGEOMETRY ${target}`, 'ENOTTY'],
    [`XFS_IOC_GOINGDOWN ${target}`, 'ENOTTY'],
    [`FIFREEZE ${target}`, 'ENOTSUP']
  ])),
  'FIBMAP lower': 'ok',
  'FIBMAP root': 'ENOTTY',
  'setxattr user': 'EROFS',
  'setxattr trusted.overlay': 'EROFS',
  'setxattr security.capability': 'EROFS',
  removexattr: 'EROFS',
  'mknod char 1:1': 'EROFS',
  'mknod block 8:0': 'EROFS',
  'O_DIRECT read': 'ok:4096',
  'O_DIRECT write': 'EROFS',
  'mmap shared, read-only fd': 'EACCES',
  'mmap shared, read-write fd': 'EROFS',
  'mmap private': 'ok',
  'open read-write': 'EROFS',
  truncate: 'EROFS',
  'chmod setuid': 'EROFS',
  chown: 'EROFS',
  utime: 'EROFS',
  rename: 'EROFS',
  unlink: 'EROFS',
  link: 'EROFS',
  symlink: 'EROFS',
  mkdir: 'EROFS'
}

/** Files the program targets: the mount must still serve the fixture's bytes for each. */
export const TARGET_FILES = ['usr/bin/python3.11', 'usr/bin/bash', 'usr/bin/cat', 'usr/bin/head', 'usr/bin/tail', 'usr/bin/dash', 'usr/bin/env', 'usr/bin/id', 'usr/bin/ls']

/**
 * Run the program as host root, chrooted into layerd's mount `mountpoint`,
 * with the image's own python. Async; resolves with its output.
 */
export async function runOnHostMount (mountpoint: string, timeoutMs = 60_000): Promise<ExecResult> {
  const started = performance.now()
  return await new Promise((resolve, reject) => {
    const child = spawn('chroot', [mountpoint, '/usr/bin/python3.11', '-', 'host'], { env: { PATH: '/usr/sbin:/usr/bin:/sbin:/bin', PYTHONDONTWRITEBYTECODE: '1' }, stdio: ['pipe', 'pipe', 'pipe'] })
    const out: Buffer[] = []
    const err: Buffer[] = []
    let timedOut = false
    const timer = setTimeout(() => { timedOut = true; child.kill('SIGKILL') }, timeoutMs)
    child.stdout.on('data', (c: Buffer) => out.push(c))
    child.stderr.on('data', (c: Buffer) => err.push(c))
    child.on('error', reject)
    child.on('close', code => {
      clearTimeout(timer)
      resolve({ exitCode: code ?? 137, timedOut, stdout: Buffer.concat(out), stderr: Buffer.concat(err), durationMs: performance.now() - started })
    })
    child.stdin.end(LOW_LEVEL_PROGRAM)
  })
}

/** The xattrs a path carries, as `getfattr -d -m -` prints them (empty when none). Async. */
export async function xattrDump (path: string): Promise<string> {
  return await new Promise((resolve, reject) => {
    const child = spawn('getfattr', ['-h', '-d', '-m', '-', '--absolute-names', path], { stdio: ['ignore', 'pipe', 'pipe'] })
    let out = ''
    child.stdout.on('data', (c: Buffer) => { out += c.toString() })
    child.on('error', reject)
    child.on('close', () => resolve(out.trim()))
  })
}

/** xattr dumps of the target files on `root`, by file. Async. */
export async function targetXattrs (root: string): Promise<Record<string, string>> {
  return Object.fromEntries(await Promise.all(TARGET_FILES.map(async f => [f, (await xattrDump(join(root, f))).replace(root, '')])))
}

/** Differences between a report and the expected answers, one `call: got X, want Y` line each, sorted. Sync. */
export function reportDifferences (got: Record<string, string>, want: Readonly<Record<string, string>>): string[] {
  const out: string[] = []
  for (const k of new Set([...Object.keys(got), ...Object.keys(want)])) {
    const g = got[k] ?? 'missing'
    const w = want[k] ?? 'not expected'
    if (g !== w) out.push(`${k}: got ${g}, want ${w}`)
  }
  return out.sort()
}
