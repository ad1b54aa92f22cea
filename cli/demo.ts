#!/usr/bin/env node
/**
 * `npm run demo`: the main job on the embedded default store, narrated.
 * Builds (or reuses) the real Debian fixture images, pushes two versions of
 * a python image (the second uploads only its new chunks), mounts it lazily,
 * runs python3 from a cold cache, shows what was fetched, runs it in the
 * sandbox tiers that work here, and exports the root filesystem.
 *
 * Every step is a real `layerctl` command, printed before it runs.
 */
import { spawn } from 'node:child_process'
import { mkdtemp, rm } from 'node:fs/promises'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { fileURLToPath } from 'node:url'
import { ensureDebianImages } from '../fixtures/debian-images.js'
import { resolveSettings } from '../src/state/settings.js'

const LAYERCTL = fileURLToPath(new URL('./layerctl.js', import.meta.url))

async function sh (cmd: string, args: string[], opts: { quiet?: boolean, allowFail?: boolean } = {}): Promise<string> {
  console.log(`\n$ ${[cmd === process.execPath ? 'layerctl' : cmd, ...(cmd === process.execPath ? args.slice(1) : args)].join(' ')}`)
  return await new Promise((resolve, reject) => {
    const child = spawn(cmd, args, { stdio: ['ignore', 'pipe', 'inherit'] })
    let out = ''
    child.stdout.on('data', (c: Buffer) => { out += c.toString(); if (opts.quiet !== true) process.stdout.write(c) })
    child.on('error', reject)
    child.on('close', code => {
      if (code === 0 || opts.allowFail === true) resolve(out)
      else reject(new Error(`${cmd} ${args.join(' ')} exited with ${code}`))
    })
  })
}

const layerctl = async (...args: string[]): Promise<string> => await sh(process.execPath, [LAYERCTL, ...args])

async function main (): Promise<void> {
  const settings = resolveSettings({})
  console.log(`layerd demo — node state in ${settings.home}, store ${settings.store}`)
  console.log('Preparing the real Debian images (debootstrap minbase + python3; cached after the first run)…')
  const images = await ensureDebianImages({ log: line => console.log(`  ${line}`) })
  const v1 = images.images['python-v1']
  const v2 = images.images['python-v2']

  console.log('\n1. Push two versions of a python image. The second uploads only its new chunks.')
  await layerctl('push', v1.dockerArchive, 'demo/python:v1')
  await layerctl('push', v2.ociLayout, 'demo/python:v2')
  await layerctl('images')
  await layerctl('inspect', 'demo/python:v2')

  console.log('\n2. Mount v1 lazily and import json, sqlite3 and ssl from a cold cache.')
  const scratch = await mkdtemp(join(tmpdir(), 'layerd-demo-'))
  const mnt = join(scratch, 'python-v1')
  try {
    await layerctl('mount', 'demo/python:v1', mnt)
    const started = performance.now()
    await sh('chroot', [mnt, '/usr/bin/python3', '-c', 'import json, sqlite3, ssl; print("python3 imported json, sqlite3 and ssl")'])
    console.log(`  (${(performance.now() - started).toFixed(0)} ms, including fetching what it read)`)
    await layerctl('stats', mnt)

    console.log('\n3. Run it in the sandbox tiers (each gets its own writable layer).')
    for (const tier of ['process', 'container']) {
      await layerctl('run', '--tier', tier, 'demo/python:v1', '--', 'python3', '-c', `print("hello from the ${tier} tier")`).catch(err => console.log(`  (${tier} tier: ${(err as Error).message})`))
    }

    console.log('\n4. Export v2\'s merged root filesystem (whiteouts applied) as a tar.')
    await layerctl('export', 'demo/python:v2', '-o', join(scratch, 'python-v2.tar'))
  } finally {
    await layerctl('umount', mnt).catch(() => {})
    await rm(scratch, { recursive: true, force: true })
  }
  console.log('\nDone. `layerctl help` lists every command; the README explains the design and the measurements.')
}

main().catch(err => {
  console.error(`demo failed: ${(err as Error).message}`)
  process.exitCode = 1
})
