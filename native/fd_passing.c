// File descriptors passed between processes, which Node cannot do for an
// arbitrary fd: what keeps layerd's FUSE connections alive across a crash
// or an upgrade (src/holder/README.md). Primitives, no policy:
//
//   fdSocketPair() -> [a, b]                 AF_UNIX SOCK_SEQPACKET, both close-on-exec
//   fdSend(sock, data, fds)                  one message (sendmsg, SCM_RIGHTS), MSG_NOSIGNAL
//   fdRecv(sock, maxBytes, timeoutMs)        one message -> { data, fds } | null at end of stream
//   fdRecvAsync(sock, maxBytes, cb)          the same on a libuv worker thread: cb(err, msg | null)
//   fdSetCloexec(fd)                         for fds inherited from systemd (LISTEN_FDS)
//   sdNotify(socketPath, message, fds)       one datagram to systemd's NOTIFY_SOCKET ('@' = abstract)
//   fdWatchHangup(sock, cb)                  cb(err) once, on the event loop, when the other end of a
//                                            connected socket is gone (uv_poll): null when it hung up, the
//                                            socket's error when it reset (ECONNRESET: it closed with our
//                                            messages unread); the messages it sent stay to be read; the
//                                            watch keeps no loop alive
//
// Received fds are close-on-exec (MSG_CMSG_CLOEXEC). Errors throw (or are
// passed to cb as) Node-style errno errors.
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>
#include <node_api.h>
#include <uv.h>
#include "poll_once.h"

#define MAX_FDS 64
#define MAX_MESSAGE_BYTES (1024 * 1024)

static napi_value make_errno_error(napi_env env, int err, const char *syscall) {
  const char *code = strerrorname_np(err);
  if (code == NULL) code = "EUNKNOWN";
  char msg[256];
  snprintf(msg, sizeof msg, "%s: %s, %s", code, strerror(err), syscall);
  napi_value msg_v, code_v, errno_v, syscall_v, error;
  napi_create_string_utf8(env, msg, NAPI_AUTO_LENGTH, &msg_v);
  napi_create_string_utf8(env, code, NAPI_AUTO_LENGTH, &code_v);
  napi_create_error(env, code_v, msg_v, &error);
  napi_create_int32(env, -err, &errno_v);
  napi_create_string_utf8(env, syscall, NAPI_AUTO_LENGTH, &syscall_v);
  napi_set_named_property(env, error, "errno", errno_v);
  napi_set_named_property(env, error, "syscall", syscall_v);
  return error;
}

static napi_value throw_errno(napi_env env, int err, const char *syscall) {
  napi_throw(env, make_errno_error(env, err, syscall));
  return NULL;
}

static napi_value throw_type(napi_env env, const char *msg) {
  napi_throw_type_error(env, "ERR_INVALID_ARG_TYPE", msg);
  return NULL;
}

// Reads up to MAX_FDS fd numbers from a JS array; -1 (with a pending exception) when it is not one.
static int get_fds(napi_env env, napi_value v, int *fds) {
  bool is_array = false;
  uint32_t n = 0;
  if (napi_is_array(env, v, &is_array) != napi_ok || !is_array || napi_get_array_length(env, v, &n) != napi_ok || n > MAX_FDS) {
    throw_type(env, "fds must be an array of at most 64 file descriptors");
    return -1;
  }
  for (uint32_t i = 0; i < n; i++) {
    napi_value e;
    int32_t fd;
    if (napi_get_element(env, v, i, &e) != napi_ok || napi_get_value_int32(env, e, &fd) != napi_ok || fd < 0) {
      throw_type(env, "fds must be non-negative integers");
      return -1;
    }
    fds[i] = fd;
  }
  return (int)n;
}

static int send_with_fds(int sock, const struct sockaddr_un *to, socklen_t tolen, const void *data, size_t len, const int *fds, int nfds) {
  struct iovec iov = { .iov_base = (void *)data, .iov_len = len };
  char control[CMSG_SPACE(sizeof(int) * MAX_FDS)];
  struct msghdr msg;
  memset(&msg, 0, sizeof msg);
  memset(control, 0, sizeof control);
  msg.msg_name = (void *)to;
  msg.msg_namelen = tolen;
  msg.msg_iov = &iov;
  msg.msg_iovlen = 1;
  if (nfds > 0) {
    msg.msg_control = control;
    msg.msg_controllen = CMSG_SPACE(sizeof(int) * nfds);
    struct cmsghdr *c = CMSG_FIRSTHDR(&msg);
    c->cmsg_level = SOL_SOCKET;
    c->cmsg_type = SCM_RIGHTS;
    c->cmsg_len = CMSG_LEN(sizeof(int) * nfds);
    memcpy(CMSG_DATA(c), fds, sizeof(int) * nfds);
  }
  ssize_t n;
  do { n = sendmsg(sock, &msg, MSG_NOSIGNAL); } while (n < 0 && errno == EINTR);
  return n < 0 ? errno : 0;
}

typedef struct {
  char *data;
  ssize_t len;  // -1: error; 0 with eof: end of stream
  int eof;
  int fds[MAX_FDS];
  int nfds;
  int err;
} received;

// One message; timeout_ms < 0 waits forever. Fills r (r->data malloc'd).
static void recv_with_fds(int sock, size_t max_bytes, int timeout_ms, received *r) {
  memset(r, 0, sizeof *r);
  if (timeout_ms >= 0) {
    struct pollfd p = { .fd = sock, .events = POLLIN };
    int rc;
    do { rc = poll(&p, 1, timeout_ms); } while (rc < 0 && errno == EINTR);
    if (rc < 0) { r->err = errno; r->len = -1; return; }
    if (rc == 0) { r->err = ETIMEDOUT; r->len = -1; return; }
  }
  r->data = malloc(max_bytes > 0 ? max_bytes : 1);
  if (r->data == NULL) { r->err = ENOMEM; r->len = -1; return; }
  struct iovec iov = { .iov_base = r->data, .iov_len = max_bytes };
  char control[CMSG_SPACE(sizeof(int) * MAX_FDS)];
  struct msghdr msg;
  memset(&msg, 0, sizeof msg);
  msg.msg_iov = &iov;
  msg.msg_iovlen = 1;
  msg.msg_control = control;
  msg.msg_controllen = sizeof control;
  ssize_t n;
  do { n = recvmsg(sock, &msg, MSG_CMSG_CLOEXEC); } while (n < 0 && errno == EINTR);
  if (n < 0) { r->err = errno; r->len = -1; return; }
  for (struct cmsghdr *c = CMSG_FIRSTHDR(&msg); c != NULL; c = CMSG_NXTHDR(&msg, c)) {
    if (c->cmsg_level != SOL_SOCKET || c->cmsg_type != SCM_RIGHTS) continue;
    int count = (int)((c->cmsg_len - CMSG_LEN(0)) / sizeof(int));
    for (int i = 0; i < count; i++) {
      int fd;
      memcpy(&fd, CMSG_DATA(c) + i * sizeof(int), sizeof fd);
      if (r->nfds < MAX_FDS) r->fds[r->nfds++] = fd; else close(fd);
    }
  }
  if ((msg.msg_flags & (MSG_TRUNC | MSG_CTRUNC)) != 0) {
    // Never act on half a message: drop its fds and report it.
    for (int i = 0; i < r->nfds; i++) close(r->fds[i]);
    r->nfds = 0;
    r->err = EMSGSIZE;
    r->len = -1;
    return;
  }
  r->len = n;
  r->eof = n == 0 && r->nfds == 0;
}

// { data: Buffer, fds: number[] } or null at end of stream; frees r->data.
static napi_value received_value(napi_env env, received *r) {
  napi_value out;
  if (r->eof) { free(r->data); napi_get_null(env, &out); return out; }
  napi_value data, fds;
  void *copy;
  napi_create_buffer_copy(env, (size_t)r->len, r->data, &copy, &data);
  free(r->data);
  r->data = NULL;
  napi_create_array_with_length(env, (size_t)r->nfds, &fds);
  for (int i = 0; i < r->nfds; i++) {
    napi_value fd;
    napi_create_int32(env, r->fds[i], &fd);
    napi_set_element(env, fds, (uint32_t)i, fd);
  }
  napi_create_object(env, &out);
  napi_set_named_property(env, out, "data", data);
  napi_set_named_property(env, out, "fds", fds);
  return out;
}

// Up to `cap` arguments of a call into argv (the missing ones undefined); returns how many were passed.
static size_t get_argv(napi_env env, napi_callback_info info, napi_value *argv, size_t cap) {
  size_t argc = cap;
  napi_get_cb_info(env, info, &argc, argv, NULL, NULL);
  return argc;
}

static napi_value js_socketpair(napi_env env, napi_callback_info info) {
  (void)info;
  int sv[2];
  if (socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, sv) != 0) return throw_errno(env, errno, "socketpair");
  napi_value out, a, b;
  napi_create_array_with_length(env, 2, &out);
  napi_create_int32(env, sv[0], &a);
  napi_create_int32(env, sv[1], &b);
  napi_set_element(env, out, 0, a);
  napi_set_element(env, out, 1, b);
  return out;
}

// fdSend(sock, data: Buffer, fds: number[])
static napi_value js_send(napi_env env, napi_callback_info info) {
  napi_value argv[3];
  size_t argc = get_argv(env, info, argv, 3);
  int32_t sock;
  void *data;
  size_t len;
  int fds[MAX_FDS];
  if (argc < 3 || napi_get_value_int32(env, argv[0], &sock) != napi_ok || napi_get_buffer_info(env, argv[1], &data, &len) != napi_ok) {
    return throw_type(env, "fdSend(sock, data: Buffer, fds: number[])");
  }
  int nfds = get_fds(env, argv[2], fds);
  if (nfds < 0) return NULL;
  int err = send_with_fds(sock, NULL, 0, data, len, fds, nfds);
  if (err != 0) return throw_errno(env, err, "sendmsg");
  return NULL;
}

static int get_recv_args(napi_env env, napi_value *argv, int32_t *sock, uint32_t *max_bytes) {
  if (napi_get_value_int32(env, argv[0], sock) != napi_ok || napi_get_value_uint32(env, argv[1], max_bytes) != napi_ok ||
      *max_bytes < 1 || *max_bytes > MAX_MESSAGE_BYTES) {
    throw_type(env, "sock must be an fd, maxBytes 1 to 1 MiB");
    return 0;
  }
  return 1;
}

// fdRecv(sock, maxBytes, timeoutMs) -> { data, fds } | null
static napi_value js_recv(napi_env env, napi_callback_info info) {
  napi_value argv[3];
  size_t argc = get_argv(env, info, argv, 3);
  int32_t sock, timeout;
  uint32_t max_bytes;
  if (argc < 3) return throw_type(env, "fdRecv(sock, maxBytes, timeoutMs)");
  if (!get_recv_args(env, argv, &sock, &max_bytes)) return NULL;
  if (napi_get_value_int32(env, argv[2], &timeout) != napi_ok) return throw_type(env, "timeoutMs must be an integer (< 0: no timeout)");
  received r;
  recv_with_fds(sock, max_bytes, timeout, &r);
  if (r.len < 0) { free(r.data); return throw_errno(env, r.err, "recvmsg"); }
  return received_value(env, &r);
}

typedef struct {
  napi_async_work work;
  napi_ref callback;
  int sock;
  size_t max_bytes;
  received r;
} recv_job;

static void recv_execute(napi_env env, void *data) {
  (void)env;
  recv_job *job = data;
  recv_with_fds(job->sock, job->max_bytes, -1, &job->r);
}

static void recv_complete(napi_env env, napi_status status, void *data) {
  recv_job *job = data;
  napi_value cb, undefined, argv[2];
  napi_get_reference_value(env, job->callback, &cb);
  napi_get_undefined(env, &undefined);
  if (status != napi_ok) {
    for (int i = 0; i < job->r.nfds; i++) close(job->r.fds[i]);
    free(job->r.data);
    argv[0] = make_errno_error(env, ECANCELED, "recvmsg");
    napi_get_null(env, &argv[1]);
  } else if (job->r.len < 0) {
    free(job->r.data);
    argv[0] = make_errno_error(env, job->r.err, "recvmsg");
    napi_get_null(env, &argv[1]);
  } else {
    napi_get_null(env, &argv[0]);
    argv[1] = received_value(env, &job->r);
  }
  napi_delete_reference(env, job->callback);
  napi_delete_async_work(env, job->work);
  free(job);
  napi_call_function(env, undefined, cb, 2, argv, NULL);
}

// fdRecvAsync(sock, maxBytes, cb(err, msg | null)): one message, waited for on a worker thread.
static napi_value js_recv_async(napi_env env, napi_callback_info info) {
  napi_value argv[3], name;
  size_t argc = get_argv(env, info, argv, 3);
  int32_t sock;
  uint32_t max_bytes;
  napi_valuetype t;
  if (argc < 3 || napi_typeof(env, argv[2], &t) != napi_ok || t != napi_function) return throw_type(env, "fdRecvAsync(sock, maxBytes, callback)");
  if (!get_recv_args(env, argv, &sock, &max_bytes)) return NULL;
  recv_job *job = calloc(1, sizeof *job);
  if (job == NULL) return throw_errno(env, ENOMEM, "fdRecvAsync");
  job->sock = sock;
  job->max_bytes = max_bytes;
  napi_create_reference(env, argv[2], 1, &job->callback);
  napi_create_string_utf8(env, "layerd-fd-recv", NAPI_AUTO_LENGTH, &name);
  napi_create_async_work(env, NULL, name, recv_execute, recv_complete, job, &job->work);
  napi_queue_async_work(env, job->work);
  return NULL;
}

// fdSetCloexec(fd)
static napi_value js_set_cloexec(napi_env env, napi_callback_info info) {
  napi_value argv[1];
  size_t argc = get_argv(env, info, argv, 1);
  int32_t fd;
  if (argc < 1 || napi_get_value_int32(env, argv[0], &fd) != napi_ok) return throw_type(env, "fdSetCloexec(fd)");
  int flags = fcntl(fd, F_GETFD);
  if (flags < 0 || fcntl(fd, F_SETFD, flags | FD_CLOEXEC) != 0) return throw_errno(env, errno, "fcntl");
  return NULL;
}

// sdNotify(socketPath, message: string, fds: number[]): one datagram, as sd_pid_notify_with_fds does.
static napi_value js_sd_notify(napi_env env, napi_callback_info info) {
  napi_value argv[3];
  size_t argc = get_argv(env, info, argv, 3);
  struct sockaddr_un addr;
  memset(&addr, 0, sizeof addr);
  addr.sun_family = AF_UNIX;
  size_t path_len = 0, msg_len = 0;
  if (argc < 3 || napi_get_value_string_utf8(env, argv[0], addr.sun_path, sizeof addr.sun_path, &path_len) != napi_ok || path_len == 0 ||
      path_len + 1 >= sizeof addr.sun_path) {
    return throw_type(env, "sdNotify(socketPath, message, fds): a socket path of 1 to 107 bytes");
  }
  if (addr.sun_path[0] == '@') addr.sun_path[0] = 0;  // abstract namespace
  char msg[4096];
  if (napi_get_value_string_utf8(env, argv[1], msg, sizeof msg, &msg_len) != napi_ok || msg_len + 1 >= sizeof msg) {
    return throw_type(env, "sdNotify: message must be a string under 4 KiB");
  }
  int fds[MAX_FDS];
  int nfds = get_fds(env, argv[2], fds);
  if (nfds < 0) return NULL;
  int sock = socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC, 0);
  if (sock < 0) return throw_errno(env, errno, "socket");
  int err = send_with_fds(sock, &addr, (socklen_t)(offsetof(struct sockaddr_un, sun_path) + path_len), msg, msg_len, fds, nfds);
  close(sock);
  if (err != 0) return throw_errno(env, err, "sendmsg");
  return NULL;
}

typedef struct {
  poll_once watch;  // first: the watch frees this struct when it closes
  int sock;
} hangup_watch;

// cb(err | null)
static void hangup_args(napi_env env, void *ctx, napi_value *argv) {
  int err = *(const int *)ctx;
  if (err == 0) napi_get_null(env, &argv[0]); else argv[0] = make_errno_error(env, err, "poll");
}

// Only UV_DISCONNECT is asked for: a readable message (an answer the caller reads itself) wakes nothing.
// A peer that closed with messages of ours unread leaves ECONNRESET on the socket: libuv reports that
// EPOLLERR as UV_EBADF, so the socket's own error is read (SO_ERROR) and passed on instead.
static void on_hangup(uv_poll_t *poll, int status, int events) {
  hangup_watch *w = poll->data;
  if (status == 0 && (events & UV_DISCONNECT) == 0) return;
  int err = 0;
  socklen_t len = sizeof err;
  if (status != 0 && (getsockopt(w->sock, SOL_SOCKET, SO_ERROR, &err, &len) != 0 || err == 0)) err = -status;
  poll_once_call(&w->watch, 1, hangup_args, &err);
}

// fdWatchHangup(sock, cb(err | null)): once, when the peer of `sock` has closed. `sock` must stay open until then.
static napi_value js_watch_hangup(napi_env env, napi_callback_info info) {
  napi_value argv[2];
  size_t argc = get_argv(env, info, argv, 2);
  int32_t sock;
  napi_valuetype t;
  if (argc < 2 || napi_get_value_int32(env, argv[0], &sock) != napi_ok || sock < 0 || napi_typeof(env, argv[1], &t) != napi_ok || t != napi_function) {
    return throw_type(env, "fdWatchHangup(sock >= 0, callback)");
  }
  int type;
  socklen_t len = sizeof type;
  if (getsockopt(sock, SOL_SOCKET, SO_TYPE, &type, &len) != 0) return throw_errno(env, errno, "getsockopt");
  hangup_watch *w = calloc(1, sizeof *w);
  if (w == NULL) return throw_errno(env, ENOMEM, "fdWatchHangup");
  w->sock = sock;
  int err = poll_once_start(env, &w->watch, w, sock, UV_DISCONNECT, on_hangup, argv[1], "layerd.fdWatchHangup");
  if (err != 0) { free(w); return throw_errno(env, -err, "uv_poll_init"); }
  uv_unref((uv_handle_t *)&w->watch.poll);  // watching never keeps the process alive
  return NULL;
}

void fd_passing_register(napi_env env, napi_value exports) {
  napi_property_descriptor props[] = {
    { "fdSocketPair", 0, js_socketpair, 0, 0, 0, napi_default, 0 },
    { "fdSend", 0, js_send, 0, 0, 0, napi_default, 0 },
    { "fdRecv", 0, js_recv, 0, 0, 0, napi_default, 0 },
    { "fdRecvAsync", 0, js_recv_async, 0, 0, 0, napi_default, 0 },
    { "fdSetCloexec", 0, js_set_cloexec, 0, 0, 0, napi_default, 0 },
    { "sdNotify", 0, js_sd_notify, 0, 0, 0, napi_default, 0 },
    { "fdWatchHangup", 0, js_watch_hangup, 0, 0, 0, napi_default, 0 },
  };
  napi_define_properties(env, exports, sizeof props / sizeof props[0], props);
}
