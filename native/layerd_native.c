// layerd's native addon: the few system calls Node does not expose.
// Loaded only through src/native.ts. Placeholder for now: version().
#include <node_api.h>

static napi_value version(napi_env env, napi_callback_info info) {
  (void)info;
  napi_value v;
  napi_create_uint32(env, 1, &v);
  return v;
}

static napi_value init(napi_env env, napi_value exports) {
  napi_property_descriptor props[] = {
    { "version", 0, version, 0, 0, 0, napi_default, 0 },
  };
  napi_define_properties(env, exports, sizeof props / sizeof props[0], props);
  return exports;
}

NAPI_MODULE(NODE_GYP_MODULE_NAME, init)
