// A seccomp user-notification supervisor on its own thread, one per sandboxed
// command. The sandbox's filter returns SECCOMP_RET_USER_NOTIF for the calls
// the deny policy refuses; this thread receives each notification, reads who
// made it (comm, pid inside the sandbox, a path argument when the policy names
// one), answers EPERM at once and hands a copy to JavaScript through a
// thread-safe function. The answer never waits on the JS event loop, so a busy
// or stalled loop delays only the record, never the sandbox; and a sandbox that
// floods denied calls gets every call refused but only a token bucket's worth of
// events (the rest are counted as dropped). Allowed calls never reach here.
//
// The listener fd arrives one of two ways:
//  - MODE_SOCKET: on a connected unix socket (the process tier's helper sends
//    it with SCM_RIGHTS after installing its filter);
//  - MODE_LISTEN: on a listening unix socket that runc connects to
//    (linux.seccomp.listenerPath), with runc's JSON state as the payload.
// The thread ends when every task under the filter is gone (POLLHUP on the
// listener), when stop() is called, or when the source hangs up first.
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <linux/seccomp.h>
#include <poll.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>
#include <node_api.h>

enum { MODE_SOCKET = 0, MODE_LISTEN = 1 };
#define MAX_PATH_RULES 64
#define PATH_BYTES 256
#define QUEUE_MAX 256

typedef struct {
  double time_ms;
  int64_t pid, nspid;
  int32_t nr;
  uint64_t args[6];
  char comm[17];
  char path[PATH_BYTES];
} denial;

typedef struct {
  int32_t nr, arg;
} path_rule;

typedef struct {
  napi_threadsafe_function tsfn;
  int source, mode, stopfd;
  path_rule rules[MAX_PATH_RULES];
  int nrules;
  double tokens, burst, refill_per_ms, last_ms;
  uint64_t dropped, answered;
} supervisor;

// What the thread sends to JS: one denial, or (ended) the totals.
typedef struct {
  bool ended;
  denial d;
  uint64_t dropped, answered;
  char error[128];
} message;

static double now_ms(clockid_t clk) {
  struct timespec ts;
  clock_gettime(clk, &ts);
  return (double)ts.tv_sec * 1e3 + (double)ts.tv_nsec / 1e6;
}

static void read_small(const char *path, char *out, size_t cap) {
  out[0] = 0;
  int fd = open(path, O_RDONLY | O_CLOEXEC);
  if (fd < 0) return;
  ssize_t n = read(fd, out, cap - 1);
  close(fd);
  out[n > 0 ? n : 0] = 0;
}

static void fill_process(denial *d) {
  char path[64], buf[2048];
  snprintf(path, sizeof path, "/proc/%lld/comm", (long long)d->pid);
  read_small(path, d->comm, sizeof d->comm);
  char *nl = strchr(d->comm, '\n');
  if (nl != NULL) *nl = 0;
  // NSpid lists the pid in each nested namespace; the last is the sandbox's own view.
  snprintf(path, sizeof path, "/proc/%lld/status", (long long)d->pid);
  read_small(path, buf, sizeof buf);
  d->nspid = -1;
  char *line = strstr(buf, "\nNSpid:");
  if (line == NULL) return;
  line += 7;
  char *end = strchr(line, '\n');
  if (end != NULL) *end = 0;
  char *tok, *save = NULL;
  for (tok = strtok_r(line, " \t", &save); tok != NULL; tok = strtok_r(NULL, " \t", &save)) d->nspid = strtoll(tok, NULL, 10);
}

// A NUL-terminated string from the caller's memory; the notification id is checked after the read so a
// pid reused meanwhile cannot lend its memory to the record.
static void fill_path(supervisor *s, int listener, uint64_t id, denial *d) {
  d->path[0] = 0;
  for (int i = 0; i < s->nrules; i++) {
    if (s->rules[i].nr != d->nr) continue;
    uint64_t addr = d->args[s->rules[i].arg];
    if (addr == 0) return;
    char path[64];
    snprintf(path, sizeof path, "/proc/%lld/mem", (long long)d->pid);
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) return;
    ssize_t n = pread(fd, d->path, PATH_BYTES - 1, (off_t)addr);
    close(fd);
    d->path[n > 0 ? n : 0] = 0;
    if (ioctl(listener, SECCOMP_IOCTL_NOTIF_ID_VALID, &id) != 0) d->path[0] = 0;
    return;
  }
}

static bool take_token(supervisor *s) {
  double t = now_ms(CLOCK_MONOTONIC);
  s->tokens += (t - s->last_ms) * s->refill_per_ms;
  if (s->tokens > s->burst) s->tokens = s->burst;
  s->last_ms = t;
  if (s->tokens < 1) return false;
  s->tokens -= 1;
  return true;
}

static void post(supervisor *s, message *m, bool must) {
  napi_status st = napi_call_threadsafe_function(s->tsfn, m, must ? napi_tsfn_blocking : napi_tsfn_nonblocking);
  if (st != napi_ok) {
    if (!m->ended) s->dropped++;
    free(m);
  }
}

// One notification: answer EPERM first (the caller waits on it), then record.
static void handle_one(supervisor *s, int listener) {
  struct seccomp_notif req;
  memset(&req, 0, sizeof req);
  if (ioctl(listener, SECCOMP_IOCTL_NOTIF_RECV, &req) != 0) return;  // ENOENT: the caller died meanwhile
  denial d;
  memset(&d, 0, sizeof d);
  d.time_ms = now_ms(CLOCK_REALTIME);
  d.pid = req.pid;
  d.nr = req.data.nr;
  memcpy(d.args, req.data.args, sizeof d.args);
  bool record = take_token(s);
  // The caller's memory and /proc entries are read before the answer, while it is stopped in the call.
  if (record) { fill_process(&d); fill_path(s, listener, req.id, &d); }
  struct seccomp_notif_resp resp;
  memset(&resp, 0, sizeof resp);
  resp.id = req.id;
  resp.error = -EPERM;
  if (ioctl(listener, SECCOMP_IOCTL_NOTIF_SEND, &resp) == 0) s->answered++;
  if (!record) { s->dropped++; return; }
  message *m = calloc(1, sizeof *m);
  if (m == NULL) { s->dropped++; return; }
  m->d = d;
  post(s, m, false);
}

// The listener fd from one message on `sock`; -1 when none came.
static int receive_fd(int sock) {
  char data[65536];
  char control[CMSG_SPACE(sizeof(int) * 8)];
  struct iovec iov = { data, sizeof data };
  struct msghdr msg = { 0 };
  msg.msg_iov = &iov;
  msg.msg_iovlen = 1;
  msg.msg_control = control;
  msg.msg_controllen = sizeof control;
  ssize_t n;
  do n = recvmsg(sock, &msg, MSG_CMSG_CLOEXEC); while (n < 0 && errno == EINTR);
  if (n < 0) return -1;
  int got = -1;
  for (struct cmsghdr *c = CMSG_FIRSTHDR(&msg); c != NULL; c = CMSG_NXTHDR(&msg, c)) {
    if (c->cmsg_level != SOL_SOCKET || c->cmsg_type != SCM_RIGHTS) continue;
    int nfds = (int)((c->cmsg_len - CMSG_LEN(0)) / sizeof(int));
    int *fds = (int *)CMSG_DATA(c);
    for (int i = 0; i < nfds; i++) {
      if (got < 0) got = fds[i]; else close(fds[i]);
    }
  }
  return got;
}

// Waits for `fd` to be readable or the stop fd; 1 readable, 0 stopped or hung up without data.
static int wait_readable(supervisor *s, int fd) {
  struct pollfd p[2] = { { fd, POLLIN, 0 }, { s->stopfd, POLLIN, 0 } };
  for (;;) {
    int r = poll(p, 2, -1);
    if (r < 0 && errno == EINTR) continue;
    if (r < 0 || p[1].revents != 0) return 0;
    if (p[0].revents & POLLIN) return 1;
    if (p[0].revents & (POLLHUP | POLLERR | POLLNVAL)) return 0;
  }
}

static int obtain_listener(supervisor *s, char *error, size_t cap) {
  if (!wait_readable(s, s->source)) { snprintf(error, cap, "no seccomp listener arrived"); return -1; }
  int conn = s->source;
  if (s->mode == MODE_LISTEN) {
    conn = accept4(s->source, NULL, NULL, SOCK_CLOEXEC);
    if (conn < 0) { snprintf(error, cap, "accept: %s", strerror(errno)); return -1; }
  }
  int fd = receive_fd(conn);
  if (conn != s->source) close(conn);
  if (fd < 0) snprintf(error, cap, "no seccomp listener arrived: %s", strerror(errno));
  return fd;
}

static void *run(void *arg) {
  supervisor *s = arg;
  message *end = calloc(1, sizeof *end);
  char error[128] = "";
  int listener = obtain_listener(s, error, sizeof error);
  close(s->source);
  s->source = -1;
  if (listener >= 0) {
    struct pollfd p[2] = { { listener, POLLIN, 0 }, { s->stopfd, POLLIN, 0 } };
    for (;;) {
      int r = poll(p, 2, -1);
      if (r < 0 && errno == EINTR) continue;
      if (r < 0) break;
      if (p[0].revents & POLLIN) { handle_one(s, listener); continue; }
      if (p[0].revents & (POLLHUP | POLLERR | POLLNVAL)) break;  // no task left under the filter
      if (p[1].revents != 0) break;
    }
    close(listener);
  }
  if (end != NULL) {
    end->ended = true;
    end->dropped = s->dropped;
    end->answered = s->answered;
    snprintf(end->error, sizeof end->error, "%s", error);
    post(s, end, true);
  }
  napi_release_threadsafe_function(s->tsfn, napi_tsfn_release);
  return NULL;
}

static void set_number(napi_env env, napi_value obj, const char *name, double v) {
  napi_value x;
  napi_create_double(env, v, &x);
  napi_set_named_property(env, obj, name, x);
}

static void set_string(napi_env env, napi_value obj, const char *name, const char *v) {
  napi_value x;
  napi_create_string_utf8(env, v, NAPI_AUTO_LENGTH, &x);
  napi_set_named_property(env, obj, name, x);
}

static void call_js(napi_env env, napi_value cb, void *context, void *data) {
  (void)context;
  message *m = data;
  if (env != NULL && cb != NULL) {
    napi_value obj, undef, argv[1];
    napi_create_object(env, &obj);
    if (m->ended) {
      set_number(env, obj, "dropped", (double)m->dropped);
      set_number(env, obj, "answered", (double)m->answered);
      if (m->error[0] != 0) set_string(env, obj, "error", m->error);
    } else {
      set_number(env, obj, "time", m->d.time_ms);
      set_number(env, obj, "pid", (double)m->d.pid);
      set_number(env, obj, "nspid", (double)m->d.nspid);
      set_number(env, obj, "nr", m->d.nr);
      set_string(env, obj, "comm", m->d.comm);
      if (m->d.path[0] != 0) set_string(env, obj, "path", m->d.path);
      napi_value args;
      napi_create_array_with_length(env, 6, &args);
      for (uint32_t i = 0; i < 6; i++) {
        napi_value b;
        napi_create_bigint_uint64(env, m->d.args[i], &b);
        napi_set_element(env, args, i, b);
      }
      napi_set_named_property(env, obj, "args", args);
    }
    napi_value ended;
    napi_get_boolean(env, m->ended, &ended);
    napi_set_named_property(env, obj, "ended", ended);
    argv[0] = obj;
    napi_get_undefined(env, &undef);
    napi_call_function(env, undef, cb, 1, argv, NULL);
  }
  free(m);
}

static void finalize(napi_env env, void *data, void *hint) {
  (void)env; (void)hint;
  supervisor *s = data;
  close(s->stopfd);
  free(s);
}

static napi_value throw_errno(napi_env env, int err, const char *what) {
  char msg[160];
  snprintf(msg, sizeof msg, "%s: %s", what, strerror(err));
  napi_throw_error(env, NULL, msg);
  return NULL;
}

// seccompSupervise(sourceFd, mode, pathRules: Int32Array [nr, arg, …], burst, refillPerSecond, onMessage) -> stopFd
// The thread owns sourceFd from here on (it is closed even on error). onMessage gets each denial and then one
// { ended: true, dropped, answered, error? }. The returned number is an eventfd; seccompSupervisorStop(it) ends the
// thread (valid until the ended message has been delivered).
static napi_value js_supervise(napi_env env, napi_callback_info info) {
  napi_value argv[6];
  size_t argc = 6;
  napi_get_cb_info(env, info, &argc, argv, NULL, NULL);
  int32_t source = -1, mode = 0;
  double burst = 0, refill = 0;
  if (argc < 6 || napi_get_value_int32(env, argv[0], &source) != napi_ok || napi_get_value_int32(env, argv[1], &mode) != napi_ok ||
      napi_get_value_double(env, argv[3], &burst) != napi_ok || napi_get_value_double(env, argv[4], &refill) != napi_ok) {
    napi_throw_type_error(env, NULL, "seccompSupervise(sourceFd, mode, pathRules, burst, refillPerSecond, onMessage)");
    return NULL;
  }
  napi_typedarray_type tt;
  size_t len = 0;
  void *raw = NULL;
  bool is_ta = false;
  napi_is_typedarray(env, argv[2], &is_ta);
  if (!is_ta || napi_get_typedarray_info(env, argv[2], &tt, &len, &raw, NULL, NULL) != napi_ok || tt != napi_int32_array || len % 2 != 0 || len / 2 > MAX_PATH_RULES) {
    napi_throw_type_error(env, NULL, "pathRules must be an Int32Array of [nr, argIndex] pairs (at most 64)");
    return NULL;
  }
  supervisor *s = calloc(1, sizeof *s);
  if (s == NULL) return throw_errno(env, ENOMEM, "seccompSupervise");
  s->source = source;
  s->mode = mode == MODE_LISTEN ? MODE_LISTEN : MODE_SOCKET;
  s->nrules = (int)(len / 2);
  for (int i = 0; i < s->nrules; i++) {
    int32_t arg = ((int32_t *)raw)[2 * i + 1];
    s->rules[i].nr = ((int32_t *)raw)[2 * i];
    s->rules[i].arg = arg >= 0 && arg < 6 ? arg : 0;
  }
  s->burst = s->tokens = burst;
  s->refill_per_ms = refill / 1000.0;
  s->last_ms = now_ms(CLOCK_MONOTONIC);
  s->stopfd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
  if (s->stopfd < 0) { int e = errno; close(source); free(s); return throw_errno(env, e, "eventfd"); }
  napi_value name;
  napi_create_string_utf8(env, "layerd.seccompSupervise", NAPI_AUTO_LENGTH, &name);
  if (napi_create_threadsafe_function(env, argv[5], NULL, name, QUEUE_MAX, 1, s, finalize, NULL, call_js, &s->tsfn) != napi_ok) {
    close(source); close(s->stopfd); free(s);
    napi_throw_type_error(env, NULL, "onMessage must be a function");
    return NULL;
  }
  int stopfd = s->stopfd;
  pthread_t th;
  pthread_attr_t attr;
  pthread_attr_init(&attr);
  pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
  pthread_attr_setstacksize(&attr, 256 * 1024);
  int err = pthread_create(&th, &attr, run, s);
  pthread_attr_destroy(&attr);
  if (err != 0) {
    close(source);
    s->source = -1;
    napi_release_threadsafe_function(s->tsfn, napi_tsfn_abort);  // finalize closes the eventfd and frees
    return throw_errno(env, err, "pthread_create");
  }
  napi_value out;
  napi_create_int32(env, stopfd, &out);
  return out;
}

static napi_value js_stop(napi_env env, napi_callback_info info) {
  napi_value argv[1];
  size_t argc = 1;
  int32_t fd = -1;
  napi_get_cb_info(env, info, &argc, argv, NULL, NULL);
  if (argc < 1 || napi_get_value_int32(env, argv[0], &fd) != napi_ok) { napi_throw_type_error(env, NULL, "seccompSupervisorStop(stopFd)"); return NULL; }
  uint64_t one = 1;
  if (write(fd, &one, sizeof one) < 0 && errno != EAGAIN) return throw_errno(env, errno, "write(eventfd)");
  return NULL;
}

// seccompListenSocket(path) -> fd: a listening unix stream socket at `path` (for runc's listenerPath), close-on-exec.
static napi_value js_listen(napi_env env, napi_callback_info info) {
  napi_value argv[1];
  size_t argc = 1;
  napi_get_cb_info(env, info, &argc, argv, NULL, NULL);
  struct sockaddr_un addr = { 0 };
  addr.sun_family = AF_UNIX;
  size_t len = 0;
  if (argc < 1 || napi_get_value_string_utf8(env, argv[0], addr.sun_path, sizeof addr.sun_path, &len) != napi_ok || len == 0 || len >= sizeof addr.sun_path - 1) {
    napi_throw_type_error(env, NULL, "seccompListenSocket(path): path must be a string of 1..106 bytes");
    return NULL;
  }
  int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return throw_errno(env, errno, "socket");
  if (bind(fd, (struct sockaddr *)&addr, sizeof addr) != 0 || listen(fd, 4) != 0) {
    int e = errno;
    close(fd);
    return throw_errno(env, e, addr.sun_path);
  }
  napi_value out;
  napi_create_int32(env, fd, &out);
  return out;
}

void seccomp_supervisor_register(napi_env env, napi_value exports) {
  napi_property_descriptor props[] = {
    { "seccompSupervise", 0, js_supervise, 0, 0, 0, napi_default, 0 },
    { "seccompSupervisorStop", 0, js_stop, 0, 0, 0, napi_default, 0 },
    { "seccompListenSocket", 0, js_listen, 0, 0, 0, napi_default, 0 },
  };
  napi_define_properties(env, exports, sizeof props / sizeof props[0], props);
}
