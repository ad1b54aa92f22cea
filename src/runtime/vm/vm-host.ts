/**
 * Facts about the host the VM tiers need: whether KVM actually works, the
 * TSC frequency TCG guests see, and whether the programs are installed.
 *
 * KVM: /dev/kvm existing is not enough. On this kind of host it is a nested
 * PVM backend under which a stock Debian kernel hangs. So the probe boots
 * the real guest kernel and initrd under `-accel kvm` with
 * `layerd.probe=1` (the initrd prints a marker and powers off at once) and
 * calls KVM usable only if the marker appears within PROBE_TIMEOUT_MS. The
 * answer is cached per kernel and QEMU binary in memory and in
 * `<cacheDir>/kvm-probe.json`. Asking for kvm or tcg (LAYERD_VM_ACCEL) skips the probe.
 *
 * May import: src/errors.ts, src/host/, this folder, node built-ins.
 */
import { spawn } from 'node:child_process'
import { access, constants as fsConstants, mkdir, readFile, stat, writeFile } from 'node:fs/promises'
import { join } from 'node:path'
import { UsageError } from '../../errors.js'
import { runHost } from '../../host/host-command.js'
import type { Accel } from './qemu-args.js'


export const PROBE_MARKER = 'layerd-probe-ok'
/** A working KVM boots the guest to its initrd in well under a second; a hung one never does. */
export const PROBE_TIMEOUT_MS = 12_000
export const ACCEL_ENV = 'LAYERD_VM_ACCEL'

/** Where `name` is on PATH, or undefined. Async. */
export async function findOnPath (name: string): Promise<string | undefined> {
  for (const dir of (process.env.PATH ?? '/usr/local/bin:/usr/bin:/bin').split(':')) {
    if (dir === '') continue
    const p = join(dir, name)
    try {
      await access(p, fsConstants.X_OK)
      if ((await stat(p)).isFile()) return p
    } catch {}
  }
  return undefined
}

/**
 * The host TSC frequency in kHz from /proc/cpuinfo, when the TSC is
 * constant (`constant_tsc` and `nonstop_tsc`); undefined otherwise. Under
 * TCG the guest reads the host's TSC, and a guest that must calibrate it
 * against the emulated PIT on a loaded host can hang ("Unable to calibrate
 * against PIT"). Async.
 */
export async function hostTscKhz (): Promise<number | undefined> {
  const text = await readFile('/proc/cpuinfo', 'utf8').catch(() => '')
  const flags = /^flags\s*:(.*)$/m.exec(text)?.[1]?.split(/\s+/) ?? []
  const mhz = Number(/^cpu MHz\s*:\s*([0-9.]+)$/m.exec(text)?.[1])
  if (!flags.includes('constant_tsc') || !flags.includes('nonstop_tsc') || !Number.isFinite(mhz) || mhz <= 0) return undefined
  return Math.round(mhz * 1000)
}

async function qemuVersion (qemu: string): Promise<string> {
  const stdout = await runHost(qemu, ['--version'])
  return stdout.split('\n')[0] ?? ''
}

/** Boot `kernel`+`initrd` under KVM until the probe marker, or give up. Async; never throws. */
async function kvmBoots (qemu: string, kernel: string, initrd: string, timeoutMs: number): Promise<boolean> {
  return await new Promise(resolve => {
    const child = spawn(qemu, ['-M', 'microvm,x-option-roms=off', '-accel', 'kvm', '-cpu', 'host', '-m', '256M', '-smp', '1',
      '-nodefaults', '-no-user-config', '-display', 'none', '-no-reboot', '-serial', 'stdio',
      '-kernel', kernel, '-initrd', initrd, '-append', 'console=ttyS0 quiet panic=-1 reboot=t layerd.probe=1'], { stdio: ['ignore', 'pipe', 'ignore'] })
    let out = ''
    let done = false
    const finish = (ok: boolean): void => {
      if (done) return
      done = true
      clearTimeout(timer)
      child.kill('SIGKILL')
      resolve(ok)
    }
    const timer = setTimeout(() => finish(false), timeoutMs)
    child.stdout.on('data', (c: Buffer) => {
      out = (out + c.toString('latin1')).slice(-4096)
      if (out.includes(PROBE_MARKER)) finish(true)
    })
    child.on('error', () => finish(false))
    child.on('close', () => finish(out.includes(PROBE_MARKER)))
  })
}

const probeResults = new Map<string, Promise<Accel>>()

export interface AccelChoice {
  /** 'auto' (default: probe), or force 'kvm' or 'tcg' (the setting LAYERD_VM_ACCEL; anything else is a UsageError). */
  requested?: string
  qemu: string
  kernel: string
  initrd: string
  cacheDir: string
}

/**
 * KVM when it works here, else TCG. Async. Throws UsageError for an unknown
 * LAYERD_VM_ACCEL value.
 */
export async function chooseAccel (c: AccelChoice): Promise<Accel> {
  const requested = c.requested ?? 'auto'
  if (requested === 'kvm' || requested === 'tcg') return requested
  if (requested !== 'auto') throw new UsageError(`${ACCEL_ENV}=${requested}: use kvm, tcg or auto`)
  try {
    await access('/dev/kvm', fsConstants.R_OK | fsConstants.W_OK)
  } catch {
    return 'tcg'
  }
  const k = await stat(c.kernel)
  const key = `${await qemuVersion(c.qemu).catch(() => c.qemu)}|${c.kernel}|${k.size}|${k.mtimeMs}`
  let p = probeResults.get(key)
  if (p === undefined) {
    p = (async (): Promise<Accel> => {
      const file = join(c.cacheDir, 'kvm-probe.json')
      const cached = await readFile(file, 'utf8').then(t => JSON.parse(t) as { key: string, accel: Accel }, () => undefined)
      if (cached?.key === key) return cached.accel
      const accel: Accel = await kvmBoots(c.qemu, c.kernel, c.initrd, PROBE_TIMEOUT_MS) ? 'kvm' : 'tcg'
      await mkdir(c.cacheDir, { recursive: true })
      await writeFile(file, JSON.stringify({ key, accel, at: new Date().toISOString() }))
      return accel
    })()
    probeResults.set(key, p)
  }
  return await p
}
