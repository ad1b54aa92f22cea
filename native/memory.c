// Memory calls for the daemon's lean mode and its reclaim (src/daemon/memory/):
// glibc malloc's statistics, trim and arena cap, and the two hints that give
// page cache back without losing data: madvise on the read-only shared
// mappings of one file (the lmdb map) and posix_fadvise(POSIX_FADV_DONTNEED)
// on an open file. The caller names a file, never an address: no call here
// can zero memory.
//
//   mallocStats(): { arenaBytes, mmapBytes, inUseBytes, freeBytes, topReleasableBytes }
//   mallocTrim(): boolean           malloc_trim(0): free pages of every arena back to the system
//   mallocArenaMax(n): boolean      mallopt(M_ARENA_MAX, n)
//   mallocMmapThreshold(n): boolean mallopt(M_MMAP_THRESHOLD, n): allocations >= n bytes get their own mmap
//   unmapCleanFilePages(): number   MADV_DONTNEED on private read-only file maps with no private copy (our text)
//   adviseMappedFile(path, advice)  madvise(DONTNEED | COLD | PAGEOUT) on read-only shared maps of path
//   fadviseDontNeed(fd, off, len)   POSIX_FADV_DONTNEED
//   fadviseRandom(fd, random)       POSIX_FADV_RANDOM (no readahead on this open file) or back to POSIX_FADV_NORMAL
// Every function is synchronous; failures throw an Error with a Node-style `code`.
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <malloc.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdint.h>
#include <string.h>
#include <sys/mman.h>
#include <node_api.h>

#ifndef MADV_COLD
#define MADV_COLD 20
#endif
#ifndef MADV_PAGEOUT
#define MADV_PAGEOUT 21
#endif

static napi_value throw_code(napi_env env, int err, const char *syscall) {
  const char *code = strerrorname_np(err);
  if (code == NULL) code = "EUNKNOWN";
  char msg[256];
  snprintf(msg, sizeof msg, "%s: %s, %s", code, strerror(err), syscall);
  napi_value msg_v, code_v, error, syscall_v, errno_v;
  napi_create_string_utf8(env, msg, NAPI_AUTO_LENGTH, &msg_v);
  napi_create_string_utf8(env, code, NAPI_AUTO_LENGTH, &code_v);
  napi_create_error(env, code_v, msg_v, &error);
  napi_create_string_utf8(env, syscall, NAPI_AUTO_LENGTH, &syscall_v);
  napi_create_int32(env, -err, &errno_v);
  napi_set_named_property(env, error, "syscall", syscall_v);
  napi_set_named_property(env, error, "errno", errno_v);
  napi_throw(env, error);
  return NULL;
}

static int number_args(napi_env env, napi_callback_info info, size_t n, double *out, const char *what) {
  napi_value argv[3];
  size_t argc = 3;
  napi_get_cb_info(env, info, &argc, argv, NULL, NULL);
  if (argc < n) { napi_throw_type_error(env, "ERR_INVALID_ARG_TYPE", what); return 0; }
  for (size_t i = 0; i < n; i++) {
    if (napi_get_value_double(env, argv[i], &out[i]) != napi_ok || out[i] < 0 || out[i] > 9007199254740991.0) {
      napi_throw_type_error(env, "ERR_INVALID_ARG_TYPE", what);
      return 0;
    }
  }
  return 1;
}

static void set_number(napi_env env, napi_value obj, const char *name, double v) {
  napi_value n;
  napi_create_double(env, v, &n);
  napi_set_named_property(env, obj, name, n);
}

static napi_value js_malloc_stats(napi_env env, napi_callback_info info) {
  (void)info;
  struct mallinfo2 m = mallinfo2();
  napi_value obj;
  napi_create_object(env, &obj);
  set_number(env, obj, "arenaBytes", (double)m.arena);
  set_number(env, obj, "mmapBytes", (double)m.hblkhd);
  set_number(env, obj, "inUseBytes", (double)m.uordblks);
  set_number(env, obj, "freeBytes", (double)m.fordblks);
  set_number(env, obj, "topReleasableBytes", (double)m.keepcost);
  return obj;
}

static napi_value js_malloc_trim(napi_env env, napi_callback_info info) {
  (void)info;
  napi_value v;
  napi_get_boolean(env, malloc_trim(0) == 1, &v);
  return v;
}

// One mallopt(param, n) call from JS; `what` is the usage message for a bad n.
static napi_value mallopt_call(napi_env env, napi_callback_info info, int param, const char *what) {
  double n;
  if (!number_args(env, info, 1, &n, what)) return NULL;
  napi_value v;
  napi_get_boolean(env, mallopt(param, (int)n) == 1, &v);
  return v;
}

static napi_value js_malloc_arena_max(napi_env env, napi_callback_info info) {
  return mallopt_call(env, info, M_ARENA_MAX, "mallocArenaMax(n): n must be a non-negative number");
}

static napi_value js_malloc_mmap_threshold(napi_env env, napi_callback_info info) {
  return mallopt_call(env, info, M_MMAP_THRESHOLD, "mallocMmapThreshold(n): n must be a non-negative number");
}

// unmapCleanFilePages(): drop this process's page-table entries of the
// file-backed private mappings that are not writable and hold no private
// copy of any page (smaps "Anonymous: 0 kB"): the executable's and the
// libraries' text and read-only data. Every page of such a mapping is the
// file's page-cache page, so MADV_DONTNEED loses nothing: the next access
// faults the same page back in from the page cache (a minor fault). Mappings
// with a private copy (RELRO, written then made read-only) are left alone, as
// are writable, shared and anonymous ones; nothing can write a non-writable
// mapping between the check and the madvise. Returns the bytes advised.
static napi_value js_unmap_clean_file_pages(napi_env env, napi_callback_info info) {
  (void)info;
  FILE *smaps = fopen("/proc/self/smaps", "re");
  if (smaps == NULL) return throw_code(env, errno, "open /proc/self/smaps");
  char line[4096 + 256];
  unsigned long start = 0, end = 0;
  bool candidate = false;
  double advised = 0;
  // A mapping's header line, then its fields; act on a candidate at its "Anonymous:" field.
  while (fgets(line, sizeof line, smaps) != NULL) {
    unsigned long s, e;
    char perms[8];
    int name_at = 0;
    // Field lines ("Rss:   16 kB") never match "%lx-%lx": only a header does.
    if (sscanf(line, "%lx-%lx %7s %*s %*s %*s %n", &s, &e, perms, &name_at) >= 3) {
      start = s;
      end = e;
      candidate = name_at != 0 && line[name_at] == '/' && perms[1] != 'w' && perms[3] == 'p';
      continue;
    }
    unsigned long anon_kb;
    if (candidate && sscanf(line, "Anonymous: %lu kB", &anon_kb) == 1) {
      if (anon_kb == 0 && madvise((void *)start, end - start, MADV_DONTNEED) == 0) advised += (double)(end - start);
      candidate = false;
    }
  }
  fclose(smaps);
  napi_value v;
  napi_create_double(env, advised, &v);
  return v;
}

// adviseMappedFile(path, advice): madvise every read-only shared mapping of
// `path` (found in /proc/self/maps): 0 MADV_DONTNEED (drops our page-table
// entries only: for a read-only MAP_SHARED file mapping the pages stay in the
// page cache and fault back in on the next access, nothing is lost), 1
// MADV_COLD, 2 MADV_PAGEOUT. Writable or private mappings are never touched.
// Returns the bytes advised.
static napi_value js_advise_mapped_file(napi_env env, napi_callback_info info) {
  napi_value argv[2];
  size_t argc = 2;
  char path[4096];
  size_t len = 0;
  int32_t advice = -1;
  napi_get_cb_info(env, info, &argc, argv, NULL, NULL);
  if (argc < 2 || napi_get_value_string_utf8(env, argv[0], path, sizeof path, &len) != napi_ok || len == 0 || len >= sizeof path - 1 ||
      napi_get_value_int32(env, argv[1], &advice) != napi_ok || advice < 0 || advice > 2) {
    napi_throw_type_error(env, "ERR_INVALID_ARG_TYPE", "adviseMappedFile(path, advice): a path and 0 (unmap), 1 (cold) or 2 (pageout)");
    return NULL;
  }
  static const int advices[] = { MADV_DONTNEED, MADV_COLD, MADV_PAGEOUT };
  FILE *maps = fopen("/proc/self/maps", "re");
  if (maps == NULL) return throw_code(env, errno, "open /proc/self/maps");
  char line[4096 + 256];
  double advised = 0;
  int failed = 0;
  while (fgets(line, sizeof line, maps) != NULL) {
    unsigned long start, end;
    char perms[8];
    int name_at = 0;
    if (sscanf(line, "%lx-%lx %7s %*s %*s %*s %n", &start, &end, perms, &name_at) < 3 || name_at == 0) continue;
    char *name = line + name_at;
    name[strcspn(name, "\n")] = 0;
    if (strcmp(name, path) != 0 || perms[1] == 'w' || perms[3] != 's') continue;
    if (madvise((void *)start, end - start, advices[advice]) == 0) advised += (double)(end - start);
    else failed = errno;
  }
  fclose(maps);
  if (failed != 0 && advised == 0) return throw_code(env, failed, "madvise");
  napi_value v;
  napi_create_double(env, advised, &v);
  return v;
}

static napi_value js_fadvise_dontneed(napi_env env, napi_callback_info info) {
  double a[3];
  if (!number_args(env, info, 3, a, "fadviseDontNeed(fd, offset, length): non-negative numbers")) return NULL;
  int err = posix_fadvise((int)a[0], (off_t)a[1], (off_t)a[2], POSIX_FADV_DONTNEED);
  if (err != 0) return throw_code(env, err, "posix_fadvise(POSIX_FADV_DONTNEED)");
  return NULL;
}

static napi_value js_fadvise_random(napi_env env, napi_callback_info info) {
  size_t argc = 2;
  napi_value argv[2];
  int32_t fd = -1;
  bool random = false;
  if (napi_get_cb_info(env, info, &argc, argv, NULL, NULL) != napi_ok || argc < 2 ||
      napi_get_value_int32(env, argv[0], &fd) != napi_ok || fd < 0 || napi_get_value_bool(env, argv[1], &random) != napi_ok) {
    napi_throw_type_error(env, NULL, "fadviseRandom(fd, random): a non-negative fd and a boolean");
    return NULL;
  }
  int err = posix_fadvise(fd, 0, 0, random ? POSIX_FADV_RANDOM : POSIX_FADV_NORMAL);
  if (err != 0) return throw_code(env, err, random ? "posix_fadvise(POSIX_FADV_RANDOM)" : "posix_fadvise(POSIX_FADV_NORMAL)");
  return NULL;
}

void memory_register(napi_env env, napi_value exports) {
  napi_property_descriptor props[] = {
    { "mallocStats", 0, js_malloc_stats, 0, 0, 0, napi_default, 0 },
    { "mallocTrim", 0, js_malloc_trim, 0, 0, 0, napi_default, 0 },
    { "mallocArenaMax", 0, js_malloc_arena_max, 0, 0, 0, napi_default, 0 },
    { "mallocMmapThreshold", 0, js_malloc_mmap_threshold, 0, 0, 0, napi_default, 0 },
    { "unmapCleanFilePages", 0, js_unmap_clean_file_pages, 0, 0, 0, napi_default, 0 },
    { "adviseMappedFile", 0, js_advise_mapped_file, 0, 0, 0, napi_default, 0 },
    { "fadviseDontNeed", 0, js_fadvise_dontneed, 0, 0, 0, napi_default, 0 },
    { "fadviseRandom", 0, js_fadvise_random, 0, 0, 0, napi_default, 0 },
  };
  napi_define_properties(env, exports, sizeof props / sizeof props[0], props);
}
