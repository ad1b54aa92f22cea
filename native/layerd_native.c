// layerd's native addon: the few system calls Node does not expose
// (extended attributes without following symlinks, mknod, mount, umount2,
// loop devices, flock), FastCDC's cut search for push (fastcdc.c), a FUSE
// server that speaks the kernel protocol itself (fuse_server.c), fd passing
// over Unix sockets for FUSE takeover (fd_passing.c), and malloc and
// page-cache calls for the daemon's memory (memory.c), and the directory walk's
// lstat with xattr names in one call (entry_stat.c).
// Loaded only through src/native.ts, which gives it a typed interface.
// Every function is synchronous; failures throw an Error carrying Node-style
// `code` ('ENOENT', ...), `errno`, `syscall` and `path` properties.
#define _GNU_SOURCE
#include <errno.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <sys/types.h>
#include <sys/xattr.h>
#include <sys/mount.h>
#include <sys/ioctl.h>
#include <sys/file.h>
#include <fcntl.h>
#include <unistd.h>
#include <linux/loop.h>
#include <pthread.h>
#include <sched.h>
#include <node_api.h>

#define PATH_BYTES_MAX 4096
#define XATTR_NAME_BYTES_MAX 256
#define XATTR_RETRIES 8

// Throws an errno error like Node's fs does; returns NULL for convenience.
napi_value throw_errno(napi_env env, int err, const char *syscall, const char *path) {  // also entry_stat.c
  const char *code = strerrorname_np(err);
  if (code == NULL) code = "EUNKNOWN";
  char msg[PATH_BYTES_MAX + 256];
  snprintf(msg, sizeof msg, "%s: %s, %s '%s'", code, strerror(err), syscall, path);
  napi_value msg_v, code_v, errno_v, syscall_v, path_v, error;
  napi_create_string_utf8(env, msg, NAPI_AUTO_LENGTH, &msg_v);
  napi_create_string_utf8(env, code, NAPI_AUTO_LENGTH, &code_v);
  napi_create_error(env, code_v, msg_v, &error);
  napi_create_int32(env, -err, &errno_v);
  napi_create_string_utf8(env, syscall, NAPI_AUTO_LENGTH, &syscall_v);
  napi_create_string_utf8(env, path, NAPI_AUTO_LENGTH, &path_v);
  napi_set_named_property(env, error, "errno", errno_v);
  napi_set_named_property(env, error, "syscall", syscall_v);
  napi_set_named_property(env, error, "path", path_v);
  napi_throw(env, error);
  return NULL;
}

static napi_value throw_type(napi_env env, const char *msg) {
  napi_throw_type_error(env, "ERR_INVALID_ARG_TYPE", msg);
  return NULL;
}

// Copies a JS string into buf; false (with a pending exception) if it is not one or too long.
int get_string(napi_env env, napi_value v, char *buf, size_t cap, const char *what) {  // also entry_stat.c
  size_t len = 0;
  if (napi_get_value_string_utf8(env, v, NULL, 0, &len) != napi_ok) { throw_type(env, what); return 0; }
  if (len + 1 > cap) { throw_type(env, what); return 0; }
  napi_get_value_string_utf8(env, v, buf, cap, &len);
  if (strlen(buf) != len) { throw_type(env, what); return 0; }  // embedded NUL
  return 1;
}

static int get_args(napi_env env, napi_callback_info info, size_t want, napi_value *argv) {
  size_t argc = want;
  napi_get_cb_info(env, info, &argc, argv, NULL, NULL);
  if (argc < want) { throw_type(env, "missing arguments"); return 0; }
  return 1;
}

static napi_value version(napi_env env, napi_callback_info info) {
  (void)info;
  napi_value v;
  napi_create_uint32(env, 13, &v);
  return v;
}

// llistxattr(path: string): string[]
static napi_value js_llistxattr(napi_env env, napi_callback_info info) {
  napi_value argv[1];
  char path[PATH_BYTES_MAX];
  if (!get_args(env, info, 1, argv) || !get_string(env, argv[0], path, sizeof path, "path must be a string")) return NULL;
  char *list = NULL;
  ssize_t n = 0;
  for (int attempt = 0; attempt < XATTR_RETRIES; attempt++) {
    ssize_t want = llistxattr(path, NULL, 0);
    if (want < 0) return throw_errno(env, errno, "llistxattr", path);
    free(list);
    list = malloc(want > 0 ? (size_t)want : 1);
    if (list == NULL) return throw_errno(env, ENOMEM, "llistxattr", path);
    n = llistxattr(path, list, (size_t)want);
    if (n >= 0) break;
    if (errno != ERANGE) { int err = errno; free(list); return throw_errno(env, err, "llistxattr", path); }
  }
  if (n < 0) { free(list); return throw_errno(env, ERANGE, "llistxattr", path); }
  napi_value result;
  napi_create_array(env, &result);
  uint32_t count = 0;
  for (ssize_t off = 0; off < n;) {
    size_t len = strnlen(list + off, (size_t)(n - off));
    napi_value name;
    napi_create_string_utf8(env, list + off, len, &name);
    napi_set_element(env, result, count++, name);
    off += (ssize_t)len + 1;
  }
  free(list);
  return result;
}

// The `want` arguments of an xattr call (path: string, name: string, ...) into argv, and the first two as C
// strings into path (PATH_BYTES_MAX) and name (XATTR_NAME_BYTES_MAX + 1); 0 with a pending exception.
static int get_path_and_name(napi_env env, napi_callback_info info, size_t want, napi_value *argv, char *path, char *name) {
  return get_args(env, info, want, argv) &&
         get_string(env, argv[0], path, PATH_BYTES_MAX, "path must be a string") &&
         get_string(env, argv[1], name, XATTR_NAME_BYTES_MAX + 1, "name must be a string of at most 255 bytes");
}

// lgetxattr(path: string, name: string): Buffer
static napi_value js_lgetxattr(napi_env env, napi_callback_info info) {
  napi_value argv[2];
  char path[PATH_BYTES_MAX], name[XATTR_NAME_BYTES_MAX + 1];
  if (!get_path_and_name(env, info, 2, argv, path, name)) return NULL;
  for (int attempt = 0; attempt < XATTR_RETRIES; attempt++) {
    ssize_t want = lgetxattr(path, name, NULL, 0);
    if (want < 0) return throw_errno(env, errno, "lgetxattr", path);
    void *data = NULL;
    napi_value buf;
    if (napi_create_buffer(env, want > 0 ? (size_t)want : 0, &data, &buf) != napi_ok) return NULL;
    if (want == 0) return buf;
    ssize_t n = lgetxattr(path, name, data, (size_t)want);
    if (n >= 0) {
      if (n == want) return buf;
      napi_value copy;
      void *copy_data = NULL;
      napi_create_buffer_copy(env, (size_t)n, data, &copy_data, &copy);
      return copy;
    }
    if (errno != ERANGE) return throw_errno(env, errno, "lgetxattr", path);
  }
  return throw_errno(env, ERANGE, "lgetxattr", path);
}

// lsetxattr(path: string, name: string, value: Uint8Array, flags: number): void
static napi_value js_lsetxattr(napi_env env, napi_callback_info info) {
  napi_value argv[4];
  char path[PATH_BYTES_MAX], name[XATTR_NAME_BYTES_MAX + 1];
  if (!get_path_and_name(env, info, 4, argv, path, name)) return NULL;
  bool is_typed = false;
  napi_is_typedarray(env, argv[2], &is_typed);
  if (!is_typed) return throw_type(env, "value must be a Uint8Array");
  napi_typedarray_type type;
  size_t length = 0, offset = 0;
  void *data = NULL;
  napi_value arraybuffer;
  napi_get_typedarray_info(env, argv[2], &type, &length, &data, &arraybuffer, &offset);
  if (type != napi_uint8_array) return throw_type(env, "value must be a Uint8Array");
  int32_t flags = 0;
  if (napi_get_value_int32(env, argv[3], &flags) != napi_ok) return throw_type(env, "flags must be a number");
  if (lsetxattr(path, name, length > 0 ? data : "", length, flags) != 0) return throw_errno(env, errno, "lsetxattr", path);
  return NULL;
}

// mknod(path: string, mode: number, major: number, minor: number): void; mode includes the S_IF* type bits.
static napi_value js_mknod(napi_env env, napi_callback_info info) {
  napi_value argv[4];
  char path[PATH_BYTES_MAX];
  if (!get_args(env, info, 4, argv) || !get_string(env, argv[0], path, sizeof path, "path must be a string")) return NULL;
  uint32_t mode = 0, major = 0, minor = 0;
  if (napi_get_value_uint32(env, argv[1], &mode) != napi_ok ||
      napi_get_value_uint32(env, argv[2], &major) != napi_ok ||
      napi_get_value_uint32(env, argv[3], &minor) != napi_ok) return throw_type(env, "mode, major and minor must be numbers");
  if (mknod(path, (mode_t)mode, makedev(major, minor)) != 0) return throw_errno(env, errno, "mknod", path);
  return NULL;
}

// The five arguments of mount(2) from JS, at argv[0..4]: source, target, fstype, flags (MS_* bits), data.
typedef struct { char source[PATH_BYTES_MAX], target[PATH_BYTES_MAX], fstype[64], data[PATH_BYTES_MAX * 2]; unsigned long flags; } mount_args;

// False (with a pending exception) when an argument is of the wrong type or too long.
static int get_mount_args(napi_env env, napi_value *argv, mount_args *m) {
  double flags = 0;
  if (!get_string(env, argv[0], m->source, sizeof m->source, "source must be a string") ||
      !get_string(env, argv[1], m->target, sizeof m->target, "target must be a string") ||
      !get_string(env, argv[2], m->fstype, sizeof m->fstype, "fstype must be a string") ||
      !get_string(env, argv[4], m->data, sizeof m->data, "data must be a string")) return 0;
  if (napi_get_value_double(env, argv[3], &flags) != napi_ok || flags < 0) { throw_type(env, "flags must be a number"); return 0; }
  m->flags = (unsigned long)flags;
  return 1;
}

// mount(source, target, fstype, flags: number, data: string): void — mount(2).
static napi_value js_mount(napi_env env, napi_callback_info info) {
  napi_value argv[5];
  mount_args m;
  if (!get_args(env, info, 5, argv) || !get_mount_args(env, argv, &m)) return NULL;
  if (mount(m.source, m.target, m.fstype, m.flags, m.data) != 0) return throw_errno(env, errno, "mount", m.target);
  return NULL;
}

typedef struct { const char *cwd; const mount_args *m; int err; } mount_at_job;

static void *mount_at_thread(void *arg) {
  mount_at_job *j = arg;
  // A cwd of this thread's own: chdir here moves no other thread.
  if (unshare(CLONE_FS) != 0 || chdir(j->cwd) != 0) { j->err = errno; return NULL; }
  j->err = mount(j->m->source, j->m->target, j->m->fstype, j->m->flags, j->m->data) == 0 ? 0 : errno;
  return NULL;
}

// mountAt(cwd, source, target, fstype, flags: number, data: string): void — mount(2) with relative paths
// (in `target` and in `data`, e.g. overlay's lowerdir) taken from `cwd`, so the mount table shows no
// absolute host path. Runs on a short-lived thread with its own cwd (unshare(CLONE_FS)).
static napi_value js_mount_at(napi_env env, napi_callback_info info) {
  napi_value argv[6];
  char cwd[PATH_BYTES_MAX];
  mount_args m;
  if (!get_args(env, info, 6, argv) || !get_string(env, argv[0], cwd, sizeof cwd, "cwd must be a string") ||
      !get_mount_args(env, argv + 1, &m)) return NULL;
  mount_at_job job = { cwd, &m, 0 };
  pthread_t t;
  if (pthread_create(&t, NULL, mount_at_thread, &job) != 0) return throw_errno(env, EAGAIN, "pthread_create", m.target);
  pthread_join(t, NULL);
  if (job.err != 0) return throw_errno(env, job.err, "mount", m.target);
  return NULL;
}

// umount2(target, flags: number): void — flags: MNT_DETACH (2) etc.
static napi_value js_umount2(napi_env env, napi_callback_info info) {
  napi_value argv[2];
  char target[PATH_BYTES_MAX];
  int32_t flags = 0;
  if (!get_args(env, info, 2, argv) || !get_string(env, argv[0], target, sizeof target, "target must be a string")) return NULL;
  if (napi_get_value_int32(env, argv[1], &flags) != napi_ok) return throw_type(env, "flags must be a number");
  if (umount2(target, flags) != 0) return throw_errno(env, errno, "umount2", target);
  return NULL;
}

// Writes each [offset, bytes] pair of the array `runs` to fd; errno or 0. False (with a pending exception) when
// `runs` is not an array of such pairs.
static int write_runs(napi_env env, napi_value runs, int fd, int *err) {
  uint32_t n = 0;
  if (napi_get_array_length(env, runs, &n) != napi_ok) { throw_type(env, "runs must be an array of [offset, bytes]"); return 0; }
  for (uint32_t i = 0; i < n && *err == 0; i++) {
    napi_value run, offset_v, bytes_v;
    double offset = -1;
    void *bytes = NULL;
    size_t length = 0;
    bool is_buffer = false;
    if (napi_get_element(env, runs, i, &run) != napi_ok || napi_get_element(env, run, 0, &offset_v) != napi_ok ||
        napi_get_element(env, run, 1, &bytes_v) != napi_ok || napi_get_value_double(env, offset_v, &offset) != napi_ok ||
        offset < 0 || napi_is_buffer(env, bytes_v, &is_buffer) != napi_ok || !is_buffer ||
        napi_get_buffer_info(env, bytes_v, &bytes, &length) != napi_ok) {
      throw_type(env, "runs must be an array of [offset, bytes]");
      return 0;
    }
    for (size_t done = 0; done < length;) {
      ssize_t w = pwrite(fd, (char *)bytes + done, length - done, (off_t)offset + (off_t)done);
      if (w < 0 && errno == EINTR) continue;
      if (w <= 0) { *err = w < 0 ? errno : EIO; break; }
      done += (size_t)w;
    }
  }
  return 1;
}

// mountLoop(file, target, fstype, flags: number, data: string, runs?: Array<[offset, Buffer]>): void — what
// `mount -o loop` does: a free loop device backed by `file`, set to clear itself when its last user goes
// (LO_FLAGS_AUTOCLEAR), and mount(2) of it. The device stays open until the mount holds it, so it cannot clear
// itself before. `runs` are written to the device after it is set up and before the mount: the kernel fsyncs
// the backing file when a loop device is configured (seen on 6.18: loop_configure → vfs_fsync), so bytes
// written into the file before would reach its disk at once; written through the device they stay in the page
// cache like any other write to the device, and a file deleted before writeback never reaches its disk.
static napi_value js_mount_loop(napi_env env, napi_callback_info info) {
  napi_value argv[6];
  mount_args m;  // m.source is the backing file
  char dev[64];
  if (!get_args(env, info, 5, argv) || !get_mount_args(env, argv, &m)) return NULL;
  size_t argc = 6;
  napi_get_cb_info(env, info, &argc, argv, NULL, NULL);
  napi_valuetype runs_type = napi_undefined;
  if (argc >= 6) napi_typeof(env, argv[5], &runs_type);
  bool has_runs = runs_type != napi_undefined;
  if (has_runs) {
    bool is_array = false;
    if (napi_is_array(env, argv[5], &is_array) != napi_ok || !is_array) return throw_type(env, "runs must be an array of [offset, bytes]");
  }
  int backing = open(m.source, O_RDWR | O_CLOEXEC);
  if (backing < 0) return throw_errno(env, errno, "open", m.source);
  int ctl = open("/dev/loop-control", O_RDWR | O_CLOEXEC);
  if (ctl < 0) { int e = errno; close(backing); return throw_errno(env, e, "open", "/dev/loop-control"); }
  int err = EBUSY;
  const char *failed = "mount";
  bool bad_runs = false;
  for (int attempt = 0; attempt < 8 && err == EBUSY; attempt++) {
    int n = ioctl(ctl, LOOP_CTL_GET_FREE);
    if (n < 0) { err = errno; break; }
    snprintf(dev, sizeof dev, "/dev/loop%d", n);
    int loop = open(dev, O_RDWR | O_CLOEXEC);
    if (loop < 0) { err = errno == ENOENT ? EBUSY : errno; continue; }
    struct loop_config cfg;
    memset(&cfg, 0, sizeof cfg);
    cfg.fd = (uint32_t)backing;
    cfg.info.lo_flags = LO_FLAGS_AUTOCLEAR;
    if (ioctl(loop, LOOP_CONFIGURE, &cfg) != 0) {
      err = errno;  // EBUSY: another process took this device meanwhile; ask for another
      close(loop);
      continue;
    }
    err = 0;
    if (has_runs && !write_runs(env, argv[5], loop, &err)) bad_runs = true;
    if (bad_runs || err != 0) failed = "write";
    else err = mount(dev, m.target, m.fstype, m.flags, m.data) == 0 ? 0 : errno;
    close(loop);  // the last close without a mount clears the device (autoclear)
    break;
  }
  close(ctl);
  close(backing);
  if (bad_runs) return NULL;  // the TypeError is pending
  if (err != 0) return throw_errno(env, err, failed, strcmp(failed, "write") == 0 ? dev : m.target);
  return NULL;
}

// flock(fd: number, operation: number): boolean — flock(2) on an fd opened by Node. With LOCK_NB,
// false when another open file description holds a conflicting lock (EWOULDBLOCK); true once taken.
// EINTR is retried; any other failure throws.
static napi_value js_flock(napi_env env, napi_callback_info info) {
  napi_value argv[2], out;
  int32_t fd = -1, op = 0;
  if (!get_args(env, info, 2, argv)) return NULL;
  if (napi_get_value_int32(env, argv[0], &fd) != napi_ok || fd < 0) return throw_type(env, "fd must be a file descriptor");
  if (napi_get_value_int32(env, argv[1], &op) != napi_ok) return throw_type(env, "operation must be a number");
  int r;
  do { r = flock(fd, op); } while (r != 0 && errno == EINTR);
  if (r != 0 && errno != EWOULDBLOCK) {
    char what[32];
    snprintf(what, sizeof what, "fd %d", fd);
    return throw_errno(env, errno, "flock", what);
  }
  napi_get_boolean(env, r == 0, &out);
  return out;
}

void fuse_server_register(napi_env env, napi_value exports);  // fuse_server.c
void fastcdc_register(napi_env env, napi_value exports);  // fastcdc.c
void fd_passing_register(napi_env env, napi_value exports);  // fd_passing.c
void memory_register(napi_env env, napi_value exports);  // memory.c
void entry_stat_register(napi_env env, napi_value exports);  // entry_stat.c
void spawn_register(napi_env env, napi_value exports);  // spawn.c
void seccomp_supervisor_register(napi_env env, napi_value exports);  // seccomp_supervisor.c
void open_in_root_register(napi_env env, napi_value exports);  // open_in_root.c

static napi_value init(napi_env env, napi_value exports) {
  napi_property_descriptor props[] = {
    { "version", 0, version, 0, 0, 0, napi_default, 0 },
    { "llistxattr", 0, js_llistxattr, 0, 0, 0, napi_default, 0 },
    { "lgetxattr", 0, js_lgetxattr, 0, 0, 0, napi_default, 0 },
    { "lsetxattr", 0, js_lsetxattr, 0, 0, 0, napi_default, 0 },
    { "mknod", 0, js_mknod, 0, 0, 0, napi_default, 0 },
    { "mount", 0, js_mount, 0, 0, 0, napi_default, 0 },
    { "umount2", 0, js_umount2, 0, 0, 0, napi_default, 0 },
    { "mountLoop", 0, js_mount_loop, 0, 0, 0, napi_default, 0 },
    { "mountAt", 0, js_mount_at, 0, 0, 0, napi_default, 0 },
    { "flock", 0, js_flock, 0, 0, 0, napi_default, 0 },
  };
  napi_define_properties(env, exports, sizeof props / sizeof props[0], props);
  fuse_server_register(env, exports);
  fastcdc_register(env, exports);
  fd_passing_register(env, exports);
  memory_register(env, exports);
  entry_stat_register(env, exports);
  spawn_register(env, exports);
  seccomp_supervisor_register(env, exports);
  open_in_root_register(env, exports);
  return exports;
}

NAPI_MODULE(NODE_GYP_MODULE_NAME, init)
