/**
 * The registry client's pure parts and credential lookup: references as
 * docker reads them, the containers-transports source syntax, challenges,
 * manifests (schema 1 refused), platform selection with attestations
 * skipped, and credentials from --creds, auth files and helpers.
 */
import t from 'tap'
import { chmod, mkdir, writeFile } from 'node:fs/promises'
import { join } from 'node:path'
import { parseSourceSpec } from '../image/sources/source-spec.js'
import { parseChallenge } from './auth.js'
import { findCredentials, parseCreds } from './credentials.js'
import { hostPlatform, parseManifest, parsePlatform, selectPlatform, type ManifestDescriptor } from './manifests.js'
import { formatRegistryReference, parseRegistryReference } from './reference.js'

const D = (n: number): `sha256:${string}` => `sha256:${String(n).repeat(64).slice(0, 64)}`

t.test('parseRegistryReference() reads references as docker does', async t => {
  t.same(parseRegistryReference('python'), { registry: 'docker.io', endpoint: 'registry-1.docker.io', repository: 'library/python', tag: 'latest' })
  t.same(parseRegistryReference('docker.io/user/app:1.2'), { registry: 'docker.io', endpoint: 'registry-1.docker.io', repository: 'user/app', tag: '1.2' })
  t.same(parseRegistryReference('index.docker.io/python:3'), { registry: 'docker.io', endpoint: 'registry-1.docker.io', repository: 'library/python', tag: '3' })
  t.same(parseRegistryReference('localhost:5000/a/b@' + D(1)), { registry: 'localhost:5000', endpoint: 'localhost:5000', repository: 'a/b', digest: D(1) })
  t.same(parseRegistryReference('ghcr.io/o/r:t@' + D(2)), { registry: 'ghcr.io', endpoint: 'ghcr.io', repository: 'o/r', tag: 't', digest: D(2) })
  t.same(parseRegistryReference('user/app').repository, 'user/app', 'a first component without . or : is a Docker Hub namespace')
  t.equal(formatRegistryReference(parseRegistryReference('127.0.0.1:5000/deb/python:v1')), 'docker://127.0.0.1:5000/deb/python:v1')
  for (const bad of ['', 'Upper/case', 'a//b', 'host:5000/x@sha256:abc', 'x:bad tag', 'x:' + 'a'.repeat(129)]) {
    t.throws(() => parseRegistryReference(bad), { code: 'ERR_BAD_INPUT', message: /invalid registry reference/ }, JSON.stringify(bad))
  }
})

t.test('parseSourceSpec() reads the containers-transports syntax', async t => {
  t.equal(parseSourceSpec('docker://h:1/r:t').transport, 'docker')
  t.same(parseSourceSpec('oci:/srv/img'), { transport: 'oci', path: '/srv/img' })
  t.same(parseSourceSpec('oci:/srv/img:v2'), { transport: 'oci', path: '/srv/img', tag: 'v2' })
  t.same(parseSourceSpec('oci-archive:img.tar:latest'), { transport: 'oci-archive', path: 'img.tar', tag: 'latest' })
  t.same(parseSourceSpec('docker-archive:img.tar:deb/python:v1'), { transport: 'docker-archive', path: 'img.tar', ref: 'deb/python:v1' })
  t.same(parseSourceSpec('./some:path.tar'), { transport: 'path', path: './some:path.tar' })
  t.throws(() => parseSourceSpec('oci:'), { code: 'ERR_USAGE' })
  t.throws(() => parseSourceSpec('oci:/x:'), { code: 'ERR_USAGE' })
  t.throws(() => parseSourceSpec('containers-storage:foo'), { code: 'ERR_USAGE', message: /docker:\/\/, oci:, oci-archive:, docker-archive: and paths/ })
})

t.test('parseChallenge() reads Bearer and Basic challenges', async t => {
  t.same(parseChallenge('Bearer realm="https://auth.docker.io/token",service="registry.docker.io",scope="repository:library/python:pull"'),
    { scheme: 'bearer', params: { realm: 'https://auth.docker.io/token', service: 'registry.docker.io', scope: 'repository:library/python:pull' } })
  t.same(parseChallenge('Basic realm="Registry Realm"'), { scheme: 'basic', params: { realm: 'Registry Realm' } })
  t.same(parseChallenge('Bearer realm="x",error="insufficient_scope"')?.params.error, 'insufficient_scope')
  t.equal(parseChallenge(null), undefined)
})

t.test('parseManifest() reads v2s2, OCI and indexes, and refuses schema 1 clearly', async t => {
  const desc = { mediaType: 'application/vnd.oci.image.layer.v1.tar+gzip', digest: D(3), size: 10 }
  const oci = Buffer.from(JSON.stringify({ schemaVersion: 2, mediaType: 'application/vnd.oci.image.manifest.v1+json', config: { ...desc, mediaType: 'application/vnd.oci.image.config.v1+json' }, layers: [desc] }))
  t.equal(parseManifest(oci, 'application/vnd.oci.image.manifest.v1+json', 'm').kind, 'image')
  const v2s2 = Buffer.from(JSON.stringify({ schemaVersion: 2, mediaType: 'application/vnd.docker.distribution.manifest.v2+json', config: desc, layers: [desc] }))
  t.equal(parseManifest(v2s2, 'application/vnd.docker.distribution.manifest.v2+json', 'm').kind, 'image')
  const list = Buffer.from(JSON.stringify({ schemaVersion: 2, mediaType: 'application/vnd.docker.distribution.manifest.list.v2+json', manifests: [desc] }))
  t.equal(parseManifest(list, '', 'm').kind, 'index')
  const s1 = Buffer.from(JSON.stringify({ schemaVersion: 1, fsLayers: [] }))
  t.throws(() => parseManifest(s1, 'application/json', 'manifest X'), { code: 'ERR_UNSUPPORTED', message: /manifest X is a docker schema 1 manifest/ })
  t.throws(() => parseManifest(Buffer.from('{'), '', 'manifest X'), { code: 'ERR_BAD_INPUT', message: /manifest X is not valid JSON/ })
  t.throws(() => parseManifest(Buffer.from(JSON.stringify({ ...JSON.parse(oci.toString()), layers: [{ ...desc, digest: 'md5:x' }] })), '', 'm'), { message: /sha256 digests only/ })
})

t.test('selectPlatform() picks the platform asked for and never an attestation', async t => {
  const e = (n: number, os: string, architecture: string, variant?: string, annotations?: Record<string, string>): ManifestDescriptor =>
    ({ mediaType: 'application/vnd.oci.image.manifest.v1+json', digest: D(n), size: 1, platform: { os, architecture, ...(variant === undefined ? {} : { variant }) }, ...(annotations === undefined ? {} : { annotations }) })
  const entries = [
    e(1, 'linux', 'amd64', undefined, { 'vnd.docker.reference.type': 'attestation-manifest' }),
    e(2, 'unknown', 'unknown'),
    e(3, 'linux', 'arm', 'v6'), e(4, 'linux', 'arm', 'v7'), e(5, 'linux', 'arm64'), e(6, 'linux', 'amd64')
  ]
  t.equal(selectPlatform(entries, { os: 'linux', architecture: 'amd64' }, 'i').digest, D(6), 'the attestation for amd64 is skipped')
  t.equal(selectPlatform(entries, parsePlatform('linux/arm/v7'), 'i').digest, D(4))
  t.equal(selectPlatform(entries, parsePlatform('linux/arm64/v8'), 'i').digest, D(5), 'arm64 without a variant is v8')
  t.throws(() => selectPlatform(entries, parsePlatform('linux/s390x'), 'index I'), { message: 'index I has no image for linux/s390x (it has: linux/arm/v6, linux/arm/v7, linux/arm64, linux/amd64); choose one with --platform' })
  t.same(hostPlatform('x64'), { os: 'linux', architecture: 'amd64' })
  t.throws(() => parsePlatform('amd64'), { code: 'ERR_BAD_INPUT', message: /want os\/arch\[\/variant\]/ })
})

t.test('findCredentials() takes --creds, then the first auth file, with credHelpers and credsStore', async t => {
  const d = t.testdir()
  t.same(parseCreds('u:p:q'), { username: 'u', password: 'p:q', from: '--creds' })
  t.throws(() => parseCreds(':p'), { code: 'ERR_BAD_INPUT' })
  const env = { HOME: join(d, 'home'), DOCKER_CONFIG: join(d, 'docker'), REGISTRY_AUTH_FILE: join(d, 'auth.json'), PATH: `${join(d, 'bin')}:${process.env.PATH ?? ''}` }
  t.equal(await findCredentials('r.example:5000', { env }), undefined, 'no files: none')
  await mkdir(join(d, 'home', '.docker'), { recursive: true })
  await writeFile(join(d, 'home', '.docker', 'config.json'), JSON.stringify({ auths: { 'https://index.docker.io/v1/': { auth: Buffer.from('hub:pw').toString('base64') } } }))
  t.match(await findCredentials('docker.io', { env }), { username: 'hub', password: 'pw' }, "Docker Hub's legacy key in ~/.docker/config.json")
  await mkdir(join(d, 'docker'))
  await writeFile(join(d, 'docker', 'config.json'), JSON.stringify({ auths: { 'https://r.example:5000/v2/': { auth: Buffer.from('dc:pw2').toString('base64') } } }))
  t.match(await findCredentials('r.example:5000', { env }), { username: 'dc', from: join(d, 'docker', 'config.json') }, '$DOCKER_CONFIG wins over ~/.docker, keys with a scheme and path match')
  await mkdir(join(d, 'bin'))
  await writeFile(join(d, 'bin', 'docker-credential-t1'), '#!/bin/sh\nread s\nprintf \'{"Username":"<token>","Secret":"idtok-%s"}\' "$s"\n')
  await writeFile(join(d, 'bin', 'docker-credential-broken'), '#!/bin/sh\necho "helper exploded" >&2; exit 3\n')
  await chmod(join(d, 'bin', 'docker-credential-t1'), 0o755)
  await chmod(join(d, 'bin', 'docker-credential-broken'), 0o755)
  await writeFile(join(d, 'auth.json'), JSON.stringify({ credHelpers: { 'r.example:5000': 't1', 'bad.example': 'broken' }, auths: { 'other.example': { auth: Buffer.from('o:p').toString('base64') } } }))
  t.same(await findCredentials('r.example:5000', { env }), { username: '', password: '', identityToken: 'idtok-r.example:5000', from: 'docker-credential-t1' }, '$REGISTRY_AUTH_FILE first; a helper answering <token> gives an identity token')
  t.match(await findCredentials('other.example', { env }), { username: 'o', password: 'p' })
  await t.rejects(findCredentials('bad.example', { env }), { code: 'ERR_REGISTRY_AUTH', message: /docker-credential-broken failed for bad\.example \(exit 3\): helper exploded/ })
  t.match(await findCredentials('r.example:5000', { env, creds: 'cli:pw' }), { username: 'cli', from: '--creds' }, '--creds wins')
  await writeFile(join(d, 'auth.json'), '{ not json')
  await t.rejects(findCredentials('x', { env }), { code: 'ERR_BAD_INPUT', message: new RegExp(`auth file ${join(d, 'auth.json')} is not valid JSON`) })
})
