// lstatEntry(path, out: Float64Array(14)): string[] — one call per entry of
// push's directory walk (src/image/sources/entry-stat.ts): lstat and the
// names of the extended attributes, without following a final symlink.
// Replaces Node's BigInt lstat (some twenty BigInts per call) and a separate
// llistxattr call, which asked the size first and then the list (two path
// walks); here one call into a stack buffer answers almost every entry.
//
// out: [mode, uid, gid, size, nlink, mtime_sec, dev_hi, dev_lo, ino_hi,
// ino_lo, rdev_major, rdev_minor, xattr_errno, size_exact]. The 64-bit
// numbers come as 32-bit halves, exact; mtime_sec is st_mtim.tv_sec, the
// mtime floored to whole seconds. A failed lstat throws (syscall "lstat");
// a failed llistxattr does not: its errno is out[12] and the names are [].
#define _GNU_SOURCE
#include <errno.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <sys/xattr.h>
#include <node_api.h>

#define PATH_BYTES_MAX 4096
#define LIST_STACK_BYTES 4096
#define OUT_FIELDS 14

napi_value throw_errno(napi_env env, int err, const char *syscall, const char *path);  // layerd_native.c
int get_string(napi_env env, napi_value v, char *buf, size_t cap, const char *what);  // layerd_native.c

// The xattr names of `path` into a fresh array; *err = errno on failure (and [] returned).
static napi_value list_names(napi_env env, const char *path, int *err) {
  char stack[LIST_STACK_BYTES];
  char *list = stack;
  ssize_t n = llistxattr(path, stack, sizeof stack);
  if (n < 0 && errno == ERANGE) {  // a long list: ask its size, as the plain llistxattr does
    list = NULL;
    for (int attempt = 0; attempt < 8 && n < 0; attempt++) {
      ssize_t want = llistxattr(path, NULL, 0);
      if (want < 0) break;
      free(list);
      list = malloc(want > 0 ? (size_t)want : 1);
      if (list == NULL) { errno = ENOMEM; break; }
      n = llistxattr(path, list, (size_t)want);
      if (n < 0 && errno != ERANGE) break;
    }
  }
  napi_value result;
  napi_create_array(env, &result);
  if (n < 0) *err = errno;
  uint32_t count = 0;
  for (ssize_t off = 0; n > 0 && off < n;) {
    size_t len = strnlen(list + off, (size_t)(n - off));
    napi_value name;
    napi_create_string_utf8(env, list + off, len, &name);
    napi_set_element(env, result, count++, name);
    off += (ssize_t)len + 1;
  }
  if (list != stack) free(list);
  return result;
}

static napi_value js_lstat_entry(napi_env env, napi_callback_info info) {
  size_t argc = 2;
  napi_value argv[2];
  napi_get_cb_info(env, info, &argc, argv, NULL, NULL);
  if (argc < 2) { napi_throw_type_error(env, "ERR_INVALID_ARG_TYPE", "missing arguments"); return NULL; }
  char path[PATH_BYTES_MAX];
  if (!get_string(env, argv[0], path, sizeof path, "path must be a string")) return NULL;
  napi_typedarray_type type;
  size_t length;
  void *data;
  bool is_typed = false;
  napi_is_typedarray(env, argv[1], &is_typed);
  if (!is_typed) { napi_throw_type_error(env, "ERR_INVALID_ARG_TYPE", "out must be a Float64Array"); return NULL; }
  napi_get_typedarray_info(env, argv[1], &type, &length, &data, NULL, NULL);
  if (type != napi_float64_array || length < OUT_FIELDS) { napi_throw_type_error(env, "ERR_INVALID_ARG_TYPE", "out must be a Float64Array of 14"); return NULL; }
  struct stat st;
  if (lstat(path, &st) != 0) return throw_errno(env, errno, "lstat", path);
  double *out = data;
  uint64_t dev = (uint64_t)st.st_dev, ino = (uint64_t)st.st_ino;
  out[0] = (double)st.st_mode;
  out[1] = (double)st.st_uid;
  out[2] = (double)st.st_gid;
  out[3] = (double)st.st_size;
  out[4] = (double)st.st_nlink;
  out[5] = (double)st.st_mtim.tv_sec;
  out[6] = (double)(dev >> 32);
  out[7] = (double)(dev & 0xffffffffu);
  out[8] = (double)(ino >> 32);
  out[9] = (double)(ino & 0xffffffffu);
  out[10] = (double)major(st.st_rdev);
  out[11] = (double)minor(st.st_rdev);
  int err = 0;
  napi_value names = list_names(env, path, &err);
  out[12] = (double)err;
  out[13] = (st.st_size >= 0 && st.st_size <= (off_t)9007199254740991LL) ? 1 : 0;
  return names;
}

void entry_stat_register(napi_env env, napi_value exports) {
  napi_property_descriptor props[] = {
    { "lstatEntry", 0, js_lstat_entry, 0, 0, 0, napi_default, 0 },
  };
  napi_define_properties(env, exports, sizeof props / sizeof props[0], props);
}
