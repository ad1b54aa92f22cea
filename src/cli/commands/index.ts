/** Every layerctl command, in help order. */
import type { Command } from '../command.js'
import { historyCommand, imagesCommand, rmCommand, tagCommand } from './images.js'
import { inspectCommand, rebaseCommand } from './inspect.js'
import { pushCommand } from './push.js'

export const commands: Command[] = [
  pushCommand,
  imagesCommand,
  inspectCommand,
  historyCommand,
  tagCommand,
  rebaseCommand,
  rmCommand
]
