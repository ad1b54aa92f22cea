/**
 * Where layerd keeps the /dev/fuse fds of its mounts so they outlive it:
 * its holder process (fd-store-protocol.ts, over the socketpair the holder
 * gave it), or systemd's file-descriptor store (sd_notify FDSTORE=1 to
 * NOTIFY_SOCKET; the fds come back as LISTEN_FDS/LISTEN_FDNAMES on the next
 * start). `fdStoreFromEnv()` picks the one this process was started under.
 *
 * May import: src/errors.ts, src/native.ts, ./fd-store-protocol.ts.
 */
import { closeSync } from 'node:fs'
import { FdStoreError, describeError } from '../errors.js'
import { nativeFdPassing, type NativeFdPassing } from '../native.js'
import { HOLDER_FD_ENV, HOLDER_FRESH_ENV, MAX_MESSAGE_BYTES, decodeReply, encodeMessage, type HolderReply, type HolderRequest } from './fd-store-protocol.js'

export { FdStoreError }

export interface FdStore {
  /** 'holder' or 'systemd', for messages and `layerctl daemon status`. */
  readonly kind: 'holder' | 'systemd'
  /** Every fd kept for this home, by name: this process's own copies (close-on-exec). Sync; call once, at start. */
  list: () => Map<string, number>
  /** Keep a copy of `fd` under `name` (replacing one kept there). Sync; throws FdStoreError. */
  put: (name: string, fd: number) => void
  /** Stop keeping the fd named `name`. Sync; throws FdStoreError. */
  drop: (name: string) => void
  /**
   * This daemon has loaded its code and waits for the home's lock (a planned
   * restart's new daemon). `untilTakeover`: a warm standby, blocked until the
   * holder says it is to take over (no timeout). Sync; throws FdStoreError
   * (for a warm standby: the holder is gone, so it must not serve).
   */
  standby: (untilTakeover?: boolean) => void
  /**
   * This daemon serves: the holder resets its restart backoff, systemd marks the unit started. Sync; does not
   * wait for the holder's answer (it is read before the next call's), so a holder still booting does not hold
   * the daemon up. Throws FdStoreError when the message cannot be sent.
   */
  ready: () => void
  /**
   * Call `listener` once, on the event loop, when the store is gone for good
   * (the holder died: its end of the socket closed), so that this daemon
   * knows at once, not at its next call, that nothing keeps its connections.
   * systemd's store never goes. Sync; throws FdStoreError when it cannot watch.
   */
  onGone: (listener: (why: FdStoreError) => void) => void
}

/** How long the holder may take to answer: it does nothing else, so this only bounds a stopped (SIGSTOP) holder. */
const HOLDER_REPLY_TIMEOUT_MS = 5_000

/** The store of the holder that started this process (fd-store-protocol.ts). */
export class HolderFdStore implements FdStore {
  readonly kind = 'holder'
  readonly #sock: number
  readonly #native: NativeFdPassing
  /** A holder still booting that keeps nothing (HOLDER_FRESH_ENV): `list` and `standby` are answered here, until the first `put`. */
  #fresh: boolean
  /** Requests whose answers are still to read before the next call's: a `ready`, and `put`s sent by `handOver`, sent without waiting. */
  readonly #unread: HolderRequest[] = []

  constructor (sock: number, fresh = false) {
    this.#native = nativeFdPassing()
    this.#sock = sock
    this.#fresh = fresh
    this.#native.fdSetCloexec(sock) // sandboxes and tools this daemon starts must not reach the holder
  }

  list (): Map<string, number> {
    if (this.#fresh) return new Map()
    this.#send({ op: 'list' }, [])
    this.#readUnread()
    const out = new Map<string, number>()
    for (;;) {
      const { reply, fds } = this.#receive()
      if (reply.op === 'end') return out
      if (reply.op !== 'fd' || fds.length !== 1) {
        for (const fd of fds) closeSync(fd)
        throw new FdStoreError(`the holder answered a list with ${JSON.stringify(reply)} and ${fds.length} fd(s)`)
      }
      const old = out.get(reply.name)
      if (old !== undefined) closeSync(old)
      out.set(reply.name, fds[0]!)
    }
  }

  put (name: string, fd: number): void { this.#fresh = false; this.#call({ op: 'put', name }, [fd]) }
  drop (name: string): void { this.#call({ op: 'drop', name }, []) }
  standby (untilTakeover = false): void {
    if (this.#fresh && !untilTakeover) return // no other layerd runs under a fresh holder: it would answer ok at once
    this.#call({ op: 'standby' }, [], untilTakeover ? -1 : HOLDER_REPLY_TIMEOUT_MS)
  }
  ready (): void { this.#send({ op: 'ready' }, []); this.#unread.push({ op: 'ready' }) }
  /**
   * Hand `fd` to a holder that may still be booting, without waiting for its
   * answer (read before the next call's): once sent, the fd is in the socket,
   * which the holder's end keeps alive even if this process dies before the
   * holder reads it. Sync; throws FdStoreError when it cannot be sent.
   */
  handOver (name: string, fd: number): void { this.#fresh = false; this.#send({ op: 'put', name }, [fd]); this.#unread.push({ op: 'put', name }) }
  /** Tell the holder this process exits with `code` (it is not the holder's child, so the holder cannot reap the code). Sync; never throws (the holder may be gone). */
  exiting (code: number): void {
    try { this.#native.fdSend(this.#sock, encodeMessage({ op: 'exiting', code }), []) } catch {}
  }
  onGone (listener: (why: FdStoreError) => void): void {
    try {
      // The socket stays open for this process's life: nothing here closes it.
      this.#native.fdWatchHangup(this.#sock, err => listener(err === null
        ? new FdStoreError('the holder is gone (its socket hung up)')
        : new FdStoreError(`the holder is gone (its socket failed: ${describeError(err)})`, { cause: err })))
    } catch (err) {
      throw new FdStoreError(`cannot watch the holder's socket: ${describeError(err)}`, { cause: err })
    }
  }

  #call (request: HolderRequest, fds: number[], timeoutMs = HOLDER_REPLY_TIMEOUT_MS): void {
    this.#send(request, fds)
    this.#readUnread()
    this.#expectOk(request, timeoutMs)
  }

  /** Read the answers to the requests sent without waiting (they come before the next call's). */
  #readUnread (): void {
    for (let request = this.#unread.shift(); request !== undefined; request = this.#unread.shift()) this.#expectOk(request, HOLDER_REPLY_TIMEOUT_MS)
  }

  /** Read the answer to `request`: ok, or throw FdStoreError. */
  #expectOk (request: HolderRequest, timeoutMs: number): void {
    const { reply, fds: extra } = this.#receive(timeoutMs)
    for (const fd of extra) closeSync(fd)
    if (reply.op === 'error') throw new FdStoreError(`the holder refused ${request.op}: ${reply.message}`)
    if (reply.op !== 'ok') throw new FdStoreError(`the holder answered ${request.op} with ${JSON.stringify(reply)}`)
  }

  #send (request: HolderRequest, fds: number[]): void {
    try {
      this.#native.fdSend(this.#sock, encodeMessage(request), fds)
    } catch (err) {
      throw new FdStoreError(`cannot reach the holder (${request.op}): ${describeError(err)}`, { cause: err })
    }
  }

  #receive (timeoutMs = HOLDER_REPLY_TIMEOUT_MS): { reply: HolderReply, fds: number[] } {
    let m
    try {
      m = this.#native.fdRecv(this.#sock, MAX_MESSAGE_BYTES, timeoutMs)
    } catch (err) {
      throw new FdStoreError(`no answer from the holder: ${describeError(err)}`, { cause: err })
    }
    if (m === null) throw new FdStoreError('the holder is gone (its socket closed)')
    const reply = decodeReply(m.data)
    if (typeof reply === 'string') {
      for (const fd of m.fds) closeSync(fd)
      throw new FdStoreError(`the holder sent a bad reply: ${reply}`)
    }
    return { reply, fds: m.fds }
  }
}

/** systemd's fd store (FileDescriptorStoreMax= in the unit; layerd/layerd.service). */
export class SystemdFdStore implements FdStore {
  readonly kind = 'systemd'
  readonly #socket: string
  readonly #native: NativeFdPassing
  readonly #inherited: Map<string, number>

  /** `env`: this process's environment; the LISTEN_* variables are consumed (removed), as sd_listen_fds(1) does. */
  constructor (notifySocket: string, env: NodeJS.ProcessEnv) {
    this.#native = nativeFdPassing()
    this.#socket = notifySocket
    this.#inherited = new Map()
    const count = Number(env.LISTEN_FDS ?? '0')
    if (Number(env.LISTEN_PID) === process.pid && Number.isSafeInteger(count) && count > 0) {
      const names = (env.LISTEN_FDNAMES ?? '').split(':')
      for (let i = 0; i < count; i++) {
        const fd = 3 + i // SD_LISTEN_FDS_START
        this.#native.fdSetCloexec(fd)
        const name = names[i] ?? ''
        if (name.startsWith('fuse-')) this.#inherited.set(name, fd)
        else closeSync(fd) // not ours (a socket unit's fd): layerd listens on its own socket
      }
    }
    delete env.LISTEN_FDS
    delete env.LISTEN_PID
    delete env.LISTEN_FDNAMES
  }

  list (): Map<string, number> {
    const out = new Map(this.#inherited)
    this.#inherited.clear()
    return out
  }

  put (name: string, fd: number): void { this.#notify(`FDSTORE=1\nFDNAME=${name}`, [fd]) }
  drop (name: string): void { this.#notify(`FDSTOREREMOVE=1\nFDNAME=${name}`, []) }
  /** systemd starts one daemon at a time: nothing to say. */
  standby (): void {}
  ready (): void { this.#notify(`READY=1\nMAINPID=${process.pid}`, []) }
  /** systemd outlives its services. */
  onGone (): void {}

  #notify (message: string, fds: number[]): void {
    try {
      this.#native.sdNotify(this.#socket, message, fds)
    } catch (err) {
      throw new FdStoreError(`cannot notify systemd at ${this.#socket} (${message.split('\n')[0]}): ${describeError(err)}`, { cause: err })
    }
  }
}

/**
 * The fd store this process was started with: the holder's (LAYERD_HOLDER_FD),
 * else systemd's (NOTIFY_SOCKET), else undefined (mounts then die with the
 * daemon, as before). Sync; throws FdStoreError for a malformed LAYERD_HOLDER_FD.
 */
export function fdStoreFromEnv (env: NodeJS.ProcessEnv = process.env): FdStore | undefined {
  const holderFd = env[HOLDER_FD_ENV]
  if (holderFd !== undefined && holderFd !== '') {
    const fd = Number(holderFd)
    if (!Number.isSafeInteger(fd) || fd < 3) throw new FdStoreError(`${HOLDER_FD_ENV}=${JSON.stringify(holderFd)} is not a file descriptor ≥ 3`)
    const fresh = env[HOLDER_FRESH_ENV] === '1'
    delete env[HOLDER_FD_ENV] // children (sandboxes, tools) never see them
    delete env[HOLDER_FRESH_ENV]
    return new HolderFdStore(fd, fresh)
  }
  const notify = env.NOTIFY_SOCKET
  if (notify !== undefined && notify !== '') return new SystemdFdStore(notify, env)
  return undefined
}
