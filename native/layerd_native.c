// layerd's native addon: the few system calls Node does not expose
// (extended attributes without following symlinks, mknod), and a FUSE
// server that speaks the kernel protocol itself (fuse_server.c).
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
#include <node_api.h>

#define PATH_BYTES_MAX 4096
#define XATTR_NAME_BYTES_MAX 256
#define XATTR_RETRIES 8

// Throws an errno error like Node's fs does; returns NULL for convenience.
static napi_value throw_errno(napi_env env, int err, const char *syscall, const char *path) {
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
static int get_string(napi_env env, napi_value v, char *buf, size_t cap, const char *what) {
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
  napi_create_uint32(env, 3, &v);
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

// lgetxattr(path: string, name: string): Buffer
static napi_value js_lgetxattr(napi_env env, napi_callback_info info) {
  napi_value argv[2];
  char path[PATH_BYTES_MAX], name[XATTR_NAME_BYTES_MAX + 1];
  if (!get_args(env, info, 2, argv) ||
      !get_string(env, argv[0], path, sizeof path, "path must be a string") ||
      !get_string(env, argv[1], name, sizeof name, "name must be a string of at most 255 bytes")) return NULL;
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
  if (!get_args(env, info, 4, argv) ||
      !get_string(env, argv[0], path, sizeof path, "path must be a string") ||
      !get_string(env, argv[1], name, sizeof name, "name must be a string of at most 255 bytes")) return NULL;
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

void fuse_server_register(napi_env env, napi_value exports);  // fuse_server.c

static napi_value init(napi_env env, napi_value exports) {
  napi_property_descriptor props[] = {
    { "version", 0, version, 0, 0, 0, napi_default, 0 },
    { "llistxattr", 0, js_llistxattr, 0, 0, 0, napi_default, 0 },
    { "lgetxattr", 0, js_lgetxattr, 0, 0, 0, napi_default, 0 },
    { "lsetxattr", 0, js_lsetxattr, 0, 0, 0, napi_default, 0 },
    { "mknod", 0, js_mknod, 0, 0, 0, napi_default, 0 },
  };
  napi_define_properties(env, exports, sizeof props / sizeof props[0], props);
  fuse_server_register(env, exports);
  return exports;
}

NAPI_MODULE(NODE_GYP_MODULE_NAME, init)
