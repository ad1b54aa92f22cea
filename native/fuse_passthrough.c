// See fuse_passthrough.h.
#define _GNU_SOURCE
#include "fuse_passthrough.h"
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>

struct backing_map { int32_t fd; uint32_t flags; uint64_t padding; };
#define IOC_BACKING_OPEN _IOW(229, 1, struct backing_map)
#define IOC_BACKING_CLOSE _IOW(229, 2, uint32_t)
#define FH_CACHED 1
#define FH_PASSTHROUGH 2

int backing_table_init(backing_table *t, int fd, uint32_t node_count) {
  t->nodes = calloc((size_t)node_count + 1, sizeof *t->nodes);
  if (t->nodes == NULL) return ENOMEM;
  t->node_count = node_count;
  t->fd = fd;
  pthread_mutex_init(&t->lock, NULL);
  return 0;
}

void backing_table_free(backing_table *t) {
  if (t->nodes == NULL) return;
  free(t->nodes);
  t->nodes = NULL;
  pthread_mutex_destroy(&t->lock);
}

static node_backing *node_at(backing_table *t, uint64_t nodeid) {
  return t->nodes != NULL && nodeid >= 1 && nodeid <= t->node_count ? &t->nodes[nodeid] : NULL;
}

static void close_id(backing_table *t, node_backing *n) {
  uint32_t id = (uint32_t)n->id;
  ioctl(t->fd, IOC_BACKING_CLOSE, &id);  // the kernel keeps the file while an open file still uses it
  n->id = 0;
}

open_answer backing_open(backing_table *t, uint64_t nodeid, uint32_t cached_open_flags) {
  open_answer a = { .fh = FH_CACHED, .open_flags = cached_open_flags, .backing_id = 0 };
  node_backing *n = node_at(t, nodeid);
  if (n == NULL) return a;
  pthread_mutex_lock(&t->lock);
  // A retired id still serves while files use it: the inode keeps that backing until its last passthrough
  // file closes, and a second backing (or a cached open) would fail the open.
  int usable = n->id > 0 && (n->offered || n->passthrough_opens > 0 || n->inherited);
  if (usable && n->cached_opens == 0) {
    n->passthrough_opens++;
    a = (open_answer){ .fh = FH_PASSTHROUGH, .open_flags = OPEN_FLAG_PASSTHROUGH, .backing_id = n->id };
  } else {
    n->cached_opens++;
  }
  pthread_mutex_unlock(&t->lock);
  return a;
}

void backing_release(backing_table *t, uint64_t nodeid, uint64_t fh) {
  node_backing *n = node_at(t, nodeid);
  if (n == NULL) return;
  pthread_mutex_lock(&t->lock);
  // Opens from before a takeover are released too, and this process never counted them: counts stop at 0.
  if (fh == FH_PASSTHROUGH) {
    if (n->passthrough_opens > 0) n->passthrough_opens--;
    if (n->passthrough_opens == 0 && !n->offered && !n->inherited && n->id > 0) close_id(t, n);
  } else if (fh == FH_CACHED && n->cached_opens > 0) {
    n->cached_opens--;
  }
  pthread_mutex_unlock(&t->lock);
}

int backing_attach(backing_table *t, uint64_t nodeid, int file_fd) {
  node_backing *n = node_at(t, nodeid);
  if (n == NULL) return t->nodes == NULL ? -ENOTSUP : -EINVAL;
  pthread_mutex_lock(&t->lock);
  int result;
  if (n->id > 0) {
    // Still open through an earlier backing (same content): keep it, a second one would fail those opens.
    n->offered = 1;
    result = n->id;
  } else {
    struct backing_map map = { .fd = file_fd, .flags = 0, .padding = 0 };
    int id = ioctl(t->fd, IOC_BACKING_OPEN, &map);
    if (id > 0) { n->id = id; n->offered = 1; result = id; } else { result = id == 0 ? -EIO : -errno; }
  }
  pthread_mutex_unlock(&t->lock);
  return result;
}

int backing_inherit(backing_table *t, uint64_t nodeid, int32_t id) {
  node_backing *n = node_at(t, nodeid);
  if (n == NULL || id <= 0) return -EINVAL;
  pthread_mutex_lock(&t->lock);
  n->id = id;
  n->offered = 1;
  n->inherited = 1;
  pthread_mutex_unlock(&t->lock);
  return 0;
}

int backing_retire(backing_table *t, uint64_t nodeid) {
  node_backing *n = node_at(t, nodeid);
  if (n == NULL) return 0;
  pthread_mutex_lock(&t->lock);
  int had = n->id > 0;
  n->offered = 0;
  // An inherited id may still be in use by opens this process cannot count: it stays until the connection ends.
  if (had && n->passthrough_opens == 0 && !n->inherited) close_id(t, n);
  pthread_mutex_unlock(&t->lock);
  return had;
}
