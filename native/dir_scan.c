// Directory scans for push's directory walk: one call lists a directory and
// returns, for every child, what the walk needs (lstat fields, symlink
// target, extended attributes), packed into one buffer. The walk made 3-4
// path lookups and a BigInt stat object per entry through Node's fs; this
// makes one fstatat, one llistxattr and (rarely) readlinkat/lgetxattr per
// entry, and one JS call per directory.
//
// Record layout (little-endian, no padding), decoded by src/fs-scan.ts:
//   u32 nameLen, name bytes
//   u32 statErrno            (0: the stat fields are valid)
//   u32 mode, u32 uid, u32 gid
//   i64 mtimeSec             (st_mtim.tv_sec: tv_nsec is never negative, so this is the floor)
//   u64 size, u64 nlink, u64 dev, u64 ino
//   u32 rdevMajor, u32 rdevMinor
//   u32 linkErrno, u32 linkLen, link bytes          (symlinks; 0/0 otherwise)
//   u32 xattrErrno, u32 xattrCount, then per xattr:
//     u32 nameLen, name bytes, u32 valueErrno, u32 valueLen, value bytes
// scanDir's buffer is u32 count, then count records sorted by name bytes.
#define _GNU_SOURCE
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <sys/xattr.h>
#include <unistd.h>
#include <node_api.h>

#define SCAN_PATH_MAX 4096
#define XATTR_LIST_BYTES 65536   // XATTR_LIST_MAX
#define XATTR_VALUE_BYTES 65536  // XATTR_SIZE_MAX

napi_value layerd_throw_errno(napi_env env, int err, const char *syscall, const char *path);
int layerd_get_path(napi_env env, napi_callback_info info, char *path, size_t cap);

typedef struct { uint8_t *data; size_t len, cap; int oom; } out_buf;

static void put(out_buf *o, const void *p, size_t n) {
  if (o->oom) return;
  if (o->len + n > o->cap) {
    size_t cap = o->cap == 0 ? 65536 : o->cap;
    while (cap < o->len + n) cap *= 2;
    uint8_t *d = realloc(o->data, cap);
    if (d == NULL) { o->oom = 1; return; }
    o->data = d;
    o->cap = cap;
  }
  memcpy(o->data + o->len, p, n);
  o->len += n;
}
static void put_u32(out_buf *o, uint32_t v) { put(o, &v, 4); }  // x86-64 and arm64: little-endian
static void put_u64(out_buf *o, uint64_t v) { put(o, &v, 8); }

// Buffers for one xattr list and one value, allocated once per call.
typedef struct { char list[XATTR_LIST_BYTES]; char value[XATTR_VALUE_BYTES]; } xattr_scratch;

// Writes the record of `name` in directory `dirfd` (AT_FDCWD: `name` is a path); `full` is its path, for xattrs.
static void put_record(out_buf *o, xattr_scratch *x, int dirfd, const char *name, const char *full) {
  uint32_t name_len = (uint32_t)strlen(name);
  put_u32(o, name_len);
  put(o, name, name_len);
  struct stat st;
  int stat_err = fstatat(dirfd, name, &st, AT_SYMLINK_NOFOLLOW) == 0 ? 0 : errno;
  if (stat_err != 0) memset(&st, 0, sizeof st);
  put_u32(o, (uint32_t)stat_err);
  put_u32(o, st.st_mode);
  put_u32(o, st.st_uid);
  put_u32(o, st.st_gid);
  put_u64(o, (uint64_t)(int64_t)st.st_mtim.tv_sec);
  put_u64(o, (uint64_t)st.st_size);
  put_u64(o, (uint64_t)st.st_nlink);
  put_u64(o, (uint64_t)st.st_dev);
  put_u64(o, (uint64_t)st.st_ino);
  put_u32(o, major(st.st_rdev));
  put_u32(o, minor(st.st_rdev));
  if (stat_err == 0 && S_ISLNK(st.st_mode)) {
    char target[SCAN_PATH_MAX];
    ssize_t n = readlinkat(dirfd, name, target, sizeof target);
    int err = n < 0 ? errno : n == (ssize_t)sizeof target ? ENAMETOOLONG : 0;
    put_u32(o, (uint32_t)err);
    put_u32(o, err == 0 ? (uint32_t)n : 0);
    if (err == 0) put(o, target, (size_t)n);
  } else {
    put_u32(o, 0);
    put_u32(o, 0);
  }
  if (stat_err != 0) { put_u32(o, 0); put_u32(o, 0); return; }
  char *list = x->list, *value = x->value;
  ssize_t n = llistxattr(full, list, sizeof x->list);
  if (n < 0) { put_u32(o, (uint32_t)errno); put_u32(o, 0); return; }
  uint32_t count = 0;
  for (ssize_t at = 0; at < n; at += (ssize_t)strnlen(list + at, (size_t)(n - at)) + 1) count++;
  put_u32(o, 0);
  put_u32(o, count);
  for (ssize_t at = 0; at < n;) {
    size_t len = strnlen(list + at, (size_t)(n - at));
    put_u32(o, (uint32_t)len);
    put(o, list + at, len);
    char xname[XATTR_NAME_MAX + 1];
    size_t copy = len < sizeof xname - 1 ? len : sizeof xname - 1;
    memcpy(xname, list + at, copy);
    xname[copy] = '\0';
    ssize_t v = lgetxattr(full, xname, value, sizeof x->value);
    put_u32(o, v < 0 ? (uint32_t)errno : 0);
    put_u32(o, v < 0 ? 0 : (uint32_t)v);
    if (v > 0) put(o, value, (size_t)v);
    at += (ssize_t)len + 1;
  }
}

static int by_name(const void *a, const void *b) {
  return strcmp(*(char *const *)a, *(char *const *)b);  // strcmp compares unsigned bytes: Buffer.compare order
}

static napi_value finish(napi_env env, out_buf *o, const char *syscall, const char *path) {
  if (o->oom) { free(o->data); return layerd_throw_errno(env, ENOMEM, syscall, path); }
  napi_value result;
  void *copy = NULL;
  napi_status s = napi_create_buffer_copy(env, o->len, o->data, &copy, &result);
  free(o->data);
  return s == napi_ok ? result : NULL;
}

// scanDir(path: string): Buffer
static napi_value js_scan_dir(napi_env env, napi_callback_info info) {
  char path[SCAN_PATH_MAX];
  if (!layerd_get_path(env, info, path, sizeof path)) return NULL;
  int fd = open(path, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
  if (fd < 0) return layerd_throw_errno(env, errno, "opendir", path);
  DIR *dir = fdopendir(fd);
  if (dir == NULL) { int err = errno; close(fd); return layerd_throw_errno(env, err, "opendir", path); }
  char **names = NULL;
  size_t count = 0, cap = 0;
  int err = 0;
  for (;;) {
    errno = 0;
    struct dirent *d = readdir(dir);
    if (d == NULL) { err = errno; break; }
    if (strcmp(d->d_name, ".") == 0 || strcmp(d->d_name, "..") == 0) continue;
    if (count == cap) {
      cap = cap == 0 ? 64 : cap * 2;
      char **grown = realloc(names, cap * sizeof *names);
      if (grown == NULL) { err = ENOMEM; break; }
      names = grown;
    }
    if ((names[count] = strdup(d->d_name)) == NULL) { err = ENOMEM; break; }
    count++;
  }
  out_buf o = { 0 };
  xattr_scratch *x = err == 0 ? malloc(sizeof *x) : NULL;
  if (err == 0 && x == NULL) err = ENOMEM;
  if (err == 0) {
    qsort(names, count, sizeof *names, by_name);
    put_u32(&o, (uint32_t)count);
    size_t base = strlen(path);
    char full[SCAN_PATH_MAX];
    for (size_t i = 0; i < count && !o.oom; i++) {
      if (base + 1 + strlen(names[i]) + 1 > sizeof full) { err = ENAMETOOLONG; break; }
      memcpy(full, path, base);
      full[base] = '/';
      strcpy(full + base + 1, names[i]);
      put_record(&o, x, dirfd(dir), names[i], full);
    }
  }
  free(x);
  for (size_t i = 0; i < count; i++) free(names[i]);
  free(names);
  closedir(dir);
  if (err != 0) { free(o.data); return layerd_throw_errno(env, err, "scandir", path); }
  return finish(env, &o, "scandir", path);
}

// statPath(path: string): Buffer — one record, for `path` itself (not followed if a symlink).
static napi_value js_stat_path(napi_env env, napi_callback_info info) {
  char path[SCAN_PATH_MAX];
  if (!layerd_get_path(env, info, path, sizeof path)) return NULL;
  xattr_scratch *x = malloc(sizeof *x);
  if (x == NULL) return layerd_throw_errno(env, ENOMEM, "lstat", path);
  out_buf o = { 0 };
  put_record(&o, x, AT_FDCWD, path, path);
  free(x);
  return finish(env, &o, "lstat", path);
}

void dir_scan_register(napi_env env, napi_value exports) {
  napi_property_descriptor props[] = {
    { "scanDir", 0, js_scan_dir, 0, 0, 0, napi_default, 0 },
    { "statPath", 0, js_stat_path, 0, 0, 0, napi_default, 0 },
  };
  napi_define_properties(env, exports, sizeof props / sizeof props[0], props);
}
