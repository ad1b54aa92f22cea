/**
 * The FUSE ops table for one mounted image: a read-only filesystem over an
 * ImageView (metadata) and a FileReader (content).
 *
 * Rules every op follows:
 * - The callback is called exactly once, with numbers (0, a byte count, or
 *   a negative errno). The op's work runs inside try/catch and the callback
 *   is called outside it, so a throwing callback cannot cause a second call.
 * - Errors become errno only through the ErrnoBoundary.
 * - Metadata ops answer synchronously from memory; read answers
 *   synchronously on a cache hit and only awaits on a miss.
 * - Every write-type op answers EROFS, and so does open/access for writing.
 * - Nothing is logged on success.
 * - Every op answered in JS costs a round trip through the binding (tens of
 *   µs), while an op left out is answered by libfuse in C. So the table
 *   leaves out what has nothing to decide: opendir/release/releasedir/init
 *   (no state per handle), open on a kernel read-only mount (the VFS has
 *   already refused writes; libfuse still sets keep_cache), and the xattr
 *   ops for an image without xattrs. When open is answered, it returns the
 *   inode number as the file handle, so read needs no path lookup.
 *
 * May import: src/errors.ts, src/format/, ./image-view.ts, ./file-reader.ts,
 * ./errno-boundary.ts, ./fuse-binding.ts (types only).
 */
import { constants as fsConstants } from 'node:fs'
import type { MergedInode } from '../format/merge.js'
import type { ErrnoBoundary } from './errno-boundary.js'
import { FUSE_ERRNOS } from './fuse-errnos.js'
import type { FileReader } from './file-reader.js'
import type { FuseErrCallback, FuseOperations } from './fuse-binding.js'
import type { ImageView } from './image-view.js'

const { noEntry, notSymlink, isDirectory, notDirectory, readOnly } = FUSE_ERRNOS
const { O_WRONLY, O_RDWR, O_TRUNC, O_CREAT, W_OK } = fsConstants
/** Node has no O_ACCMODE; any of these bits asks for writing. */
const OPEN_WRITE_FLAGS = O_WRONLY | O_RDWR | O_TRUNC | O_CREAT

export interface FuseOpsContext {
  view: ImageView
  files: FileReader
  boundary: ErrnoBoundary
  /** The mount is `ro` in the kernel: write opens never reach the ops. */
  kernelReadOnly: boolean
}

/**
 * The errno for a read whose fetch failed, logged with the chunks it was
 * waiting for. Shared by both backends' read paths. Never throws.
 */
export function fetchFailureErrno (files: FileReader, boundary: ErrnoBoundary, err: unknown, inode: MergedInode, position: number, length: number, path: string): number {
  let detail: string | undefined
  try { detail = `chunks ${files.missingChunks(inode, position, length).join(', ')}` } catch { detail = undefined }
  return boundary.errno(err, 'read', path, detail)
}

/** Build the ops table (see the module doc for what it leaves out). Sync; the table holds no state of its own. */
export function createFuseOps (context: FuseOpsContext): FuseOperations {
  const ops = createAllOps(context)
  delete ops.init
  delete ops.opendir
  delete ops.release
  delete ops.releasedir
  if (context.kernelReadOnly) delete ops.open
  if (!context.view.hasXattrs) {
    delete ops.getxattr
    delete ops.listxattr
  }
  return ops
}

/** Every op layerd can answer; createFuseOps() picks the ones worth a round trip. */
function createAllOps ({ view, files, boundary }: FuseOpsContext): FuseOperations {
  const refuse = (cb: FuseErrCallback): void => cb(-readOnly)

  /** The inode behind a file handle from open(), else by path. */
  const inodeFor = (path: string, fd: number): MergedInode | undefined =>
    (fd !== 0 ? view.inode(fd) : undefined) ?? view.nodeAt(path)?.inode

  return {
    init (cb) { cb(0) },

    getattr (path, cb) {
      let result: number
      let stat
      try {
        const node = view.nodeAt(path)
        if (node === undefined) result = -noEntry
        else { stat = view.getattr(node.inode); result = 0 }
      } catch (err) { result = boundary.errno(err, 'getattr', path) }
      cb(result, stat)
    },

    readdir (path, cb) {
      let result: number
      let listing
      try {
        const node = view.nodeAt(path)
        if (node === undefined) result = -noEntry
        else {
          listing = view.readdir(node.inode.ino)
          result = listing === undefined ? -notDirectory : 0
        }
      } catch (err) { result = boundary.errno(err, 'readdir', path) }
      cb(result, listing?.names, listing?.stats)
    },

    readlink (path, cb) {
      let result: number
      let target
      try {
        const node = view.nodeAt(path)
        if (node === undefined) result = -noEntry
        else {
          target = view.readlink(node.inode)
          result = target === undefined ? -notSymlink : 0
        }
      } catch (err) { result = boundary.errno(err, 'readlink', path) }
      cb(result, target)
    },

    access (path, mode, cb) {
      let result: number
      try {
        if (view.nodeAt(path) === undefined) result = -noEntry
        else result = (mode & W_OK) !== 0 ? -readOnly : 0
      } catch (err) { result = boundary.errno(err, 'access', path) }
      cb(result)
    },

    statfs (path, cb) {
      cb(0, view.statfs())
    },

    open (path, flags, cb) {
      let result: number
      let fh = 0
      try {
        const node = view.nodeAt(path)
        if (node === undefined) result = -noEntry
        else if ((flags & OPEN_WRITE_FLAGS) !== 0) result = -readOnly
        else if (node.children !== undefined) result = -isDirectory
        else { fh = node.inode.ino; result = 0 }
      } catch (err) { result = boundary.errno(err, 'open', path) }
      cb(result, fh)
    },

    opendir (path, flags, cb) {
      let result: number
      let fh = 0
      try {
        const node = view.nodeAt(path)
        if (node === undefined) result = -noEntry
        else if (node.children === undefined) result = -notDirectory
        else { fh = node.inode.ino; result = 0 }
      } catch (err) { result = boundary.errno(err, 'opendir', path) }
      cb(result, fh)
    },

    read (path, fd, buf, length, position, cb) {
      let inode: MergedInode | undefined
      let result: number | Promise<number>
      try {
        inode = inodeFor(path, fd)
        if (inode === undefined) result = -noEntry
        else if (inode.entry.type === 'dir') result = -isDirectory
        else result = files.read(inode, position, length, buf)
      } catch (err) { result = boundary.errno(err, 'read', path) }
      if (typeof result === 'number') return cb(result)
      const reading = inode!
      result.then(cb, (err: unknown) => cb(fetchFailureErrno(files, boundary, err, reading, position, length, path)))
    },

    release (path, fd, cb) { cb(0) },
    releasedir (path, fd, cb) { cb(0) },

    getxattr (path, name, position, cb) {
      let result: number
      let value
      try {
        const node = view.nodeAt(path)
        if (node === undefined) result = -noEntry
        else { value = view.getxattr(node.inode, name); result = 0 }
      } catch (err) { result = boundary.errno(err, 'getxattr', path) }
      cb(result, value)
    },

    listxattr (path, cb) {
      let result: number
      let names
      try {
        const node = view.nodeAt(path)
        if (node === undefined) result = -noEntry
        else { names = view.listxattr(node.inode); result = 0 }
      } catch (err) { result = boundary.errno(err, 'listxattr', path) }
      cb(result, names)
    },

    write (path, fd, buf, length, position, cb) { cb(-readOnly) },
    create (path, mode, cb) { cb(-readOnly, 0) },
    truncate (path, size, cb) { refuse(cb) },
    ftruncate (path, fd, size, cb) { refuse(cb) },
    unlink (path, cb) { refuse(cb) },
    rename (src, dest, cb) { refuse(cb) },
    link (src, dest, cb) { refuse(cb) },
    symlink (target, path, cb) { refuse(cb) },
    mkdir (path, mode, cb) { refuse(cb) },
    rmdir (path, cb) { refuse(cb) },
    chmod (path, mode, cb) { refuse(cb) },
    chown (path, uid, gid, cb) { refuse(cb) },
    utimens (path, atime, mtime, cb) { refuse(cb) },
    mknod (path, mode, dev, cb) { refuse(cb) },
    setxattr (path, name, value, position, flags, cb) { refuse(cb) },
    removexattr (path, name, cb) { refuse(cb) }
  }
}
