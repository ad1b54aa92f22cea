// A read-only FUSE server that speaks the kernel protocol (/dev/fuse)
// itself, for layerd's image mounts. Why it exists (src/fs/README.md):
// through fuse-native (libfuse 2, high-level API) every lookup, getattr,
// readdir and read costs two thread hand-offs into the JS event loop, and
// libfuse 2 cannot ask the kernel to cache directory listings or to skip
// OPEN. Here every metadata op is answered in C, on the server's own
// threads, from an immutable table that JS builds once per mount
// (src/fs/kernel-fuse-table.ts documents the format); the kernel is told
// to skip OPEN/OPENDIR (so files keep their page cache and listings are
// cached), to use READDIRPLUS, and to send reads of up to max_pages. Only
// READ goes to JS (chunks come from the cache or the store), as one
// hand-off: JS writes the reply to /dev/fuse itself.
//
// Interface (see src/fs/kernel-fuse.ts):
//   fuseServerMount(mountpoint, fsName, mountFlags, options, table, onEvent) -> server
//     onEvent(kind, unique, nodeid, offset, size): kind 1 = INIT answered,
//     2 = READ request, 3 = the connection ended (unmounted, aborted).
//     `unique` is a BigInt: a request the kernel resends carries bit 63.
//   fuseServerAttach(fd, options, table, init, onEvent) -> server
//     takeover: serve a connection another process mounted and INITed (its
//     /dev/fuse fd came from the holder, src/holder/), then ask the kernel
//     to resend what that process had read but not answered.
//   fuseServerInit(server) -> the INIT negotiation, to save for a takeover
//   fuseServerFd(server) -> the /dev/fuse fd, to hand to the holder
//   fuseServerReply(server, unique, buffer, length)   READ data
//   fuseServerReplyError(server, unique, errno)       READ failed (errno > 0)
//   fuseServerCounters(server) -> { requests, reads, ... }
//   fuseServerInvalidate(server, nodeids: Uint32Array) -> Promise<number>
//     FUSE_NOTIFY_INVAL_INODE for each node: the kernel drops its cached
//     pages (proactive reclaim, src/daemon/memory-reclaimer.ts). Written on a
//     libuv worker, never on the JS thread: the kernel waits for pages under
//     read, whose READ replies come from the JS thread.
#define _GNU_SOURCE
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <linux/fuse.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <sys/uio.h>
#include <unistd.h>
#include <node_api.h>
#include "fuse_passthrough.h"

#define TABLE_MAGIC 0x5446444cu  // "LDFT"
#define TABLE_VERSION 1
#define SERVER_THREADS 2
#define READ_BUFFER_BYTES (1024 * 1024 + 8192)
#define EVENT_INIT 1
#define EVENT_READ 2
#define EVENT_CLOSED 3
// enum fuse_notify_code in protocol 7.40 (Linux 6.9); this machine's <linux/fuse.h> is 7.38.
#define NOTIFY_RESEND 7
// FUSE_HAS_RESEND (1ULL << 39, protocol 7.40): the kernel's INIT says it can resend; bit 7 of flags2.
#define INIT_HAS_RESEND_FLAGS2 (1u << 7)
#define INIT_EXT (1u << 30)

// The table (little-endian, written by kernel-fuse-table.ts).
typedef struct {
  uint32_t magic, version, node_count, dirent_count, xattr_count, strings_bytes, flags, pad;
  uint64_t statfs_blocks, statfs_files;
} table_header;

typedef struct {
  uint64_t ino, size, blocks;
  int64_t mtime;
  uint32_t mode, nlink, uid, gid, rdev, parent, first, count, xattr_first, xattr_count;
} table_node;  // 72 bytes

typedef struct {
  uint32_t nodeid, name_offset;
  uint16_t name_len;
  uint8_t dtype, pad;
} table_dirent;  // 12 bytes

typedef struct {
  uint32_t name_offset, name_len, value_offset, value_len;
} table_xattr;

#define TABLE_HAS_XATTRS 1u

// The errno of each answer, as JS gives it (src/fs/fuse-errnos.ts, the `errnos` option): one table for both backends.
typedef struct {
  int no_entry, not_symlink, is_directory, not_directory, read_only, not_implemented, bad_request, no_attribute,
      buffer_too_small, no_memory, io_error, old_protocol;
} fuse_errnos;

typedef struct {
  uint64_t entry_valid_s, attr_valid_s, negative_valid_s;
  uint32_t max_pages, max_readahead;
  uint32_t passthrough;  // offer FUSE_PASSTHROUGH in INIT (then OPEN is answered, see fuse_passthrough.h)
  fuse_errnos err;
} server_options;

typedef struct server {
  int fd;
  char *table_bytes;
  const table_header *h;
  const table_node *nodes;
  const table_dirent *dirents;
  const table_xattr *xattrs;
  const char *strings;
  server_options opt;
  // The INIT negotiation (the kernel's request, our answer): saved for a takeover, which answers no new INIT.
  uint32_t kernel_major, kernel_minor, kernel_flags, kernel_flags2, reply_flags;
  int resend_errno;  // after a takeover: 0, or why FUSE_NOTIFY_RESEND failed
  napi_threadsafe_function events;
  pthread_t threads[SERVER_THREADS];
  atomic_int running_threads;
  atomic_int closed_sent;
  atomic_uint_fast64_t requests, reads, lookups, readdirs, opens, replies_failed, passthrough_opens;
  // Set when INIT settled passthrough (or, after a takeover, when the kept negotiation did).
  int passthrough;
  backing_table backing;
} server;

typedef struct {
  int kind;
  uint64_t unique, nodeid, offset;
  uint32_t size;
} event;

// ---- table --------------------------------------------------------------

static const char *table_check(server *s, size_t len) {
  if (len < sizeof(table_header)) return "table shorter than its header";
  const table_header *h = (const table_header *)s->table_bytes;
  if (h->magic != TABLE_MAGIC || h->version != TABLE_VERSION) return "table magic or version mismatch";
  uint64_t need = sizeof(table_header) + (uint64_t)(h->node_count + 1) * sizeof(table_node) +
                  (uint64_t)h->dirent_count * sizeof(table_dirent) + (uint64_t)h->xattr_count * sizeof(table_xattr) + h->strings_bytes;
  if (need != len) return "table length does not match its header";
  if (h->node_count < 1) return "table has no root";
  s->h = h;
  s->nodes = (const table_node *)(s->table_bytes + sizeof(table_header));
  s->dirents = (const table_dirent *)(s->nodes + h->node_count + 1);
  s->xattrs = (const table_xattr *)(s->dirents + h->dirent_count);
  s->strings = (const char *)(s->xattrs + h->xattr_count);
  for (uint32_t i = 1; i <= h->node_count; i++) {
    const table_node *n = &s->nodes[i];
    if ((n->mode & S_IFMT) == S_IFDIR) {
      if ((uint64_t)n->first + n->count > h->dirent_count || n->parent < 1 || n->parent > h->node_count) return "directory entries out of range";
    } else if ((n->mode & S_IFMT) == S_IFLNK) {
      if ((uint64_t)n->first + n->count > h->strings_bytes) return "symlink target out of range";
    }
    if ((uint64_t)n->xattr_first + n->xattr_count > h->xattr_count) return "xattrs out of range";
  }
  for (uint32_t i = 0; i < h->dirent_count; i++) {
    const table_dirent *d = &s->dirents[i];
    if (d->nodeid < 1 || d->nodeid > h->node_count || (uint64_t)d->name_offset + d->name_len > h->strings_bytes) return "directory entry out of range";
  }
  for (uint32_t i = 0; i < h->xattr_count; i++) {
    const table_xattr *x = &s->xattrs[i];
    if ((uint64_t)x->name_offset + x->name_len > h->strings_bytes || (uint64_t)x->value_offset + x->value_len > h->strings_bytes) return "xattr out of range";
  }
  return NULL;
}

static const table_node *node_of(server *s, uint64_t nodeid) {
  return nodeid >= 1 && nodeid <= s->h->node_count ? &s->nodes[nodeid] : NULL;
}

// Byte order, shorter first on a common prefix: the order JS sorts names in (Buffer.compare).
static int name_cmp(const char *a, size_t alen, const char *b, size_t blen) {
  int c = memcmp(a, b, alen < blen ? alen : blen);
  if (c != 0) return c;
  return alen < blen ? -1 : alen > blen ? 1 : 0;
}

static const table_dirent *dir_find(server *s, const table_node *dir, const char *name, size_t len) {
  uint32_t lo = dir->first, hi = dir->first + dir->count;
  while (lo < hi) {
    uint32_t mid = lo + (hi - lo) / 2;
    const table_dirent *d = &s->dirents[mid];
    int c = name_cmp(s->strings + d->name_offset, d->name_len, name, len);
    if (c == 0) return d;
    if (c < 0) lo = mid + 1; else hi = mid;
  }
  return NULL;
}

static void fill_attr(const table_node *n, struct fuse_attr *a) {
  memset(a, 0, sizeof *a);
  a->ino = n->ino;
  a->size = n->size;
  a->blocks = n->blocks;
  a->atime = a->mtime = a->ctime = (uint64_t)n->mtime;
  a->mode = n->mode;
  a->nlink = n->nlink;
  a->uid = n->uid;
  a->gid = n->gid;
  a->rdev = n->rdev;
  a->blksize = 4096;
}

static void fill_entry(server *s, uint64_t nodeid, const table_node *n, struct fuse_entry_out *e) {
  memset(e, 0, sizeof *e);
  e->nodeid = nodeid;
  e->entry_valid = s->opt.entry_valid_s;
  e->attr_valid = s->opt.attr_valid_s;
  fill_attr(n, &e->attr);
}

// ---- replies ------------------------------------------------------------

static void reply_iov(server *s, uint64_t unique, int error, struct iovec *iov, int count) {
  struct fuse_out_header out = { .len = sizeof out, .error = error, .unique = unique };
  struct iovec all[4];
  all[0].iov_base = &out;
  all[0].iov_len = sizeof out;
  for (int i = 0; i < count && i < 3; i++) { all[i + 1] = iov[i]; out.len += iov[i].iov_len; }
  if (writev(s->fd, all, count + 1) < 0) {
    // ENOENT: the request was interrupted meanwhile. Anything else: the connection is going away.
    atomic_fetch_add(&s->replies_failed, 1);
  }
}

static void reply_err(server *s, uint64_t unique, int err) { reply_iov(s, unique, -err, NULL, 0); }

static void reply_data(server *s, uint64_t unique, const void *data, size_t len) {
  struct iovec iov = { .iov_base = (void *)data, .iov_len = len };
  reply_iov(s, unique, 0, &iov, len > 0 ? 1 : 0);
}

// ---- ops ----------------------------------------------------------------

static void post_event(server *s, int kind, uint64_t unique, uint64_t nodeid, uint64_t offset, uint32_t size) {
  event *ev = malloc(sizeof *ev);
  if (ev == NULL) { if (kind == EVENT_READ) reply_err(s, unique, s->opt.err.no_memory); return; }
  *ev = (event){ .kind = kind, .unique = unique, .nodeid = nodeid, .offset = offset, .size = size };
  if (napi_call_threadsafe_function(s->events, ev, napi_tsfn_nonblocking) != napi_ok) {
    free(ev);
    if (kind == EVENT_READ) reply_err(s, unique, s->opt.err.io_error);
  }
}

static void op_init(server *s, struct fuse_in_header *in, const struct fuse_init_in *arg) {
  struct fuse_init_out out;
  memset(&out, 0, sizeof out);
  out.major = FUSE_KERNEL_VERSION;
  out.minor = FUSE_KERNEL_MINOR_VERSION;
  if (arg->major < 7 || (arg->major == 7 && arg->minor < 31)) { reply_err(s, in->unique, s->opt.err.old_protocol); return; }
  if (arg->major > 7) { reply_data(s, in->unique, &out, sizeof out); return; }  // the kernel answers with a new INIT
  uint32_t want = FUSE_ASYNC_READ | FUSE_DO_READDIRPLUS | FUSE_PARALLEL_DIROPS | FUSE_MAX_PAGES |
                  FUSE_CACHE_SYMLINKS | FUSE_NO_OPEN_SUPPORT | FUSE_NO_OPENDIR_SUPPORT;
  out.flags = arg->flags & want;
  out.max_readahead = arg->max_readahead < s->opt.max_readahead ? arg->max_readahead : s->opt.max_readahead;
  out.max_background = 64;
  out.congestion_threshold = 48;
  out.max_write = 4096;
  out.time_gran = 1000000000;  // whole seconds
  out.max_pages = (uint16_t)s->opt.max_pages;
  s->kernel_major = arg->major;
  s->kernel_minor = arg->minor;
  s->kernel_flags = arg->flags;
  s->kernel_flags2 = (arg->flags & INIT_EXT) != 0 ? arg->flags2 : 0;
  if (s->opt.passthrough && (arg->flags & INIT_EXT) != 0 && (arg->flags2 & INIT_PASSTHROUGH_FLAGS2) != 0 &&
      backing_table_init(&s->backing, s->fd, s->h->node_count) == 0) {
    out.flags |= INIT_EXT;
    out.flags2 = INIT_PASSTHROUGH_FLAGS2;
    out.unused[0] = PASSTHROUGH_STACK_DEPTH;  // max_stack_depth in protocol 7.40
    s->passthrough = 1;
  }
  s->reply_flags = out.flags;
  s->opt.max_readahead = out.max_readahead;
  reply_data(s, in->unique, &out, sizeof out);
  post_event(s, EVENT_INIT, 0, 0, 0, 0);
}

static void op_lookup(server *s, struct fuse_in_header *in, const char *name, size_t avail) {
  atomic_fetch_add(&s->lookups, 1);
  const table_node *dir = node_of(s, in->nodeid);
  size_t len = strnlen(name, avail);
  if (dir == NULL) { reply_err(s, in->unique, s->opt.err.no_entry); return; }
  if ((dir->mode & S_IFMT) != S_IFDIR) { reply_err(s, in->unique, s->opt.err.not_directory); return; }
  struct fuse_entry_out e;
  const table_dirent *d = len == avail ? NULL : dir_find(s, dir, name, len);
  if (d == NULL) {
    // A negative entry the kernel may cache: nodeid 0.
    memset(&e, 0, sizeof e);
    e.entry_valid = s->opt.negative_valid_s;
    if (s->opt.negative_valid_s == 0) { reply_err(s, in->unique, s->opt.err.no_entry); return; }
    reply_data(s, in->unique, &e, sizeof e);
    return;
  }
  fill_entry(s, d->nodeid, &s->nodes[d->nodeid], &e);
  reply_data(s, in->unique, &e, sizeof e);
}

static void op_getattr(server *s, struct fuse_in_header *in) {
  const table_node *n = node_of(s, in->nodeid);
  if (n == NULL) { reply_err(s, in->unique, s->opt.err.no_entry); return; }
  struct fuse_attr_out out;
  memset(&out, 0, sizeof out);
  out.attr_valid = s->opt.attr_valid_s;
  fill_attr(n, &out.attr);
  reply_data(s, in->unique, &out, sizeof out);
}

static void op_readlink(server *s, struct fuse_in_header *in) {
  const table_node *n = node_of(s, in->nodeid);
  if (n == NULL) { reply_err(s, in->unique, s->opt.err.no_entry); return; }
  if ((n->mode & S_IFMT) != S_IFLNK) { reply_err(s, in->unique, s->opt.err.not_symlink); return; }
  reply_data(s, in->unique, s->strings + n->first, n->count);
}

// READDIR and READDIRPLUS: offset 0 is ".", 1 is "..", k + 2 the k-th child; each entry's off is the next one's.
static void op_readdir(server *s, struct fuse_in_header *in, const struct fuse_read_in *arg, int plus) {
  atomic_fetch_add(&s->readdirs, 1);
  const table_node *dir = node_of(s, in->nodeid);
  if (dir == NULL) { reply_err(s, in->unique, s->opt.err.no_entry); return; }
  if ((dir->mode & S_IFMT) != S_IFDIR) { reply_err(s, in->unique, s->opt.err.not_directory); return; }
  size_t cap = arg->size < READ_BUFFER_BYTES ? arg->size : READ_BUFFER_BYTES;
  char *out = malloc(cap > 0 ? cap : 1);
  if (out == NULL) { reply_err(s, in->unique, s->opt.err.no_memory); return; }
  size_t used = 0;
  uint64_t total = (uint64_t)dir->count + 2;
  for (uint64_t i = arg->offset; i < total; i++) {
    const char *name;
    size_t len;
    uint64_t nodeid;
    uint32_t dtype;
    if (i < 2) {
      name = i == 0 ? "." : "..";
      len = i + 1;
      nodeid = i == 0 ? in->nodeid : dir->parent;
      dtype = DT_DIR;
    } else {
      const table_dirent *d = &s->dirents[dir->first + (i - 2)];
      name = s->strings + d->name_offset;
      len = d->name_len;
      nodeid = d->nodeid;
      dtype = d->dtype;
    }
    const table_node *n = &s->nodes[nodeid];
    size_t head = plus ? FUSE_NAME_OFFSET_DIRENTPLUS : FUSE_NAME_OFFSET;
    size_t rec = FUSE_DIRENT_ALIGN(head + len);
    if (used + rec > cap) break;
    memset(out + used, 0, rec);
    struct fuse_dirent *de;
    if (plus) {
      struct fuse_direntplus *dp = (struct fuse_direntplus *)(out + used);
      // "." and "..": the kernel lists them but never links them; no entry.
      if (i >= 2) fill_entry(s, nodeid, n, &dp->entry_out);
      de = &dp->dirent;
    } else {
      de = (struct fuse_dirent *)(out + used);
    }
    de->ino = n->ino;
    de->off = i + 1;
    de->namelen = (uint32_t)len;
    de->type = dtype;
    memcpy(de->name, name, len);
    used += rec;
  }
  reply_data(s, in->unique, out, used);
  free(out);
}

static void op_statfs(server *s, struct fuse_in_header *in) {
  struct fuse_statfs_out out;
  memset(&out, 0, sizeof out);
  out.st.blocks = s->h->statfs_blocks;
  out.st.files = s->h->statfs_files;
  out.st.bsize = 4096;
  out.st.frsize = 4096;
  out.st.namelen = 255;
  reply_data(s, in->unique, &out, sizeof out);
}

static void op_getxattr(server *s, struct fuse_in_header *in, const struct fuse_getxattr_in *arg, const char *name, size_t avail) {
  if ((s->h->flags & TABLE_HAS_XATTRS) == 0) { reply_err(s, in->unique, s->opt.err.not_implemented); return; }
  const table_node *n = node_of(s, in->nodeid);
  if (n == NULL) { reply_err(s, in->unique, s->opt.err.no_entry); return; }
  size_t len = strnlen(name, avail);
  for (uint32_t i = n->xattr_first; i < n->xattr_first + n->xattr_count && len < avail; i++) {
    const table_xattr *x = &s->xattrs[i];
    if (x->name_len != len || memcmp(s->strings + x->name_offset, name, len) != 0) continue;
    if (arg->size == 0) {
      struct fuse_getxattr_out out = { .size = x->value_len };
      reply_data(s, in->unique, &out, sizeof out);
    } else if (arg->size < x->value_len) {
      reply_err(s, in->unique, s->opt.err.buffer_too_small);
    } else {
      reply_data(s, in->unique, s->strings + x->value_offset, x->value_len);
    }
    return;
  }
  reply_err(s, in->unique, s->opt.err.no_attribute);
}

static void op_listxattr(server *s, struct fuse_in_header *in, const struct fuse_getxattr_in *arg) {
  if ((s->h->flags & TABLE_HAS_XATTRS) == 0) { reply_err(s, in->unique, s->opt.err.not_implemented); return; }
  const table_node *n = node_of(s, in->nodeid);
  if (n == NULL) { reply_err(s, in->unique, s->opt.err.no_entry); return; }
  size_t total = 0;
  for (uint32_t i = n->xattr_first; i < n->xattr_first + n->xattr_count; i++) total += s->xattrs[i].name_len + 1;
  if (arg->size == 0) {
    struct fuse_getxattr_out out = { .size = (uint32_t)total };
    reply_data(s, in->unique, &out, sizeof out);
    return;
  }
  if (arg->size < total) { reply_err(s, in->unique, s->opt.err.buffer_too_small); return; }
  char *out = malloc(total > 0 ? total : 1);
  if (out == NULL) { reply_err(s, in->unique, s->opt.err.no_memory); return; }
  size_t at = 0;
  for (uint32_t i = n->xattr_first; i < n->xattr_first + n->xattr_count; i++) {
    const table_xattr *x = &s->xattrs[i];
    memcpy(out + at, s->strings + x->name_offset, x->name_len);
    at += x->name_len;
    out[at++] = 0;
  }
  reply_data(s, in->unique, out, at);
  free(out);
}

static void op_read(server *s, struct fuse_in_header *in, const struct fuse_read_in *arg) {
  atomic_fetch_add(&s->reads, 1);
  const table_node *n = node_of(s, in->nodeid);
  if (n == NULL) { reply_err(s, in->unique, s->opt.err.no_entry); return; }
  if ((n->mode & S_IFMT) == S_IFDIR) { reply_err(s, in->unique, s->opt.err.is_directory); return; }
  if ((n->mode & S_IFMT) != S_IFREG) { reply_err(s, in->unique, s->opt.err.bad_request); return; }
  if (arg->offset >= n->size || arg->size == 0) { reply_data(s, in->unique, NULL, 0); return; }
  uint64_t left = n->size - arg->offset;
  uint32_t size = left < arg->size ? (uint32_t)left : arg->size;
  post_event(s, EVENT_READ, in->unique, in->nodeid, arg->offset, size);
}

// With passthrough, every OPEN is answered: a node with a backing file reads from it in the kernel,
// the others as before (page cache kept across opens).
static void op_open(server *s, struct fuse_in_header *in) {
  atomic_fetch_add(&s->opens, 1);
  const table_node *n = node_of(s, in->nodeid);
  if (n == NULL) { reply_err(s, in->unique, s->opt.err.no_entry); return; }
  open_answer a = backing_open(&s->backing, in->nodeid, FOPEN_KEEP_CACHE);
  if (a.backing_id > 0) atomic_fetch_add(&s->passthrough_opens, 1);
  struct fuse_open_out out;
  memset(&out, 0, sizeof out);
  out.fh = a.fh;
  out.open_flags = a.open_flags;
  out.padding = (uint32_t)a.backing_id;  // backing_id in protocol 7.40
  reply_data(s, in->unique, &out, sizeof out);
}

static void dispatch(server *s, char *buf, size_t n) {
  if (n < sizeof(struct fuse_in_header)) return;
  struct fuse_in_header *in = (struct fuse_in_header *)buf;
  char *arg = buf + sizeof *in;
  size_t avail = n - sizeof *in;
  atomic_fetch_add(&s->requests, 1);
  switch (in->opcode) {
    case FUSE_INIT:
      if (avail < 16) { reply_err(s, in->unique, s->opt.err.bad_request); return; }
      {
        struct fuse_init_in init;
        memset(&init, 0, sizeof init);
        memcpy(&init, arg, avail < sizeof init ? avail : sizeof init);
        op_init(s, in, &init);
      }
      return;
    case FUSE_LOOKUP: op_lookup(s, in, arg, avail); return;
    case FUSE_FORGET: case FUSE_BATCH_FORGET: return;  // the table is immutable: nothing to free, no reply
    case FUSE_GETATTR: op_getattr(s, in); return;
    case FUSE_READLINK: op_readlink(s, in); return;
    case FUSE_OPEN:
      if (s->passthrough) { op_open(s, in); return; }
      __attribute__((fallthrough));  // without passthrough no OPEN is worth a round trip
    case FUSE_OPENDIR:
      // ENOSYS: the kernel stops sending OPEN/OPENDIR, keeps the page cache and caches listings.
      atomic_fetch_add(&s->opens, 1);
      reply_err(s, in->unique, s->opt.err.not_implemented);
      return;
    case FUSE_READ:
      if (avail < sizeof(struct fuse_read_in)) { reply_err(s, in->unique, s->opt.err.bad_request); return; }
      op_read(s, in, (const struct fuse_read_in *)arg);
      return;
    case FUSE_READDIR: case FUSE_READDIRPLUS:
      if (avail < sizeof(struct fuse_read_in)) { reply_err(s, in->unique, s->opt.err.bad_request); return; }
      op_readdir(s, in, (const struct fuse_read_in *)arg, in->opcode == FUSE_READDIRPLUS);
      return;
    case FUSE_RELEASE:
      if (s->passthrough && avail >= sizeof(struct fuse_release_in)) backing_release(&s->backing, in->nodeid, ((const struct fuse_release_in *)arg)->fh);
      reply_err(s, in->unique, 0);
      return;
    case FUSE_RELEASEDIR: reply_err(s, in->unique, 0); return;
    case FUSE_STATFS: op_statfs(s, in); return;
    case FUSE_GETXATTR:
      if (avail < sizeof(struct fuse_getxattr_in)) { reply_err(s, in->unique, s->opt.err.bad_request); return; }
      op_getxattr(s, in, (const struct fuse_getxattr_in *)arg, arg + sizeof(struct fuse_getxattr_in), avail - sizeof(struct fuse_getxattr_in));
      return;
    case FUSE_LISTXATTR:
      if (avail < sizeof(struct fuse_getxattr_in)) { reply_err(s, in->unique, s->opt.err.bad_request); return; }
      op_listxattr(s, in, (const struct fuse_getxattr_in *)arg);
      return;
    case FUSE_INTERRUPT: return;  // reads answer soon anyway; a late reply is dropped by the kernel
    case FUSE_DESTROY: reply_err(s, in->unique, 0); return;
    case FUSE_ACCESS: case FUSE_FLUSH: case FUSE_GETLK: case FUSE_SETLK: case FUSE_SETLKW:
    case FUSE_IOCTL: case FUSE_POLL: case FUSE_LSEEK: case FUSE_BMAP: case FUSE_FSYNC: case FUSE_FSYNCDIR:
      reply_err(s, in->unique, s->opt.err.not_implemented);
      return;
    case FUSE_SETATTR: case FUSE_MKNOD: case FUSE_MKDIR: case FUSE_UNLINK: case FUSE_RMDIR: case FUSE_RENAME:
    case FUSE_RENAME2: case FUSE_LINK: case FUSE_SYMLINK: case FUSE_WRITE: case FUSE_CREATE: case FUSE_SETXATTR:
    case FUSE_REMOVEXATTR: case FUSE_FALLOCATE: case FUSE_COPY_FILE_RANGE:
      // The mount is read-only in the kernel, so these are refused before they get here; answer alike if one does.
      reply_err(s, in->unique, s->opt.err.read_only);
      return;
    default:
      // Newer ops (STATX, ...): ENOSYS makes the kernel fall back to the ones above, and stop asking.
      reply_err(s, in->unique, s->opt.err.not_implemented);
      return;
  }
}

static void *serve(void *arg) {
  server *s = arg;
  char *buf = malloc(READ_BUFFER_BYTES);
  while (buf != NULL) {
    ssize_t n = read(s->fd, buf, READ_BUFFER_BYTES);
    if (n < 0) {
      if (errno == EINTR || errno == EAGAIN || errno == ENOENT) continue;
      break;  // ENODEV: unmounted and every file closed, or the connection was aborted
    }
    dispatch(s, buf, (size_t)n);
  }
  free(buf);
  if (atomic_fetch_sub(&s->running_threads, 1) == 1 && atomic_exchange(&s->closed_sent, 1) == 0) {
    post_event(s, EVENT_CLOSED, 0, 0, 0, 0);
    napi_release_threadsafe_function(s->events, napi_tsfn_release);
  }
  return NULL;
}

// ---- JS interface -------------------------------------------------------

static napi_value throw_msg(napi_env env, const char *code, const char *msg) {
  napi_throw_error(env, code, msg);
  return NULL;
}

static void call_js(napi_env env, napi_value fn, void *context, void *data) {
  (void)context;
  event *ev = data;
  if (env != NULL && fn != NULL) {
    napi_value argv[5], undefined;
    napi_create_int32(env, ev->kind, &argv[0]);
    napi_create_bigint_uint64(env, ev->unique, &argv[1]);
    napi_create_double(env, (double)ev->nodeid, &argv[2]);
    napi_create_double(env, (double)ev->offset, &argv[3]);
    napi_create_uint32(env, ev->size, &argv[4]);
    napi_get_undefined(env, &undefined);
    napi_call_function(env, undefined, fn, 5, argv, NULL);
  }
  free(ev);
}

static void finalize_server(napi_env env, void *data, void *hint) {
  (void)env; (void)hint;
  server *s = data;
  // Only freed once no thread runs: a server still serving keeps its handle referenced from JS.
  if (atomic_load(&s->running_threads) == 0) {
    backing_table_free(&s->backing);
    free(s->table_bytes);
    if (s->fd >= 0) close(s->fd);
    free(s);
  }
}

static int get_u64_prop(napi_env env, napi_value obj, const char *name, uint64_t *out) {
  napi_value v;
  double d;
  if (napi_get_named_property(env, obj, name, &v) != napi_ok || napi_get_value_double(env, v, &d) != napi_ok || d < 0) return 0;
  *out = (uint64_t)d;
  return 1;
}

// One errno of the table: a whole number from 1 to 4095.
static int get_errno_prop(napi_env env, napi_value obj, const char *name, int *out) {
  uint64_t v;
  if (!get_u64_prop(env, obj, name, &v) || v < 1 || v > 4095) return 0;
  *out = (int)v;
  return 1;
}

static int get_errnos(napi_env env, napi_value obj, fuse_errnos *e) {
  napi_value t;
  napi_valuetype type;
  if (napi_get_named_property(env, obj, "errnos", &t) != napi_ok || napi_typeof(env, t, &type) != napi_ok || type != napi_object) return 0;
  return get_errno_prop(env, t, "noEntry", &e->no_entry) && get_errno_prop(env, t, "notSymlink", &e->not_symlink) &&
         get_errno_prop(env, t, "isDirectory", &e->is_directory) && get_errno_prop(env, t, "notDirectory", &e->not_directory) &&
         get_errno_prop(env, t, "readOnly", &e->read_only) && get_errno_prop(env, t, "notImplemented", &e->not_implemented) &&
         get_errno_prop(env, t, "badRequest", &e->bad_request) && get_errno_prop(env, t, "noAttribute", &e->no_attribute) &&
         get_errno_prop(env, t, "bufferTooSmall", &e->buffer_too_small) && get_errno_prop(env, t, "noMemory", &e->no_memory) &&
         get_errno_prop(env, t, "ioError", &e->io_error) && get_errno_prop(env, t, "oldProtocol", &e->old_protocol);
}

static int get_options(napi_env env, napi_value obj, server_options *opt) {
  uint64_t max_pages, max_readahead;
  if (!get_errnos(env, obj, &opt->err)) return 0;
  if (!get_u64_prop(env, obj, "entryValidS", &opt->entry_valid_s) || !get_u64_prop(env, obj, "attrValidS", &opt->attr_valid_s) ||
      !get_u64_prop(env, obj, "negativeValidS", &opt->negative_valid_s) || !get_u64_prop(env, obj, "maxPages", &max_pages) ||
      !get_u64_prop(env, obj, "maxReadahead", &max_readahead) || max_pages < 1 || max_pages > 256) {
    return 0;
  }
  opt->max_pages = (uint32_t)max_pages;
  opt->max_readahead = (uint32_t)max_readahead;
  bool has_passthrough = false;
  napi_has_named_property(env, obj, "passthrough", &has_passthrough);
  uint64_t passthrough = 0;
  if (has_passthrough && !get_u64_prop(env, obj, "passthrough", &passthrough)) return 0;
  opt->passthrough = passthrough != 0;
  return 1;
}

#define OPTIONS_USAGE "options: entryValidS, attrValidS, negativeValidS, maxPages (1-256), maxReadahead, errnos (src/fs/fuse-errnos.ts, each 1-4095)"

// A server over a checked copy of `table`, without fd or threads; NULL with a pending exception.
static server *new_server(napi_env env, napi_value table, const server_options *opt) {
  void *data;
  size_t table_len;
  if (napi_get_buffer_info(env, table, &data, &table_len) != napi_ok) { throw_msg(env, "ERR_INVALID_ARG_TYPE", "table must be a Buffer"); return NULL; }
  server *s = calloc(1, sizeof *s);
  if (s == NULL) { throw_msg(env, "ENOMEM", "out of memory"); return NULL; }
  s->fd = -1;
  s->opt = *opt;
  s->table_bytes = malloc(table_len > 0 ? table_len : 1);
  if (s->table_bytes == NULL) { free(s); throw_msg(env, "ENOMEM", "out of memory"); return NULL; }
  memcpy(s->table_bytes, data, table_len);
  const char *bad = table_check(s, table_len);
  if (bad != NULL) { free(s->table_bytes); free(s); throw_msg(env, "EINVAL", bad); return NULL; }
  return s;
}

// The event channel and the threads; on failure frees s (not its fd) and returns why.
static const char *start_server(napi_env env, server *s, napi_value on_event) {
  napi_value name;
  napi_create_string_utf8(env, "layerd-fuse-server", NAPI_AUTO_LENGTH, &name);
  if (napi_create_threadsafe_function(env, on_event, NULL, name, 0, 1, NULL, NULL, NULL, call_js, &s->events) != napi_ok) {
    free(s->table_bytes); free(s);
    return "cannot create the event channel";
  }
  // The mount does not hold the event loop open (as with fuse-native); the daemon's own server does.
  napi_unref_threadsafe_function(env, s->events);
  atomic_store(&s->running_threads, SERVER_THREADS);
  for (int i = 0; i < SERVER_THREADS; i++) {
    if (pthread_create(&s->threads[i], NULL, serve, s) != 0) {
      atomic_fetch_sub(&s->running_threads, 1);
      continue;
    }
    pthread_detach(s->threads[i]);
  }
  if (atomic_load(&s->running_threads) == 0) {
    napi_release_threadsafe_function(s->events, napi_tsfn_release);
    free(s->table_bytes); free(s);
    return "cannot start the FUSE server threads";
  }
  return NULL;
}

// A JS string that fits in `cap` bytes with its NUL, into buf.
static int get_cstring(napi_env env, napi_value v, char *buf, size_t cap) {
  size_t len;
  return napi_get_value_string_utf8(env, v, buf, cap, &len) == napi_ok && len + 1 < cap;
}

// Up to `cap` arguments of a call into argv (the missing ones undefined); returns how many were passed.
static size_t get_argv(napi_env env, napi_callback_info info, napi_value *argv, size_t cap) {
  size_t argc = cap;
  napi_get_cb_info(env, info, &argc, argv, NULL, NULL);
  return argc;
}

// fuseServerMount(mountpoint, fsName, mountOptions: string, options: {entryValidS, attrValidS, negativeValidS, maxPages, maxReadahead, errnos}, table: Buffer, onEvent)
static napi_value js_mount(napi_env env, napi_callback_info info) {
  napi_value argv[6];
  size_t argc = get_argv(env, info, argv, 6);
  if (argc < 6) return throw_msg(env, "ERR_INVALID_ARG_TYPE", "fuseServerMount needs 6 arguments");
  char mountpoint[4096], fsname[256], mount_opts[1024];
  if (!get_cstring(env, argv[0], mountpoint, sizeof mountpoint)) return throw_msg(env, "ERR_INVALID_ARG_TYPE", "mountpoint must be a string");
  if (!get_cstring(env, argv[1], fsname, sizeof fsname)) return throw_msg(env, "ERR_INVALID_ARG_TYPE", "fsName must be a string");
  if (!get_cstring(env, argv[2], mount_opts, sizeof mount_opts)) return throw_msg(env, "ERR_INVALID_ARG_TYPE", "mount options must be a string");
  server_options opt;
  if (!get_options(env, argv[3], &opt)) return throw_msg(env, "ERR_INVALID_ARG_TYPE", OPTIONS_USAGE);
  server *s = new_server(env, argv[4], &opt);
  if (s == NULL) return NULL;

  s->fd = open("/dev/fuse", O_RDWR | O_CLOEXEC);
  if (s->fd < 0) {
    char msg[256];
    snprintf(msg, sizeof msg, "cannot open /dev/fuse: %s", strerror(errno));
    free(s->table_bytes); free(s);
    return throw_msg(env, strerrorname_np(errno), msg);
  }
  char data_opts[1200], type[300];
  snprintf(data_opts, sizeof data_opts, "fd=%d,rootmode=40000,user_id=%u,group_id=%u%s%s", s->fd, getuid(), getgid(), mount_opts[0] != 0 ? "," : "", mount_opts);
  snprintf(type, sizeof type, "fuse.%s", fsname);
  if (mount(fsname, mountpoint, type, MS_RDONLY | MS_NOSUID | MS_NODEV, data_opts) != 0) {
    int err = errno;
    char msg[8800];
    snprintf(msg, sizeof msg, "mount %s at %s: %s", type, mountpoint, strerror(err));
    close(s->fd); free(s->table_bytes); free(s);
    return throw_msg(env, strerrorname_np(err), msg);
  }
  int fd = s->fd;
  const char *why = start_server(env, s, argv[5]);
  if (why != NULL) {
    umount2(mountpoint, MNT_DETACH);
    close(fd);
    return throw_msg(env, "EAGAIN", why);
  }
  napi_value handle;
  napi_create_external(env, s, finalize_server, NULL, &handle);
  return handle;
}

// fuseServerAttach(fd, options, table: Buffer, init: {kernelMajor, kernelMinor, kernelFlags, kernelFlags2, replyFlags}, onEvent)
//   -> server. Takeover of a connection that another process mounted and
//   INITed: `fd` is this process's own copy of its /dev/fuse fd (the server
//   owns it from here), `table` must be the one that process served (the
//   caller checks its digest: node ids are indices into it). No INIT comes;
//   the threads read what the kernel queued meanwhile, and FUSE_NOTIFY_RESEND
//   re-queues what the dead process had read but never answered. Every op
//   here is a read of immutable data, so a request answered twice (once by
//   the dead process just before it died, once again after the resend) is
//   harmless: the kernel drops the second reply (its unique is gone) and
//   both carry the same bytes.
static napi_value js_attach(napi_env env, napi_callback_info info) {
  napi_value argv[5];
  size_t argc = get_argv(env, info, argv, 5);
  if (argc < 5) return throw_msg(env, "ERR_INVALID_ARG_TYPE", "fuseServerAttach needs 5 arguments");
  int32_t fd;
  if (napi_get_value_int32(env, argv[0], &fd) != napi_ok || fd < 0) return throw_msg(env, "ERR_INVALID_ARG_TYPE", "fd must be a file descriptor");
  server_options opt;
  if (!get_options(env, argv[1], &opt)) return throw_msg(env, "ERR_INVALID_ARG_TYPE", OPTIONS_USAGE);
  uint64_t major, minor, kflags, kflags2, rflags;
  if (!get_u64_prop(env, argv[3], "kernelMajor", &major) || !get_u64_prop(env, argv[3], "kernelMinor", &minor) ||
      !get_u64_prop(env, argv[3], "kernelFlags", &kflags) || !get_u64_prop(env, argv[3], "kernelFlags2", &kflags2) ||
      !get_u64_prop(env, argv[3], "replyFlags", &rflags)) {
    return throw_msg(env, "ERR_INVALID_ARG_TYPE", "init: kernelMajor, kernelMinor, kernelFlags, kernelFlags2, replyFlags");
  }
  if (major != 7 || minor < 40 || (kflags2 & INIT_HAS_RESEND_FLAGS2) == 0) {
    // Without resend, a request the dead process had read would wait forever: never take such a connection over.
    return throw_msg(env, "ENOTSUP", "the kernel's FUSE cannot resend requests (protocol 7.40, Linux 6.9): this connection cannot be taken over");
  }
  server *s = new_server(env, argv[2], &opt);
  if (s == NULL) return NULL;
  s->kernel_major = (uint32_t)major;
  s->kernel_minor = (uint32_t)minor;
  s->kernel_flags = (uint32_t)kflags;
  s->kernel_flags2 = (uint32_t)kflags2;
  s->reply_flags = (uint32_t)rflags;
  s->fd = fd;
  // The earlier daemon settled passthrough iff it replied INIT_EXT (only passthrough sets it) with the same options.
  if (opt.passthrough && (rflags & INIT_EXT) != 0 && (kflags2 & INIT_PASSTHROUGH_FLAGS2) != 0) {
    if (backing_table_init(&s->backing, fd, s->h->node_count) != 0) { free(s->table_bytes); free(s); return throw_msg(env, "ENOMEM", "out of memory"); }
    s->passthrough = 1;
  }
  const char *why = start_server(env, s, argv[4]);
  if (why != NULL) return throw_msg(env, "EAGAIN", why);  // s and fd stay with the caller's cleanup: close(fd)
  struct fuse_out_header resend = { .len = sizeof resend, .error = NOTIFY_RESEND, .unique = 0 };
  // The threads already serve what was queued; a failed resend (the kernel advertised it, so not expected) is reported by fuseServerInit.
  if (write(s->fd, &resend, sizeof resend) < 0) s->resend_errno = errno;
  napi_value handle;
  napi_create_external(env, s, finalize_server, NULL, &handle);
  return handle;
}

static server *get_server(napi_env env, napi_value v) {
  void *p = NULL;
  if (napi_get_value_external(env, v, &p) != napi_ok) return NULL;
  return p;
}

// The arguments of a reply call, fuseServer*(server, unique: bigint, ...) with exactly `want` of them, into argv;
// the server and `*unique`, or NULL when the first two are not a server and a bigint.
static server *reply_args(napi_env env, napi_callback_info info, size_t want, napi_value *argv, uint64_t *unique) {
  bool lossless;
  server *s = get_argv(env, info, argv, want) == want ? get_server(env, argv[0]) : NULL;
  if (s == NULL || napi_get_value_bigint_uint64(env, argv[1], unique, &lossless) != napi_ok) return NULL;
  return s;
}

// fuseServerReply(server, unique, buffer, length)
static napi_value js_reply(napi_env env, napi_callback_info info) {
  napi_value argv[4];
  uint64_t unique;
  uint32_t length;
  void *data;
  size_t cap;
  server *s = reply_args(env, info, 4, argv, &unique);
  if (s == NULL || napi_get_buffer_info(env, argv[2], &data, &cap) != napi_ok || napi_get_value_uint32(env, argv[3], &length) != napi_ok || length > cap) {
    return throw_msg(env, "ERR_INVALID_ARG_TYPE", "fuseServerReply(server, unique, buffer, length <= buffer.length)");
  }
  reply_data(s, unique, data, length);
  return NULL;
}

// fuseServerReplyError(server, unique, errno > 0)
static napi_value js_reply_error(napi_env env, napi_callback_info info) {
  napi_value argv[3];
  uint64_t unique;
  int32_t err;
  server *s = reply_args(env, info, 3, argv, &unique);
  if (s == NULL || napi_get_value_int32(env, argv[2], &err) != napi_ok || err <= 0) {
    return throw_msg(env, "ERR_INVALID_ARG_TYPE", "fuseServerReplyError(server, unique, errno > 0)");
  }
  reply_err(s, unique, err);
  return NULL;
}

static void set_count(napi_env env, napi_value obj, const char *name, uint64_t v) {
  napi_value n;
  napi_create_double(env, (double)v, &n);
  napi_set_named_property(env, obj, name, n);
}

// fuseServerCounters(server) -> { requests, lookups, readdirs, opens, reads, repliesFailed }
static napi_value js_counters(napi_env env, napi_callback_info info) {
  napi_value argv[1], obj;
  size_t argc = get_argv(env, info, argv, 1);
  server *s = argc == 1 ? get_server(env, argv[0]) : NULL;
  if (s == NULL) return throw_msg(env, "ERR_INVALID_ARG_TYPE", "fuseServerCounters(server)");
  napi_create_object(env, &obj);
  set_count(env, obj, "requests", atomic_load(&s->requests));
  set_count(env, obj, "lookups", atomic_load(&s->lookups));
  set_count(env, obj, "readdirs", atomic_load(&s->readdirs));
  set_count(env, obj, "opens", atomic_load(&s->opens));
  set_count(env, obj, "reads", atomic_load(&s->reads));
  set_count(env, obj, "repliesFailed", atomic_load(&s->replies_failed));
  set_count(env, obj, "passthroughOpens", atomic_load(&s->passthrough_opens));
  return obj;
}

// fuseServerInit(server) -> { kernelMajor, kernelMinor, kernelFlags, kernelFlags2, replyFlags, maxReadahead, canResend, resendError }
static napi_value js_init_info(napi_env env, napi_callback_info info) {
  napi_value argv[1], obj, v;
  size_t argc = get_argv(env, info, argv, 1);
  server *s = argc == 1 ? get_server(env, argv[0]) : NULL;
  if (s == NULL) return throw_msg(env, "ERR_INVALID_ARG_TYPE", "fuseServerInit(server)");
  napi_create_object(env, &obj);
  set_count(env, obj, "kernelMajor", s->kernel_major);
  set_count(env, obj, "kernelMinor", s->kernel_minor);
  set_count(env, obj, "kernelFlags", s->kernel_flags);
  set_count(env, obj, "kernelFlags2", s->kernel_flags2);
  set_count(env, obj, "replyFlags", s->reply_flags);
  set_count(env, obj, "maxReadahead", s->opt.max_readahead);
  napi_get_boolean(env, s->kernel_major == 7 && s->kernel_minor >= 40 && (s->kernel_flags2 & INIT_HAS_RESEND_FLAGS2) != 0, &v);
  napi_set_named_property(env, obj, "canResend", v);
  napi_get_boolean(env, s->passthrough != 0, &v);
  napi_set_named_property(env, obj, "passthrough", v);
  if (s->resend_errno != 0) napi_create_string_utf8(env, strerror(s->resend_errno), NAPI_AUTO_LENGTH, &v); else napi_get_null(env, &v);
  napi_set_named_property(env, obj, "resendError", v);
  return obj;
}

// fuseServerFd(server) -> the connection's /dev/fuse fd (owned by the server: dup it, or send it, never close it)
static napi_value js_fd(napi_env env, napi_callback_info info) {
  napi_value argv[1], v;
  size_t argc = get_argv(env, info, argv, 1);
  server *s = argc == 1 ? get_server(env, argv[0]) : NULL;
  if (s == NULL) return throw_msg(env, "ERR_INVALID_ARG_TYPE", "fuseServerFd(server)");
  napi_create_int32(env, s->fd, &v);
  return v;
}

// ---- invalidation (FUSE_NOTIFY_INVAL_INODE) -----------------------------

typedef struct {
  int fd;  // a dup of the connection's fd: the server may end while the work runs
  uint32_t *nodeids;
  uint32_t count, done;
  int error;
  napi_deferred deferred;
  napi_async_work work;
} invalidation;

static void invalidate_execute(napi_env env, void *data) {
  (void)env;
  invalidation *w = data;
  for (uint32_t i = 0; i < w->count; i++) {
    struct { struct fuse_out_header h; struct fuse_notify_inval_inode_out a; } msg;
    memset(&msg, 0, sizeof msg);
    msg.h.len = sizeof msg;
    msg.h.error = FUSE_NOTIFY_INVAL_INODE;
    msg.a.ino = w->nodeids[i];
    msg.a.off = 0;
    msg.a.len = 0;  // 0: to the end of the file (the kernel's reading: off..end)
    ssize_t n = write(w->fd, &msg, sizeof msg);
    if (n == (ssize_t)sizeof msg) { w->done++; continue; }
    if (n < 0 && errno == ENOENT) continue;  // the kernel no longer has that inode: nothing cached
    w->error = n < 0 ? errno : EIO;
    break;  // ENODEV: the connection ended
  }
}

static void invalidate_complete(napi_env env, napi_status status, void *data) {
  invalidation *w = data;
  napi_value v;
  if (status == napi_ok && (w->error == 0 || w->error == ENODEV)) {
    napi_create_uint32(env, w->done, &v);
    napi_resolve_deferred(env, w->deferred, v);
  } else {
    napi_value msg, code;
    napi_create_string_utf8(env, strerror(w->error != 0 ? w->error : EIO), NAPI_AUTO_LENGTH, &msg);
    napi_create_string_utf8(env, "ERR_FUSE_NOTIFY", NAPI_AUTO_LENGTH, &code);
    napi_create_error(env, code, msg, &v);
    napi_reject_deferred(env, w->deferred, v);
  }
  napi_delete_async_work(env, w->work);
  close(w->fd);
  free(w->nodeids);
  free(w);
}

// fuseServerInvalidate(server, nodeids: Uint32Array) -> Promise<number of notifications the kernel took>
static napi_value js_invalidate(napi_env env, napi_callback_info info) {
  size_t argc = 2;
  napi_value argv[2], promise, name;
  napi_get_cb_info(env, info, &argc, argv, NULL, NULL);
  server *s = argc == 2 ? get_server(env, argv[0]) : NULL;
  napi_typedarray_type type;
  size_t length;
  void *ids;
  if (s == NULL || napi_get_typedarray_info(env, argv[1], &type, &length, &ids, NULL, NULL) != napi_ok || type != napi_uint32_array) {
    return throw_msg(env, "ERR_INVALID_ARG_TYPE", "fuseServerInvalidate(server, nodeids: Uint32Array)");
  }
  invalidation *w = calloc(1, sizeof *w);
  if (w == NULL) return throw_msg(env, "ERR_FUSE_NOTIFY", "out of memory");
  w->nodeids = malloc(length * sizeof(uint32_t) + 1);
  w->fd = dup(s->fd);
  if (w->nodeids == NULL || w->fd < 0) {
    if (w->fd >= 0) close(w->fd);
    free(w->nodeids); free(w);
    return throw_msg(env, "ERR_FUSE_NOTIFY", strerror(errno));
  }
  memcpy(w->nodeids, ids, length * sizeof(uint32_t));
  w->count = (uint32_t)length;
  napi_create_promise(env, &w->deferred, &promise);
  napi_create_string_utf8(env, "fuseServerInvalidate", NAPI_AUTO_LENGTH, &name);
  napi_create_async_work(env, NULL, name, invalidate_execute, invalidate_complete, w, &w->work);
  napi_queue_async_work(env, w->work);
  return promise;
}

// ---- passthrough backing files (fuse_passthrough.h) ---------------------

// (server, nodeid[, third: int32]) -> server with the arguments, or NULL with a pending exception.
static server *backing_args(napi_env env, napi_callback_info info, size_t want, uint32_t *nodeid, int32_t *third, const char *usage) {
  napi_value argv[3];
  size_t argc = get_argv(env, info, argv, 3);
  server *s = argc >= want ? get_server(env, argv[0]) : NULL;
  if (s == NULL || napi_get_value_uint32(env, argv[1], nodeid) != napi_ok ||
      (want == 3 && napi_get_value_int32(env, argv[2], third) != napi_ok)) {
    throw_msg(env, "ERR_INVALID_ARG_TYPE", usage);
    return NULL;
  }
  if (!s->passthrough) { throw_msg(env, "ENOTSUP", "passthrough was not negotiated on this connection"); return NULL; }
  return s;
}

static napi_value throw_errno(napi_env env, int err, const char *what) {
  char msg[256];
  snprintf(msg, sizeof msg, "%s: %s", what, strerror(err));
  return throw_msg(env, strerrorname_np(err), msg);
}

// fuseServerBackingAttach(server, nodeid, fd) -> backing id. `fd` (a read-only open of the backing file) stays the caller's.
static napi_value js_backing_attach(napi_env env, napi_callback_info info) {
  uint32_t nodeid;
  int32_t fd = -1;
  server *s = backing_args(env, info, 3, &nodeid, &fd, "fuseServerBackingAttach(server, nodeid, fd)");
  if (s == NULL) return NULL;
  int id = backing_attach(&s->backing, nodeid, fd);
  if (id < 0) return throw_errno(env, -id, "FUSE_DEV_IOC_BACKING_OPEN");
  napi_value v;
  napi_create_int32(env, id, &v);
  return v;
}

// fuseServerBackingInherit(server, nodeid, id): offer a backing id an earlier daemon registered on this connection.
static napi_value js_backing_inherit(napi_env env, napi_callback_info info) {
  uint32_t nodeid;
  int32_t id = 0;
  server *s = backing_args(env, info, 3, &nodeid, &id, "fuseServerBackingInherit(server, nodeid, id)");
  if (s == NULL) return NULL;
  int err = backing_inherit(&s->backing, nodeid, id);
  if (err < 0) return throw_errno(env, -err, "inherit backing id");
  return NULL;
}

// fuseServerBackingRetire(server, nodeid) -> whether the node had a backing file. New opens stop using it once no file does.
static napi_value js_backing_retire(napi_env env, napi_callback_info info) {
  uint32_t nodeid;
  server *s = backing_args(env, info, 2, &nodeid, NULL, "fuseServerBackingRetire(server, nodeid)");
  if (s == NULL) return NULL;
  napi_value v;
  napi_get_boolean(env, backing_retire(&s->backing, nodeid) != 0, &v);
  return v;
}

void fuse_server_register(napi_env env, napi_value exports) {
  napi_property_descriptor props[] = {
    { "fuseServerMount", 0, js_mount, 0, 0, 0, napi_default, 0 },
    { "fuseServerAttach", 0, js_attach, 0, 0, 0, napi_default, 0 },
    { "fuseServerInit", 0, js_init_info, 0, 0, 0, napi_default, 0 },
    { "fuseServerFd", 0, js_fd, 0, 0, 0, napi_default, 0 },
    { "fuseServerReply", 0, js_reply, 0, 0, 0, napi_default, 0 },
    { "fuseServerReplyError", 0, js_reply_error, 0, 0, 0, napi_default, 0 },
    { "fuseServerCounters", 0, js_counters, 0, 0, 0, napi_default, 0 },
    { "fuseServerInvalidate", 0, js_invalidate, 0, 0, 0, napi_default, 0 },
    { "fuseServerBackingAttach", 0, js_backing_attach, 0, 0, 0, napi_default, 0 },
    { "fuseServerBackingInherit", 0, js_backing_inherit, 0, 0, 0, napi_default, 0 },
    { "fuseServerBackingRetire", 0, js_backing_retire, 0, 0, 0, napi_default, 0 },
  };
  napi_define_properties(env, exports, sizeof props / sizeof props[0], props);
}
