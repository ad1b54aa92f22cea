// A uv_poll watch on the caller's event loop that calls one JS function,
// once (spawn.c: a child's exit on its pidfd; fd_passing.c: a socket's
// hang-up). The owner's struct starts with a poll_once and is malloc'd: it
// is freed once the watch has closed, after the call.
#ifndef LAYERD_POLL_ONCE_H
#define LAYERD_POLL_ONCE_H
#include <node_api.h>
#include <uv.h>

typedef struct {
  uv_poll_t poll;  // poll.data: the owner's struct
  napi_env env;
  napi_ref callback;
  napi_async_context async;
} poll_once;

// Builds the call's arguments, inside its handle scope.
typedef void (*poll_once_args)(napi_env env, void *ctx, napi_value *argv);

// Watch `fd` for `events`; `on_event` decides when to call poll_once_call. `owner` (which starts with `w`) is
// freed when the watch closes. 0, or a negative uv error (nothing started, nothing freed).
int poll_once_start(napi_env env, poll_once *w, void *owner, int fd, int events, uv_poll_cb on_event, napi_value callback, const char *name);

// Stop watching, call the JS function with `argc` arguments from `make_args`, and close (then free) the watch.
void poll_once_call(poll_once *w, size_t argc, poll_once_args make_args, void *ctx);
#endif
