// FUSE passthrough for native/fuse_server.c: which node reads go straight to
// a backing file, and the open/release bookkeeping that keeps the kernel's
// rules. The kernel (fs/fuse/iomode.c) fails an open with EIO when a
// passthrough open meets a cached-mode open of the same inode, or a second
// backing file for an inode that already has one; so every OPEN is answered
// here, under one lock, from what this connection has open.
#ifndef LAYERD_FUSE_PASSTHROUGH_H
#define LAYERD_FUSE_PASSTHROUGH_H
#include <pthread.h>
#include <stdint.h>

// Protocol 7.40 (Linux 6.9); this machine's <linux/fuse.h> is 7.38, so the numbers are spelled out.
// FUSE_PASSTHROUGH is 1ULL << 37: bit 5 of INIT's flags2.
#define INIT_PASSTHROUGH_FLAGS2 (1u << 5)
#define OPEN_FLAG_PASSTHROUGH (1u << 7)  // FOPEN_PASSTHROUGH
// The backing files live on a plain filesystem (depth 0), so 1 is enough, and it leaves room for one
// overlayfs on top of the FUSE mount (the image stacks): the kernel's limit is 2.
#define PASSTHROUGH_STACK_DEPTH 1

typedef struct {
  int32_t id;           // the kernel's backing id, 0 for none
  uint8_t offered;      // new opens get `id` (cleared when the backing file is retired)
  uint8_t inherited;    // registered by an earlier daemon on this connection: its open count is unknown
  uint32_t passthrough_opens, cached_opens;
} node_backing;

typedef struct {
  pthread_mutex_t lock;
  node_backing *nodes;  // by node id, node_count + 1 entries; NULL until passthrough is negotiated
  uint32_t node_count;
  int fd;               // the connection (/dev/fuse), for BACKING_CLOSE
} backing_table;

// What an OPEN gets: `fh` tags the open for its RELEASE.
typedef struct { uint64_t fh; uint32_t open_flags; int32_t backing_id; } open_answer;

int backing_table_init(backing_table *t, int fd, uint32_t node_count);  // 0 or errno
void backing_table_free(backing_table *t);
open_answer backing_open(backing_table *t, uint64_t nodeid, uint32_t cached_open_flags);
void backing_release(backing_table *t, uint64_t nodeid, uint64_t fh);
// Register `file_fd` for `nodeid` (FUSE_DEV_IOC_BACKING_OPEN): the new id, or -errno.
int backing_attach(backing_table *t, uint64_t nodeid, int file_fd);
// Offer `id` (registered by an earlier daemon on this connection) for `nodeid` again: 0 or -errno.
int backing_inherit(backing_table *t, uint64_t nodeid, int32_t id);
// Stop offering `nodeid`'s backing; its id is closed now, or when its last passthrough open is released.
// Returns 1 when there was one.
int backing_retire(backing_table *t, uint64_t nodeid);
#endif
