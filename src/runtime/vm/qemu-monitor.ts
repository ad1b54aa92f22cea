/**
 * Asks a running QEMU, through its human monitor on a Unix socket, where
 * its vCPUs are: what a boot that never reaches the guest agent is doing
 * (RIP, halted or not). Used only for error messages and logs.
 *
 * May import: node built-ins.
 */
import { createConnection } from 'node:net'

const MONITOR_TIMEOUT_MS = 2000

/** `info cpus` and the register lines of `info registers`, or a note why not. Async; never throws. */
export async function describeVcpus (socket: string): Promise<string> {
  return await new Promise(resolve => {
    const conn = createConnection(socket)
    let out = ''
    const finish = (): void => {
      clearTimeout(timer)
      conn.destroy()
      const keep = out.split(/\r?\n/).filter(l => /^\* CPU|CPU #|RIP=|RAX=|CR0=|HLT/.test(l.trim()))
      resolve(keep.length > 0 ? keep.join(' | ') : `no answer from the QEMU monitor (${out.length} bytes)`)
    }
    const timer = setTimeout(finish, MONITOR_TIMEOUT_MS)
    conn.on('data', (c: Buffer) => { out += c.toString('latin1') })
    conn.on('connect', () => conn.write('info cpus\ninfo registers\n'))
    conn.on('error', err => { out += `monitor: ${err.message}`; finish() })
  })
}
