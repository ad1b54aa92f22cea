/**
 * The holder: a tiny process, started with layerd, that keeps layerd's FUSE
 * connections alive when layerd dies. It has no image logic (so it never
 * needs an upgrade); it
 *   - starts layerd as its child, giving it one end of a socketpair as fd 3
 *     (LAYERD_HOLDER_FD), and keeps the /dev/fuse fds layerd hands it there
 *     (fd-store-protocol.ts), closing them only when layerd drops them;
 *   - restarts layerd when it dies, at once when it had been serving for a
 *     second or more, else with a backoff (250 ms doubling to 30 s), and
 *     hands the kept fds to the new layerd;
 *   - answers `status` and `restart` on `<home>/holder.sock` (JSON lines):
 *     a planned restart starts a new layerd from the entry given (new code
 *     from disk) while the old one serves; once the new one has loaded and
 *     waits for the home's lock ('standby'), the old one is asked to hand
 *     over (SIGUSR2: it exits without unmounting, releasing the lock), and
 *     the new one takes every connection; the answer comes once it serves;
 *   - stops when layerd stops cleanly (exit 0: it unmounted everything) or
 *     refuses to start (usage, already running).
 * `<home>/holder.pid` names the holder; `<home>/layerd.pid` keeps naming layerd.
 * Started by its C front (native/holder_front.c), it adopts the first layerd
 * (`HolderOptions.adopt`): the front started it before this process booted.
 *
 * Its parts: layerd-child.ts starts a layerd, restart-policy.ts says when
 * to start the next, kept-fds.ts keeps the fds, holder-control-server.ts
 * answers holder.sock, holder-pid-file.ts guards the home; this class runs
 * the generations (serving, next, warm standby) and the fd-store socket.
 *
 * May import: src/errors.ts, src/exit-codes.ts, src/native.ts, src/host/thread-priority.ts, this folder, node built-ins.
 */
import { closeSync, rmSync } from 'node:fs'
import type { Server } from 'node:net'
import { join } from 'node:path'
import { BadInputError, HolderError, describeError } from '../errors.js'
import { HOLDER_EXIT, LAYERD_EXIT } from '../exit-codes.js'
import { nativeFdPassing, type NativeFdPassing } from '../native.js'
import { setProcessNice } from '../host/thread-priority.js'
import { AdoptedDaemon, type DaemonProcess } from './adopted-daemon.js'
import { RescuedDaemon } from './rescued-daemon.js'
import { HOLDER_SOCKET, MAX_MESSAGE_BYTES, decodeRequest, encodeMessage, type HolderReply } from './fd-store-protocol.js'
import { listenHolderControl, type HolderStatus, type RestartResult } from './holder-control-server.js'
import { releaseHolderPidFile, takeHolderPidFile } from './holder-pid-file.js'
import { KeptFds } from './kept-fds.js'
import { startLayerdChild, type LayerdRole } from './layerd-child.js'
import { HEALTHY_MS, isFinalExit, restartDelayMs } from './restart-policy.js'
import type { LogLine } from '../log-line.js'

/**
 * The first layerd a holder starts was started for a client that is about to
 * use it (`layerctl mount` on a cold node): its warm standby waits this long,
 * so that loading it does not take CPU from that first mount and its reads.
 * Later layerds (after a crash or a planned restart) get theirs at once.
 */
export const FIRST_STANDBY_DELAY_MS = 3_000
/** A planned restart fails when the new layerd does not serve within this. */
export const RESTART_TIMEOUT_MS = 30_000

export interface HolderOptions {
  home: string
  /** layerd's entry script (dist/layerd/main.js); a planned restart may name another. */
  daemonEntry: string
  /** Flags for layerd after `--foreground --home HOME`. */
  daemonArgs: string[]
  log: LogLine
  /**
   * Keep a warm standby layerd (loaded, holding nothing, blocked until told
   * to take over) while one serves, so a crash costs no module loading.
   * Costs one more idle layerd's memory (bench/failover.ts reports it). Default true.
   */
  warmStandby?: boolean
  /**
   * The first layerd, already started by the holder's C front
   * (native/holder_front.c): its pid (a child of this process) and the
   * holder's end of its socketpair. Undefined: the holder starts it.
   */
  adopt?: { pid: number, sock: number }
  /** The nice value to go back to, on every thread, at start: the C front booted this process nicer than layerd. */
  niceBack?: number
  /**
   * A serving layerd whose holder died, which started this one
   * (rescue-holder.ts): its pid (not a child of this process) and the
   * holder's end of its socketpair. It is this holder's current layerd.
   */
  rescue?: { pid: number, sock: number }
}

interface Generation {
  child: DaemonProcess
  sock: number
  startedAt: number
  readyAt?: number
  /** A warm standby: its `standby` request waits for the answer that lets it take over. */
  warm?: boolean
  /** A warm standby has said `standby` and waits for its answer. */
  waiting?: boolean
  /** The warm standby is to take over: answer its `standby` (now, or when it comes). */
  go?: boolean
  /** The warm standby was ended on purpose (a planned restart, the holder stops). */
  dropped?: boolean
}

/** Watch the front's layerd (HolderOptions.adopt). Sync; throws BadInputError when `pid` is no child of this process, UnsupportedError when the addon cannot watch it. */
function watchAdopted ({ pid, sock }: { pid: number, sock: number }): AdoptedDaemon {
  try {
    return new AdoptedDaemon(pid)
  } catch (err) {
    if ((err as NodeJS.ErrnoException).code !== 'ECHILD') throw err
    throw new BadInputError(`--adopt ${pid}:${sock}: process ${pid} is not a child of this holder`, { cause: err })
  }
}

/** Hold the layerd that asked for this holder (HolderOptions.rescue). Sync; throws BadInputError when no process `pid` exists. */
function rescuedDaemon ({ pid, sock }: { pid: number, sock: number }): RescuedDaemon {
  try {
    return new RescuedDaemon(pid)
  } catch (err) {
    throw new BadInputError(`--rescue ${pid}:${sock}: no process ${pid}`, { cause: err })
  }
}

export class Holder {
  readonly #opts: HolderOptions
  readonly #native: NativeFdPassing
  readonly #fds = new KeptFds()
  readonly #startedAt = new Date()
  #entry: string
  #current: Generation | undefined
  #server: Server | undefined
  #restarts = 0
  #plannedRestarts = 0
  /** The warm standby (opts.warmStandby), while one serves. */
  #standby: Generation | undefined
  /** Whether a layerd has served yet under this holder (FIRST_STANDBY_DELAY_MS). */
  #served = false
  #failures = 0
  #stopping = false
  #planned: { oldPid: number | null, started: number } | undefined
  /** A planned restart's new layerd, until it serves. */
  #next: Generation | undefined
  #readyWaiters: Array<{ resolve: (g: Generation) => void, reject: (err: Error) => void }> = []
  #done!: (code: number) => void
  readonly finished: Promise<number>

  constructor (opts: HolderOptions) {
    this.#opts = opts
    this.#entry = opts.daemonEntry
    this.#native = nativeFdPassing()
    this.finished = new Promise(resolve => { this.#done = resolve })
  }

  /** Take the pid file, listen, start layerd. Async; throws HolderError (code 'ERR_HOLDER') when another holder runs. */
  async start (): Promise<void> {
    const adopt = this.#opts.adopt
    if (this.#opts.niceBack !== undefined) {
      // Before anything that starts a thread or a layerd: both inherit the calling thread's nice value.
      try { setProcessNice(this.#opts.niceBack) } catch (err) { this.#opts.log(`holder: cannot go back to nice ${this.#opts.niceBack}: ${describeError(err)}`, 'warn') }
    }
    const adopted = adopt === undefined ? undefined : watchAdopted(adopt)
    const rescue = this.#opts.rescue
    const rescued = rescue === undefined ? undefined : rescuedDaemon(rescue)
    try {
      takeHolderPidFile(this.#opts.home)
    } catch (err) {
      adopted?.kill('SIGTERM') // it holds nothing yet: it waits for this holder
      throw err // a rescued layerd serves on, unprotected, and logs its socket's hang-up
    }
    try {
      // An adopted or rescued layerd may already wait for an answer on its socket: serve that first.
      if (adopt !== undefined && adopted !== undefined) this.#adopt(adopt.sock, adopted)
      if (rescue !== undefined && rescued !== undefined) this.#takeRescued(rescue.sock, rescued)
      this.#server = await listenHolderControl(this.#opts.home, { status: () => this.status(), restart: async entry => await this.restart(entry) })
      if (adopt === undefined && rescue === undefined) this.#spawn()
    } catch (err) {
      this.#current?.child.kill('SIGTERM')
      releaseHolderPidFile(this.#opts.home)
      throw err
    }
  }

  status (): HolderStatus {
    const g = this.#current
    return {
      pid: process.pid,
      holderPid: process.pid,
      daemonPid: g?.child.pid ?? null,
      daemonReadyAt: g?.readyAt === undefined ? null : new Date(performance.timeOrigin + g.readyAt).toISOString(),
      daemonEntry: this.#entry,
      startedAt: this.#startedAt.toISOString(),
      restarts: this.#restarts,
      plannedRestarts: this.#plannedRestarts,
      standbyPid: this.#standby?.child.pid ?? null,
      keptFds: this.#fds.size
    }
  }

  /**
   * A planned restart: the running layerd hands over (SIGUSR2) and a new one
   * from `entry` (default: the current entry) takes every connection. Async;
   * resolves once the new layerd serves; rejects with HolderError after
   * RESTART_TIMEOUT_MS or when no layerd runs.
   */
  async restart (entry?: string): Promise<RestartResult> {
    const g = this.#current
    if (g === undefined || g.child.exitCode !== null || this.#stopping) throw new HolderError('no layerd is running under this holder')
    if (this.#planned !== undefined) throw new HolderError('a restart is already under way')
    if (entry !== undefined) this.#entry = entry
    const started = performance.now()
    this.#planned = { oldPid: g.child.pid ?? null, started }
    const ready = new Promise<Generation>((resolve, reject) => {
      const timer = setTimeout(() => reject(new HolderError(`the new layerd did not serve within ${RESTART_TIMEOUT_MS} ms; see ${join(this.#opts.home, 'layerd.log')}`)), RESTART_TIMEOUT_MS)
      this.#readyWaiters.push({ resolve: next => { clearTimeout(timer); resolve(next) }, reject: err => { clearTimeout(timer); reject(err) } })
    })
    // New code from disk: the warm standby (loaded earlier, maybe from other code) goes; one from the new entry follows once it serves.
    this.#dropStandby()
    // The new one loads while the old one serves; the old one hands over once the new one waits for the lock (#answer 'standby').
    this.#next = this.#spawn('next')
    try {
      const next = await ready
      return { oldPid: this.#planned.oldPid, newPid: next.child.pid!, ms: Math.round(performance.now() - started) }
    } finally {
      this.#planned = undefined
    }
  }

  /** Stop layerd (SIGTERM: it unmounts) and then the holder. Async; resolves with the exit code. */
  async stop (): Promise<number> {
    if (!this.#stopping) {
      this.#stopping = true
      this.#next?.child.kill('SIGTERM') // a planned restart's new layerd: still waiting for the lock, it holds nothing
      this.#dropStandby()
      const child = this.#current?.child
      if (child !== undefined && child.exitCode === null && child.signalCode === null) child.kill('SIGTERM')
      else this.#finish(HOLDER_EXIT.OK)
    }
    return await this.finished
  }

  /** Take the front's layerd (`child`, its socket `sock`) as the current one (HolderOptions.adopt). Sync; throws BadInputError for a closed fd. */
  #adopt (sock: number, child: AdoptedDaemon): void {
    const pid = child.pid
    const g: Generation = { child, sock, startedAt: 0 } // it started with this process (just before its exec into Node)
    this.#current = g // from here, a failed start stops it
    try {
      this.#native.fdSetCloexec(sock) // the layerds this holder starts later must not inherit it
    } catch (err) {
      throw new BadInputError(`--adopt ${pid}:${sock}: fd ${sock} is not open: ${describeError(err)}`, { cause: err })
    }
    this.#opts.log(`holder ${process.pid}: adopted layerd ${pid} (${this.#entry}), started by the holder's front`)
    child.on('exit', (code, signal) => this.#exited(g, code, signal))
    this.#serveFdStore(g)
  }

  /** Take the layerd that started this holder (HolderOptions.rescue) as the current one: it serves already. Sync; throws BadInputError for a closed fd. */
  #takeRescued (sock: number, child: RescuedDaemon): void {
    const g: Generation = { child, sock, startedAt: performance.now() }
    this.#current = g
    this.#served = true // its warm standby starts as soon as it says `ready`, not FIRST_STANDBY_DELAY_MS later
    try {
      this.#native.fdSetCloexec(sock)
    } catch (err) {
      throw new BadInputError(`--rescue ${child.pid}:${sock}: fd ${sock} is not open: ${describeError(err)}`, { cause: err })
    }
    this.#opts.log(`holder ${process.pid}: took over layerd ${child.pid} (${this.#entry}), whose holder died`)
    child.on('exit', (code, signal) => this.#exited(g, code, signal))
    this.#serveFdStore(g)
  }

  /** Start a layerd; `as`: it serves now, it is a planned restart's next one, or a warm standby. */
  #spawn (as: LayerdRole = 'current'): Generation {
    const current = as === 'current'
    const { child, sock: mine } = startLayerdChild({ entry: this.#entry, home: this.#opts.home, daemonArgs: this.#opts.daemonArgs, role: as, native: this.#native, log: this.#opts.log })
    const g: Generation = { child, sock: mine, startedAt: performance.now(), ...(as === 'standby' ? { warm: true } : {}) }
    if (current) this.#current = g
    if (as === 'standby') this.#standby = g
    this.#opts.log(`holder ${process.pid}: started layerd ${child.pid ?? '?'} (${this.#entry})${as === 'next' ? ' to take over from the running one' : as === 'standby' ? ' as a warm standby' : ''}`)
    child.on('error', err => this.#opts.log(`holder: cannot start layerd: ${describeError(err)}`, 'warn'))
    child.on('exit', (code, signal) => this.#exited(g, code, signal))
    this.#serveFdStore(g)
    return g
  }

  #exited (g: Generation, code: number | null, signal: NodeJS.Signals | null): void {
    const how = signal !== null ? `was killed by ${signal}` : `exited with code ${code ?? '?'}`
    if (this.#standby === g) {
      // A standby that dies before it is needed: the next one starts when a daemon next reports that it serves.
      this.#standby = undefined
      this.#opts.log(`holder: the warm standby layerd ${g.child.pid ?? '?'} ${how}`)
      return
    }
    if (this.#next === g) {
      // A planned restart's new layerd died before serving: the restart fails; the old one serves on, or is restarted below.
      this.#next = undefined
      for (const w of this.#readyWaiters.splice(0)) w.reject(new HolderError(`the new layerd ${g.child.pid ?? '?'} ${how} before serving; see ${join(this.#opts.home, 'layerd.log')}`))
      if (this.#current !== undefined || this.#stopping) { this.#opts.log(`holder: the new layerd ${g.child.pid ?? '?'} ${how} before serving`, 'warn'); return }
    } else if (this.#current === g) {
      this.#current = undefined
      if (this.#next !== undefined) {
        this.#opts.log(`holder: layerd ${g.child.pid ?? '?'} ${how} (handover); layerd ${this.#next.child.pid ?? '?'} takes over; ${this.#fds.size} connection(s) kept`)
        return
      }
    } else {
      this.#opts.log(g.dropped === true ? `holder: the warm standby layerd ${g.child.pid ?? '?'} ended (not needed)` : `holder: layerd ${g.child.pid ?? '?'} ${how}`)
      return
    }
    if (this.#stopping || (isFinalExit(code) && this.#planned === undefined)) {
      this.#opts.log(`holder: layerd ${g.child.pid ?? '?'} ${how}; the holder stops`, 'warn')
      this.#finish(this.#stopping ? HOLDER_EXIT.OK : code ?? HOLDER_EXIT.FAILURE)
      return
    }
    const now = performance.now()
    const healthy = g.readyAt !== undefined && now - g.readyAt >= HEALTHY_MS
    const planned = this.#planned !== undefined || code === LAYERD_EXIT.HANDOVER
    this.#failures = healthy || planned ? 0 : this.#failures + 1
    const delay = restartDelayMs(this.#failures)
    this.#restarts++
    const standby = this.#standby
    if (standby !== undefined && delay === 0) {
      // The warm standby takes over: it only has to take the lock, open the home and attach the kept connections.
      this.#standby = undefined
      this.#current = standby
      this.#opts.log(`holder: layerd ${g.child.pid ?? '?'} ${how}${code === LAYERD_EXIT.FATAL ? ' (a fatal error: its cause is logged above)' : ''}; ` +
        `the warm standby layerd ${standby.child.pid ?? '?'} takes over; ${this.#fds.size} connection(s) kept`, 'warn')
      this.#letTakeOver(standby)
      return
    }
    this.#opts.log(`holder: layerd ${g.child.pid ?? '?'} ${how}${planned ? ' (handover)' : code === LAYERD_EXIT.FATAL ? ' (a fatal error: its cause is logged above)' : ''}; ` +
      `starting a new one${delay > 0 ? ` in ${delay} ms (${this.#failures} failed start(s) in a row)` : ''}; ${this.#fds.size} connection(s) kept`, 'warn')
    setTimeout(() => { if (!this.#stopping) this.#spawn() }, delay)
  }

  /** Answer a warm standby's `standby` (now, or as soon as it asks): it takes the home's lock and every kept connection. */
  #letTakeOver (g: Generation): void {
    g.go = true
    if (g.waiting === true) {
      g.waiting = false
      this.#native.fdSend(g.sock, encodeMessage({ op: 'ok' }), [])
    }
  }

  /** End the warm standby, if any: it holds nothing (no lock, no fd), so a SIGKILL loses nothing. */
  #dropStandby (): void {
    const standby = this.#standby
    this.#standby = undefined
    if (standby !== undefined && standby.child.exitCode === null && standby.child.signalCode === null) { standby.dropped = true; standby.child.kill('SIGKILL') }
  }

  /** Start a warm standby when one is wanted and none runs (after a daemon reports that it serves). */
  #keepStandby (): void {
    if (this.#opts.warmStandby === false || this.#stopping || this.#standby !== undefined || this.#next !== undefined) return
    this.#spawn('standby')
  }

  /** Serve one layerd's requests until its end of the socketpair closes. */
  #serveFdStore (g: Generation): void {
    const next = (): void => {
      this.#native.fdRecvAsync(g.sock, MAX_MESSAGE_BYTES, (err, m) => {
        if (err !== null || m === null) {
          if (err !== null && err.code !== 'ECONNRESET') this.#opts.log(`holder: the fd socket of layerd ${g.child.pid ?? '?'} failed: ${describeError(err)}`, 'warn')
          closeSync(g.sock)
          if (g.child instanceof RescuedDaemon) g.child.ended() // not a child: the hang-up is how its exit shows
          return
        }
        try {
          this.#answer(g, m.data, m.fds)
        } catch (e) {
          this.#opts.log(`holder: answering layerd ${g.child.pid ?? '?'}: ${describeError(e)}`, 'warn')
        }
        next()
      })
    }
    next()
  }

  #answer (g: Generation, data: Buffer, fds: number[]): void {
    const reply = (r: HolderReply, attach: number[] = []): void => { this.#native.fdSend(g.sock, encodeMessage(r), attach) }
    const req = decodeRequest(data)
    if (typeof req !== 'string' && req.op === 'exiting' && fds.length === 0) {
      if (g.child instanceof RescuedDaemon) g.child.exitingWith(req.code) // no answer: it is exiting
      return
    }
    if (typeof req === 'string' || (req.op === 'put' ? fds.length !== 1 : fds.length !== 0)) {
      for (const fd of fds) closeSync(fd)
      reply({ op: 'error', message: typeof req === 'string' ? req : `${req.op} with ${fds.length} fd(s)` })
      return
    }
    switch (req.op) {
      case 'put':
        this.#fds.put(req.name, fds[0]!)
        reply({ op: 'ok' })
        return
      case 'drop':
        this.#fds.drop(req.name)
        reply({ op: 'ok' })
        return
      case 'list':
        for (const [name, fd] of this.#fds.entries()) reply({ op: 'fd', name }, [fd])
        reply({ op: 'end', count: this.#fds.size })
        return
      case 'standby':
        if (g.warm === true && g.go !== true) { g.waiting = true; return } // answered by #letTakeOver
        reply({ op: 'ok' })
        if (g === this.#next) this.#current?.child.kill('SIGUSR2')
        return
      case 'ready':
        g.readyAt = performance.now()
        reply({ op: 'ok' })
        this.#opts.log(`holder: layerd ${g.child.pid ?? '?'} serves, ${Math.round(g.readyAt - g.startedAt)} ms after its start`)
        if (g === this.#next) {
          this.#next = undefined
          this.#current = g
          this.#plannedRestarts++
          for (const w of this.#readyWaiters.splice(0)) w.resolve(g)
        }
        if (g === this.#current) {
          if (this.#served) setImmediate(() => this.#keepStandby())
          else setTimeout(() => this.#keepStandby(), FIRST_STANDBY_DELAY_MS).unref()
          this.#served = true
        }
    }
  }

  #finish (code: number): void {
    this.#dropStandby()
    this.#server?.close()
    rmSync(join(this.#opts.home, HOLDER_SOCKET), { force: true })
    this.#fds.closeAll()
    releaseHolderPidFile(this.#opts.home)
    this.#done(code)
  }
}
