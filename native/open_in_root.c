// openInRoot(rootFd, path, flags, mode): number — openat2(2) with
// RESOLVE_IN_ROOT | RESOLVE_NO_MAGICLINKS: `path` is resolved as if `rootFd`
// were the root directory, so `..`, absolute paths and absolute symlinks a
// sandbox planted all stay under it, and /proc magic links (/proc/N/root,
// /proc/self/fd/N) are refused (ELOOP). Node has no openat2; the API's file
// calls (src/api/sandbox-files.ts) open every path through this. Returns the
// new fd (O_CLOEXEC is always added); throws an errno error (syscall
// "openat2") on failure.
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <linux/openat2.h>
#include <string.h>
#include <sys/syscall.h>
#include <unistd.h>
#include <node_api.h>

#define PATH_BYTES_MAX 4096

napi_value throw_errno(napi_env env, int err, const char *syscall, const char *path);  // layerd_native.c
int get_string(napi_env env, napi_value v, char *buf, size_t cap, const char *what);  // layerd_native.c

static napi_value js_open_in_root(napi_env env, napi_callback_info info) {
  size_t argc = 4;
  napi_value argv[4], out;
  napi_get_cb_info(env, info, &argc, argv, NULL, NULL);
  if (argc < 4) { napi_throw_type_error(env, "ERR_INVALID_ARG_TYPE", "openInRoot takes rootFd, path, flags, mode"); return NULL; }
  int32_t root = -1, flags = 0;
  uint32_t mode = 0;
  char path[PATH_BYTES_MAX];
  if (napi_get_value_int32(env, argv[0], &root) != napi_ok || root < 0) { napi_throw_type_error(env, "ERR_INVALID_ARG_TYPE", "rootFd must be a file descriptor"); return NULL; }
  if (!get_string(env, argv[1], path, sizeof path, "path must be a string of at most 4095 bytes without NUL")) return NULL;
  if (napi_get_value_int32(env, argv[2], &flags) != napi_ok) { napi_throw_type_error(env, "ERR_INVALID_ARG_TYPE", "flags must be a number"); return NULL; }
  if (napi_get_value_uint32(env, argv[3], &mode) != napi_ok || mode > 07777) { napi_throw_type_error(env, "ERR_INVALID_ARG_TYPE", "mode must be a permission number"); return NULL; }
  struct open_how how;
  memset(&how, 0, sizeof how);
  how.flags = (uint64_t)(uint32_t)flags | O_CLOEXEC;
  // The kernel refuses a mode without O_CREAT/O_TMPFILE.
  how.mode = (flags & (O_CREAT | __O_TMPFILE)) != 0 ? mode : 0;
  how.resolve = RESOLVE_IN_ROOT | RESOLVE_NO_MAGICLINKS;
  long fd;
  do { fd = syscall(SYS_openat2, root, path, &how, sizeof how); } while (fd < 0 && errno == EINTR);
  if (fd < 0) return throw_errno(env, errno, "openat2", path);
  napi_create_int32(env, (int32_t)fd, &out);
  return out;
}

void open_in_root_register(napi_env env, napi_value exports) {
  napi_property_descriptor props[] = {
    { "openInRoot", 0, js_open_in_root, 0, 0, 0, napi_default, 0 },
  };
  napi_define_properties(env, exports, sizeof props / sizeof props[0], props);
}
