/**
 * AdoptedDaemon (adopted-daemon.ts) and the holder's `--adopt PID:FD`: only
 * a child of this process can be adopted (its exit is watched on a pidfd,
 * native/spawn.c's childWatchExit); a bad `--adopt` ends the holder with
 * the usage exit code, naming the flag. The adopted layerd's exit codes and
 * signals, through the real front, are holder-front.test.ts's.
 */
import t from 'tap'
import { spawn } from 'node:child_process'
import { existsSync, mkdtempSync, rmSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { HOLDER_ENTRY } from '../daemon/client/daemon-launcher.js'
import { HOLDER_EXIT } from '../exit-codes.js'
import { AdoptedDaemon } from './adopted-daemon.js'
import { HOLDER_PID_FILE } from './fd-store-protocol.js'

t.test('AdoptedDaemon refuses a process that is not a child of this one (ECHILD), before watching anything', async t => {
  t.throws(() => new AdoptedDaemon(process.ppid), { code: 'ECHILD', syscall: 'waitid', message: new RegExp(`pid ${process.ppid}`) })
  t.throws(() => new AdoptedDaemon(process.pid), { code: 'ECHILD' }, 'nor itself')
})

t.test('the holder with an --adopt that names no child of its own exits with the usage code, naming the flag, and leaves no pid file', async t => {
  // A short home: its holder.sock must fit in sun_path (a tap test dir's name is too long for it).
  const home = mkdtempSync(join(tmpdir(), 'adopt-'))
  t.teardown(() => rmSync(home, { recursive: true, force: true }))
  const holder = spawn(process.execPath, [HOLDER_ENTRY, '--home', home, '--adopt', '1:0'], { stdio: ['ignore', 'ignore', 'pipe'] })
  let stderr = ''
  holder.stderr.on('data', (c: Buffer) => { stderr += c.toString() })
  const code = await new Promise(resolve => holder.once('exit', resolve))
  t.equal(code, HOLDER_EXIT.USAGE)
  t.match(stderr, /holder: cannot start: --adopt 1:0: process 1 is not a child of this holder/)
  t.equal(existsSync(join(home, HOLDER_PID_FILE)), false, 'its holder.pid is gone with it')
})
