/** Every layerctl command, in help order. */
import type { Command } from '../command.js'
import { historyCommand, imagesCommand, rmCommand, tagCommand } from './images.js'
import { inspectCommand, rebaseCommand } from './inspect.js'
import { mountCommand, mountsCommand, prefetchCommand, statsCommand, traceCommand, umountCommand } from './mounts.js'
import { exportCommand, pullCommand } from './pull.js'
import { pushCommand } from './push.js'
import { commitCommand, psCommand, runCommand } from './sandboxes.js'
import { dfCommand, gcCommand } from './gc.js'
import { containerdCommand } from './containerd.js'
import { daemonCommand } from './daemon.js'

export const commands: Command[] = [
  pushCommand,
  pullCommand,
  exportCommand,
  imagesCommand,
  inspectCommand,
  historyCommand,
  tagCommand,
  rebaseCommand,
  rmCommand,
  mountCommand,
  umountCommand,
  mountsCommand,
  statsCommand,
  prefetchCommand,
  traceCommand,
  runCommand,
  psCommand,
  commitCommand,
  gcCommand,
  dfCommand,
  containerdCommand,
  daemonCommand
]
