// A process spawn whose cost does not grow with the caller's memory.
//
// libuv (and so Node's child_process) starts a child with fork() on Linux:
// the kernel copies the parent's page tables, so a spawn from a node
// process of 350 MB RSS took 90 ms here against 5 ms from a small one, and
// the event loop stands still meanwhile. glibc's posix_spawn() starts the
// child with clone(CLONE_VM | CLONE_VFORK): nothing is copied, the parent
// waits only until the child has called execve. This is what a node agent
// that starts thousands of sandboxes (one runtime process each) needs.
//
//   spawnVfork(path, argv, envp, cwd | null, pipes, onExit) -> { pid, fds }
//   childWatchExit(pid, onExit)   the same exit watch for a child started otherwise (the holder's adopted layerd)
//
// `pipes` pipes become the child's fds 0 .. pipes-1: fd 0 and fds 3.. are
// read by the child (the parent gets their write ends), fds 1 and 2 are
// written by it (the parent gets their read ends). Every other fd of the
// parent stays closed in the child as long as it is close-on-exec (Node and
// libuv open theirs so). Signal dispositions are reset to the default and
// the mask is emptied (Node ignores SIGPIPE; an ignored signal survives
// execve; glibc's two internal signals, 32 and 33, cannot be named here and
// keep the parent's disposition, which glibc resets in the program it
// starts). `path` is the program itself (no PATH search here).
//
// The exit is watched with a pidfd on the caller's event loop (uv_poll):
// `onExit(code, signal)` runs once, with the exit code (signal 0) or the
// killing signal (code -1), after the child is reaped (waitid P_PIDFD). Until
// then the pid stays the child's (a zombie is not reaped by anyone else:
// libuv waits only for pids it spawned), so kill(pid) cannot reach a stranger.
// Errors throw a Node-style errno error (ENOENT, EACCES, …; syscall
// 'posix_spawn', path) and leave nothing open.
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <spawn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>
#include <node_api.h>
#include <uv.h>
#include "poll_once.h"

#ifndef P_PIDFD
#define P_PIDFD 3
#endif
#define MAX_PIPES 16
#define MAX_STRINGS 4096
#define MAX_STRING_BYTES (1024 * 1024)

typedef struct {
  poll_once watch;  // first: the watch frees this struct when it closes
  int pidfd;
} child_watch;

napi_value throw_errno(napi_env env, int err, const char *syscall, const char *path);  // layerd_native.c

static napi_value type_error(napi_env env, const char *msg) {
  napi_throw_type_error(env, "ERR_INVALID_ARG_TYPE", msg);
  return NULL;
}

// A JS string as a malloc'd C string; NULL (with a pending exception) when it is not a string.
static char *dup_string(napi_env env, napi_value v, const char *what) {
  size_t len = 0;
  if (napi_get_value_string_utf8(env, v, NULL, 0, &len) != napi_ok || len > MAX_STRING_BYTES) {
    type_error(env, what);
    return NULL;
  }
  char *s = malloc(len + 1);
  if (s == NULL) { type_error(env, "out of memory"); return NULL; }
  napi_get_value_string_utf8(env, v, s, len + 1, &len);
  if (strlen(s) != len) { free(s); type_error(env, what); return NULL; }  // an embedded NUL
  return s;
}

static void free_strings(char **list) {
  if (list == NULL) return;
  for (char **p = list; *p != NULL; p++) free(*p);
  free(list);
}

// A JS array of strings as a NULL-terminated malloc'd list; NULL (with a pending exception) otherwise.
static char **get_strings(napi_env env, napi_value v, const char *what) {
  bool is_array = false;
  uint32_t n = 0;
  if (napi_is_array(env, v, &is_array) != napi_ok || !is_array || napi_get_array_length(env, v, &n) != napi_ok || n > MAX_STRINGS) {
    type_error(env, what);
    return NULL;
  }
  char **list = calloc(n + 1, sizeof(char *));
  if (list == NULL) { type_error(env, "out of memory"); return NULL; }
  for (uint32_t i = 0; i < n; i++) {
    napi_value e;
    if (napi_get_element(env, v, i, &e) != napi_ok || (list[i] = dup_string(env, e, what)) == NULL) {
      free_strings(list);
      return NULL;
    }
  }
  return list;
}

// onExit(code, signal)
static void child_exit_args(napi_env env, void *ctx, napi_value *argv) {
  const int *end = ctx;
  napi_create_int32(env, end[0], &argv[0]);
  napi_create_int32(env, end[1], &argv[1]);
}

static void on_pidfd_readable(uv_poll_t *poll, int status, int events) {
  (void)events;
  child_watch *w = poll->data;
  siginfo_t si;
  memset(&si, 0, sizeof si);
  int r;
  do { r = waitid(P_PIDFD, (id_t)w->pidfd, &si, WEXITED | WNOHANG); } while (r != 0 && errno == EINTR);
  (void)status;
  if ((r == 0 && si.si_pid == 0) || (r != 0 && errno == EAGAIN)) return;  // woken, but not exited yet
  int code = -1, signal = 0;
  if (r == 0 && si.si_code == CLD_EXITED) code = si.si_status;
  else if (r == 0) signal = si.si_status;
  else signal = SIGKILL;  // cannot happen for our own child; report it as killed rather than never
  close(w->pidfd);
  int end[2] = { code, signal };
  poll_once_call(&w->watch, 2, child_exit_args, end);
}

// Watch child `pid`'s exit on the event loop: on_exit(code, signal) once it is reaped. NULL, or the call that
// failed with *err set (nothing is left open).
static const char *watch_exit(napi_env env, pid_t pid, napi_value on_exit, const char *name, int *err) {
  int pidfd = (int)syscall(SYS_pidfd_open, pid, 0);
  if (pidfd < 0) { *err = errno; return "pidfd_open"; }
  fcntl(pidfd, F_SETFD, FD_CLOEXEC);
  child_watch *w = calloc(1, sizeof *w);
  if (w != NULL) w->pidfd = pidfd;
  if (w == NULL || poll_once_start(env, &w->watch, w, pidfd, UV_READABLE, on_pidfd_readable, on_exit, name) != 0) {
    free(w);
    close(pidfd);
    *err = ENOMEM;
    return "uv_poll_init";
  }
  return NULL;
}

// childWatchExit(pid, onExit(code, signal)): the same exit watch for a child this process did not start with
// spawnVfork or libuv (the holder's adopted layerd, native/holder_front.c: forked before the exec into node).
static napi_value js_child_watch_exit(napi_env env, napi_callback_info info) {
  napi_value args[2];
  size_t argc = 2;
  napi_get_cb_info(env, info, &argc, args, NULL, NULL);
  int32_t pid = 0;
  napi_valuetype t = napi_undefined;
  if (argc >= 2) napi_typeof(env, args[1], &t);
  if (argc < 2 || napi_get_value_int32(env, args[0], &pid) != napi_ok || pid <= 0 || t != napi_function) return type_error(env, "childWatchExit(pid > 0, onExit)");
  // Only a child of ours can be reaped here (and its pid is ours until then): ECHILD otherwise.
  char what[32];
  snprintf(what, sizeof what, "pid %d", pid);
  siginfo_t si;
  memset(&si, 0, sizeof si);
  if (waitid(P_PID, (id_t)pid, &si, WEXITED | WNOHANG | WNOWAIT) != 0) return throw_errno(env, errno, "waitid", what);
  int err = 0;
  const char *failed = watch_exit(env, pid, args[1], "layerd.childWatchExit", &err);
  if (failed != NULL) return throw_errno(env, err, failed, what);
  return NULL;
}

static void close_all(int (*pipes)[2], int n) {
  for (int i = 0; i < n; i++) {
    if (pipes[i][0] >= 0) close(pipes[i][0]);
    if (pipes[i][1] >= 0) close(pipes[i][1]);
  }
}

// The caller's fds to hand the child as its fds `first`, `first + 1`, … (optional 7th argument, an array).
// Each is duplicated above every target number first, so no dup2 overwrites another's source.
static int get_inherited(napi_env env, napi_value v, int first, int *out, int cap) {
  bool is_array = false;
  napi_is_array(env, v, &is_array);
  if (!is_array) return -1;
  uint32_t n = 0;
  napi_get_array_length(env, v, &n);
  if ((int)n > cap) return -1;
  for (uint32_t i = 0; i < n; i++) {
    napi_value e;
    int32_t fd = -1;
    napi_get_element(env, v, i, &e);
    if (napi_get_value_int32(env, e, &fd) != napi_ok || fd < 0) return -1;
    out[i] = fcntl(fd, F_DUPFD_CLOEXEC, first + (int)n);
    if (out[i] < 0) return -1;
  }
  return (int)n;
}

// spawnVfork(path, argv, envp, cwd | null, pipes, onExit, inheritFds?) -> { pid, fds }
static napi_value js_spawn_vfork(napi_env env, napi_callback_info info) {
  napi_value args[7];
  size_t argc = 7;
  napi_get_cb_info(env, info, &argc, args, NULL, NULL);
  if (argc < 6) return type_error(env, "spawnVfork(path, argv, envp, cwd, pipes, onExit)");
  napi_valuetype t;
  napi_typeof(env, args[5], &t);
  if (t != napi_function) return type_error(env, "onExit must be a function");
  int32_t npipes = 0;
  if (napi_get_value_int32(env, args[4], &npipes) != napi_ok || npipes < 0 || npipes > MAX_PIPES) return type_error(env, "pipes must be 0..16");
  napi_typeof(env, args[3], &t);
  char *path = NULL, *cwd = NULL, **argv = NULL, **envp = NULL;
  napi_value out = NULL;
  int pipes[MAX_PIPES][2];
  for (int i = 0; i < MAX_PIPES; i++) pipes[i][0] = pipes[i][1] = -1;
  posix_spawn_file_actions_t fa;
  posix_spawnattr_t attr;
  bool fa_ready = false, attr_ready = false;

  if ((path = dup_string(env, args[0], "path must be a string")) == NULL) goto done;
  if ((argv = get_strings(env, args[1], "argv must be an array of strings")) == NULL) goto done;
  if ((envp = get_strings(env, args[2], "envp must be an array of strings")) == NULL) goto done;
  if (t != napi_null && t != napi_undefined && (cwd = dup_string(env, args[3], "cwd must be a string or null")) == NULL) goto done;

  int child_end[MAX_PIPES];
  for (int i = 0; i < npipes; i++) {
    if (pipe2(pipes[i], O_CLOEXEC) != 0) { throw_errno(env, errno, "pipe2", path); goto done; }
    int child_reads = i == 0 || i >= 3;
    child_end[i] = pipes[i][child_reads ? 0 : 1];
    // A child end numbered below `npipes` would be overwritten by an earlier dup2 in the child: move it up.
    if (child_end[i] < npipes) {
      int moved = fcntl(child_end[i], F_DUPFD_CLOEXEC, npipes);
      if (moved < 0) { throw_errno(env, errno, "fcntl", path); goto done; }
      close(child_end[i]);
      pipes[i][child_reads ? 0 : 1] = child_end[i] = moved;
    }
  }
  int inherited[MAX_PIPES];
  int ninherit = 0;
  napi_valuetype it = napi_undefined;
  if (argc >= 7) napi_typeof(env, args[6], &it);
  if (it != napi_undefined && it != napi_null) {
    ninherit = get_inherited(env, args[6], npipes, inherited, MAX_PIPES - npipes);
    if (ninherit < 0) { type_error(env, "inheritFds must be an array of open fds (pipes + fds <= 16)"); goto done; }
  }
  posix_spawn_file_actions_init(&fa);
  fa_ready = true;
  for (int i = 0; i < npipes; i++) posix_spawn_file_actions_adddup2(&fa, child_end[i], i);
  for (int i = 0; i < ninherit; i++) posix_spawn_file_actions_adddup2(&fa, inherited[i], npipes + i);
  if (cwd != NULL) posix_spawn_file_actions_addchdir_np(&fa, cwd);
  posix_spawnattr_init(&attr);
  attr_ready = true;
  sigset_t none, all;
  sigemptyset(&none);
  sigfillset(&all);
  sigdelset(&all, SIGKILL);
  sigdelset(&all, SIGSTOP);
  posix_spawnattr_setsigmask(&attr, &none);
  posix_spawnattr_setsigdefault(&attr, &all);
  posix_spawnattr_setflags(&attr, POSIX_SPAWN_SETSIGMASK | POSIX_SPAWN_SETSIGDEF);

  pid_t pid;
  int err = posix_spawn(&pid, path, &fa, &attr, argv, envp);
  for (int i = 0; i < ninherit; i++) close(inherited[i]);
  if (err != 0) { throw_errno(env, err, "posix_spawn", path); goto done; }
  const char *failed = watch_exit(env, pid, args[5], "layerd.spawnVfork", &err);
  if (failed != NULL) {
    kill(pid, SIGKILL);
    waitpid(pid, NULL, 0);
    throw_errno(env, err, failed, path);
    goto done;
  }

  // The parent keeps the other ends; the child's are closed here (the child has its own copies).
  napi_value fds, pid_v, fd_v;
  napi_create_array_with_length(env, (size_t)npipes, &fds);
  for (int i = 0; i < npipes; i++) {
    int child_reads = i == 0 || i >= 3;
    close(child_end[i]);
    int mine = pipes[i][child_reads ? 1 : 0];
    pipes[i][0] = pipes[i][1] = -1;
    napi_create_int32(env, mine, &fd_v);
    napi_set_element(env, fds, (uint32_t)i, fd_v);
  }
  napi_create_object(env, &out);
  napi_create_int32(env, pid, &pid_v);
  napi_set_named_property(env, out, "pid", pid_v);
  napi_set_named_property(env, out, "fds", fds);

done:
  close_all(pipes, MAX_PIPES);
  if (fa_ready) posix_spawn_file_actions_destroy(&fa);
  if (attr_ready) posix_spawnattr_destroy(&attr);
  free(path);
  free(cwd);
  free_strings(argv);
  free_strings(envp);
  return out;
}

void spawn_register(napi_env env, napi_value exports) {
  napi_property_descriptor props[] = {
    { "spawnVfork", 0, js_spawn_vfork, 0, 0, 0, napi_default, 0 },
    { "childWatchExit", 0, js_child_watch_exit, 0, 0, 0, napi_default, 0 },
  };
  napi_define_properties(env, exports, sizeof props / sizeof props[0], props);
}
