/**
 * Attack 9: hostile image content. An image made of the python fixture's
 * layers plus one hostile layer:
 *
 * - setuid-root and setgid-root copies of `id`, and a copy of `cat` with
 *   file capabilities (security.capability: cap_dac_override and
 *   cap_dac_read_search, effective);
 * - device nodes: /dev/mem (1:1), /dev/kmsg (1:11) and the host's own root
 *   disk (its major:minor), world read-writable;
 * - a symlink /opt/escape → /tmp/layerd-attack-escape-<tag> (absolute) used
 *   by the config's WorkingDir, so a host-side mkdir that followed it
 *   would create a directory on the host;
 *
 * and a config that "asks for privileges": User 0, a podman-style
 * `io.containers.capabilities` label asking for CAP_SYS_ADMIN,
 * CAP_SYS_MODULE and CAP_NET_ADMIN, a `layerd.privileged` label, a volume
 * and an exposed port.
 *
 * Policy (README): the image is stored faithfully (modes, xattrs, devices
 * kept, as the tree-compare tests require), and its content is inert in the
 * process and container tiers: the overlay is mounted nosuid,nodev, every
 * exec has no_new_privs, the container's device cgroup allows no extra
 * device, and nothing in an image config grants a privilege (User 0 is
 * root without capabilities, or with the container tier's fixed reduced
 * set; labels, volumes and ports are ignored). In the VM tiers the guest
 * kernel is the boundary: setuid and devices act inside the guest only.
 *
 * May import: ./attack-harness.ts, src/, fixtures/, node built-ins.
 */
import { createHash } from 'node:crypto'
import { copyFile, link, mkdir, readFile, stat, writeFile } from 'node:fs/promises'
import { join } from 'node:path'
import { gzipSync } from 'node:zlib'
import { ensureDebianImages } from '../../fixtures/debian-images.js'
import { blockDevice, buildLayerTar, charDevice, dir, file, symlink } from '../../fixtures/layer-dsl.js'
import { parseRef } from '../format/ref.js'
import { pushImage } from '../image/push.js'
import { openMemoryNodeDb } from '../state/node-db.js'
import { openStore } from '../store/open-store.js'

export const HOSTILE_IMAGE = 'hostile/python:v1'
/** cap_dac_override | cap_dac_read_search, permitted and effective (VFS_CAP_REVISION_2). */
export const CAP_XATTR = Buffer.from('0100000206000000000000000000000000000000', 'hex')
export const ASKED_CAPABILITIES = ['CAP_SYS_ADMIN', 'CAP_SYS_MODULE', 'CAP_NET_ADMIN']

export interface HostileImage {
  ref: string
  /** The host path the WorkingDir symlink points at; it must never be created. */
  escapeTarget: string
  /** The host's root disk, which the image carries a device node of. */
  hostDisk: { major: number, minor: number }
}

interface OciDescriptor { mediaType: string, digest: string, size: number }
interface OciConfigDoc { config: Record<string, unknown>, rootfs: { type: string, diff_ids: string[] }, history?: unknown[], [k: string]: unknown }

const sha256 = (b: Uint8Array): string => `sha256:${createHash('sha256').update(b).digest('hex')}`

/** The python fixture's OCI layout: where it is, its config and its layer descriptors. Async. */
async function pythonLayout (): Promise<{ dir: string, config: OciConfigDoc, layers: OciDescriptor[] }> {
  const dir = (await ensureDebianImages()).images['python-v1'].ociLayout
  const blob = (d: string): string => join(dir, 'blobs', 'sha256', d.slice('sha256:'.length))
  const index = JSON.parse(await readFile(join(dir, 'index.json'), 'utf8')) as { manifests: OciDescriptor[] }
  const manifest = JSON.parse(await readFile(blob(index.manifests[0]!.digest), 'utf8')) as { config: OciDescriptor, layers: OciDescriptor[] }
  return { dir, config: JSON.parse(await readFile(blob(manifest.config.digest), 'utf8')) as OciConfigDoc, layers: manifest.layers }
}

/** The host's root file system device, as major:minor. Async. */
async function hostRootDisk (): Promise<{ major: number, minor: number }> {
  const dev = (await stat('/')).dev
  return { major: (dev >> 8) & 0xfff, minor: (dev & 0xff) | ((dev >> 12) & 0xfff00) }
}

/**
 * Write the hostile image as an OCI layout in `layoutDir` (the python
 * fixture's layers linked in, the hostile layer on top) and push it into the
 * store at `storeDir`, where the python layers deduplicate. Async.
 */
export async function pushHostileImage (layoutDir: string, storeDir: string, tag: string): Promise<HostileImage> {
  const rootfs = (await ensureDebianImages()).images['python-v1'].rootfs
  const escapeTarget = `/tmp/layerd-attack-escape-${tag}`
  const hostDisk = await hostRootDisk()
  const id = await readFile(join(rootfs, 'usr/bin/id'))
  const cat = await readFile(join(rootfs, 'usr/bin/cat'))
  const tar = buildLayerTar([
    dir('opt/'),
    dir('opt/hostile/'),
    file('opt/hostile/suid-id', id, { mode: 0o4755 }),
    file('opt/hostile/sgid-id', id, { mode: 0o2755 }),
    file('opt/hostile/cap-cat', cat, { mode: 0o755, xattrs: { 'security.capability': CAP_XATTR } }),
    charDevice('opt/hostile/mem', 1, 1, { mode: 0o666 }),
    charDevice('opt/hostile/kmsg', 1, 11, { mode: 0o666 }),
    blockDevice('opt/hostile/disk', hostDisk.major, hostDisk.minor, { mode: 0o666 }),
    symlink('opt/escape', escapeTarget)
  ])
  const base = await pythonLayout()
  const blobs = join(layoutDir, 'blobs', 'sha256')
  await mkdir(blobs, { recursive: true })
  const put = async (bytes: Uint8Array, mediaType: string): Promise<OciDescriptor> => {
    const digest = sha256(bytes)
    await writeFile(join(blobs, digest.slice(7)), bytes)
    return { mediaType, digest, size: bytes.length }
  }
  for (const l of base.layers) {
    const from = join(base.dir, 'blobs', 'sha256', l.digest.slice(7))
    await link(from, join(blobs, l.digest.slice(7))).catch(async () => { await copyFile(from, join(blobs, l.digest.slice(7))) })
  }
  const layer = await put(gzipSync(tar), 'application/vnd.oci.image.layer.v1.tar+gzip')
  const configDoc: OciConfigDoc = {
    ...base.config,
    config: {
      ...base.config.config,
      User: '0',
      WorkingDir: '/opt/escape/work',
      Labels: { 'io.containers.capabilities': ASKED_CAPABILITIES.join(','), 'layerd.privileged': 'true' },
      Volumes: { '/host': {} },
      ExposedPorts: { '22/tcp': {} }
    },
    rootfs: { type: 'layers', diff_ids: [...base.config.rootfs.diff_ids, sha256(tar)] },
    history: [...(base.config.history ?? []), { created_by: 'layerd attack suite: hostile layer' }]
  }
  const config = await put(Buffer.from(JSON.stringify(configDoc)), 'application/vnd.oci.image.config.v1+json')
  const manifest = await put(Buffer.from(JSON.stringify({ schemaVersion: 2, mediaType: 'application/vnd.oci.image.manifest.v1+json', config, layers: [...base.layers, layer] })), 'application/vnd.oci.image.manifest.v1+json')
  await writeFile(join(layoutDir, 'oci-layout'), JSON.stringify({ imageLayoutVersion: '1.0.0' }))
  await writeFile(join(layoutDir, 'index.json'), JSON.stringify({ schemaVersion: 2, manifests: [{ ...manifest, annotations: { 'org.opencontainers.image.ref.name': 'latest' } }] }))
  const store = openStore(`file://${storeDir}`)
  try {
    await pushImage(layoutDir, parseRef(HOSTILE_IMAGE), { store, db: openMemoryNodeDb() })
  } finally {
    await store.close()
  }
  return { ref: HOSTILE_IMAGE, escapeTarget, hostDisk }
}
