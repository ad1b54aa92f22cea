import t from 'tap'
import { constants as osConstants } from 'node:os'
import { FUSE_ERRNOS } from './fuse-errnos.js'

t.test('`FUSE_ERRNOS` holds the platform\'s numbers for the answers both backends give', async t => {
  const { EINVAL, EIO, EISDIR, ENOENT, ENOSYS, ENOTDIR, EROFS } = osConstants.errno
  t.equal(FUSE_ERRNOS.noEntry, ENOENT)
  t.equal(FUSE_ERRNOS.notSymlink, EINVAL)
  t.equal(FUSE_ERRNOS.isDirectory, EISDIR)
  t.equal(FUSE_ERRNOS.notDirectory, ENOTDIR)
  t.equal(FUSE_ERRNOS.readOnly, EROFS)
  t.equal(FUSE_ERRNOS.notImplemented, ENOSYS)
  t.equal(FUSE_ERRNOS.ioError, EIO)
  const known = new Set(Object.values(osConstants.errno))
  for (const [name, value] of Object.entries(FUSE_ERRNOS)) t.ok(known.has(value), `${name} is an errno of os.constants.errno`)
  t.ok(Object.isFrozen(FUSE_ERRNOS), 'nobody changes it at run time')
})
