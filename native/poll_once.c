// poll_once.h: one JS call from a uv_poll watch.
#include <stdlib.h>
#include "poll_once.h"

#define MAX_ARGS 4

static void on_closed(uv_handle_t *handle) {
  free(handle->data);
}

int poll_once_start(napi_env env, poll_once *w, void *owner, int fd, int events, uv_poll_cb on_event, napi_value callback, const char *name) {
  uv_loop_t *loop = NULL;
  if (napi_get_uv_event_loop(env, &loop) != napi_ok) return UV_EINVAL;
  int err = uv_poll_init(loop, &w->poll, fd);
  if (err != 0) return err;
  w->env = env;
  w->poll.data = owner;
  napi_create_reference(env, callback, 1, &w->callback);
  napi_value resource_name;
  napi_create_string_utf8(env, name, NAPI_AUTO_LENGTH, &resource_name);
  napi_async_init(env, NULL, resource_name, &w->async);
  uv_poll_start(&w->poll, events, on_event);  // cannot fail: uv_poll_init checked the fd
  return 0;
}

void poll_once_call(poll_once *w, size_t argc, poll_once_args make_args, void *ctx) {
  uv_poll_stop(&w->poll);
  napi_env env = w->env;
  napi_handle_scope scope;
  napi_open_handle_scope(env, &scope);
  napi_value fn, recv, argv[MAX_ARGS], result;
  napi_get_reference_value(env, w->callback, &fn);
  napi_get_global(env, &recv);  // napi_make_callback wants an object as `this`
  make_args(env, ctx, argv);
  napi_make_callback(env, w->async, recv, fn, argc > MAX_ARGS ? MAX_ARGS : argc, argv, &result);
  napi_close_handle_scope(env, scope);
  napi_delete_reference(env, w->callback);
  napi_async_destroy(env, w->async);
  uv_close((uv_handle_t *)&w->poll, on_closed);
}
