import t from 'tap'
import { join } from 'node:path'
import { readFileSync } from 'node:fs'
import { StateTooNewError } from '../errors.js'
import { VERSION_0_ROWS, writeVersion0Db } from '../../fixtures/node-state-v0.js'
import { openMemoryNodeDb, openNodeDb, openSqlite } from './node-db.js'
import { MIGRATIONS, SCHEMA_VERSION, migrate, schemaVersion } from './schema.js'
import { ChunkIndexTable } from './chunk-index-table.js'
import { MountTable } from './mount-table.js'
import { AccessTraceTable } from './access-trace-table.js'
import { SandboxTable } from './sandbox-table.js'

const r = VERSION_0_ROWS

t.test('openNodeDb() migrates a home written before schema versions (version 0) and keeps its rows', async t => {
  const home = t.testdir()
  writeVersion0Db(join(home, 'state.db'))
  const db = openNodeDb(home)
  t.teardown(() => db.close())
  t.equal(schemaVersion(db), SCHEMA_VERSION)
  t.same(new ChunkIndexTable(db, r.chunk.store).lookup(r.chunk.digest), { blob: r.chunk.blob, offset: 4096, compressedLength: 100, length: 300 })
  t.ok(new ChunkIndexTable(db, r.chunk.store).isSynced(r.chunk.blob))
  t.same(new MountTable(db).list(), [{ mountpoint: '/mnt/py', image: 'deb/python:v1', manifest: r.mount.manifest, store: 'file:///srv/store', mountedAt: r.mount.mounted_at }])
  t.same(new AccessTraceTable(db).load(r.mount.manifest).map(c => [c.digest[0], c.offset, c.compressedLength, c.length]), [['d', 0, 10, 20], ['e', 10, 11, 21]])
  t.same(new SandboxTable(db).list(), [{ id: 'sb-0', tier: 'process', image: 'deb/python:v1', manifest: r.mount.manifest, stateDir: r.sandbox.state_dir, createdAt: r.sandbox.created_at, ownerPid: 1, keep: true }])
})

t.test('openNodeDb() migrates a version-0 home that holds only some tables (a node that only pushed)', async t => {
  const home = t.testdir()
  writeVersion0Db(join(home, 'state.db'), ['chunkIndex'])
  const db = openNodeDb(home)
  t.teardown(() => db.close())
  t.equal(schemaVersion(db), SCHEMA_VERSION)
  t.ok(new ChunkIndexTable(db, r.chunk.store).lookup(r.chunk.digest))
  new SandboxTable(db).add({ id: 'sb-1', tier: 'container', image: 'i', manifest: 'm', stateDir: '/s', createdAt: 'now', ownerPid: 2, keep: false })
  t.equal(new SandboxTable(db).find('sb-1')?.tier, 'container', 'the tables it lacked were created')
  t.same(new MountTable(db).list(), [])
})

t.test('openNodeDb() refuses a home written by a newer build, naming the file and both versions, and leaves it as it was', async t => {
  const home = t.testdir()
  const file = join(home, 'state.db')
  writeVersion0Db(file)
  const raw = openSqlite(file)
  raw.pragma(`user_version = ${SCHEMA_VERSION + 1}`)
  raw.close()
  const before = readFileSync(file)
  t.throws(() => openNodeDb(home), {
    constructor: StateTooNewError,
    code: 'ERR_STATE_TOO_NEW',
    message: `cannot open the node state ${file}: it was written by a newer layerd (schema version ${SCHEMA_VERSION + 1}; this build knows versions up to ${SCHEMA_VERSION}). Run that build, or move the home aside: node state is rebuildable`
  })
  t.same(readFileSync(file), before)
  const check = openSqlite(file, { readonly: true })
  t.equal(schemaVersion(check), SCHEMA_VERSION + 1)
  check.close()
})

t.test('openNodeDb() twice on one home migrates once; a fresh home starts at this version', async t => {
  const home = t.testdir()
  const a = openNodeDb(home)
  const b = openNodeDb(home)
  t.teardown(() => { a.close(); b.close() })
  t.equal(schemaVersion(a), SCHEMA_VERSION)
  t.equal(migrate(b, 'b'), SCHEMA_VERSION, 'nothing left to apply')
  t.equal(schemaVersion(openMemoryNodeDb()), SCHEMA_VERSION)
})

t.test('migrate() applies only the missing migrations, and a failing one rolls back whole', async t => {
  const db = openSqlite(':memory:')
  const applied: number[] = []
  const steps = [0, 1, 2].map(i => ({ description: `step ${i}`, up: () => { applied.push(i) } }))
  t.equal(migrate(db, 'test', steps.slice(0, 1)), 0)
  t.equal(migrate(db, 'test', steps), 1)
  t.same(applied, [0, 1, 2])
  const failing = [...steps, { description: 'adds t, then fails', up: (d: typeof db) => { d.exec('CREATE TABLE t (x)'); throw new Error('boom') } }]
  t.throws(() => migrate(db, 'test', failing), { message: 'boom' })
  t.equal(schemaVersion(db), 3)
  t.equal(db.prepare("SELECT count(*) FROM sqlite_master WHERE name = 't'").pluck().get(), 0)
})

t.test('MIGRATIONS: the first one is the version-0 schema, so every table of that schema exists after it', async t => {
  const db = openSqlite(':memory:')
  migrate(db, 'test', MIGRATIONS.slice(0, 1))
  const tables = db.prepare("SELECT name FROM sqlite_master WHERE type = 'table' ORDER BY name").pluck().all()
  t.same(tables, ['access_traces', 'chunk_index', 'mounts', 'sandboxes', 'synced_blob_index'])
  t.ok(MIGRATIONS.every(m => m.description.length > 0))
})

t.test('repository classes: rows round-trip', async t => {
  const db = openMemoryNodeDb()
  const index = new ChunkIndexTable(db, 'file:///a')
  t.ok(index.isEmpty())
  index.addBlob('b1', [{ digest: 'x', offset: 0, compressedLength: 5, length: 9 }])
  t.same(index.lookup('x'), { blob: 'b1', offset: 0, compressedLength: 5, length: 9 })
  t.equal(new ChunkIndexTable(db, 'file:///other').lookup('x'), undefined, 'scoped by store')
  const mounts = new MountTable(db)
  mounts.put({ mountpoint: '/m', image: 'i', manifest: 'm', store: 's3://b', s3Endpoint: 'http://127.0.0.1:1', mountedAt: 't' })
  t.same(mounts.list(), [{ mountpoint: '/m', image: 'i', manifest: 'm', store: 's3://b', s3Endpoint: 'http://127.0.0.1:1', mountedAt: 't' }])
  mounts.remove('/m')
  t.same(mounts.list(), [])
  const sandboxes = new SandboxTable(db)
  sandboxes.add({ id: 's', tier: 'vm', image: 'i', manifest: 'm', stateDir: '/d', createdAt: 't', ownerPid: 3, keep: false })
  sandboxes.setKeep('s', true)
  t.equal(sandboxes.find('s')?.keep, true)
  sandboxes.remove('s')
  t.equal(sandboxes.find('s'), undefined)
})
