// FastCDC's cut search in C, for push's chunking workers: the same algorithm
// as JsCdcScanner in src/format/chunker.ts, which stays the reference (tests
// compare the two byte for byte). In JS the scan was 7.5% of a directory
// push's wall time (bench/push-throughput.ts, removing it entirely).
//
// fastcdcNext(data, from, state, params, gear): the end of the open chunk in
// data[from..], or -1 when data ends first.
//   state:  Int32Array [position, hash]: bytes of the open chunk seen so far
//           and the rolling gear hash; reset to [0, 0] at a cut, saved otherwise.
//   params: Int32Array [minSize, avgSize, maxSize, maskHard, maskEasy].
//   gear:   Int32Array of 256 entries.
// The hash is 32-bit and wraps: h = (h << 1) + gear[byte], as in JS's `| 0`.
#include <stdint.h>
#include <node_api.h>

static int typed(napi_env env, napi_value v, napi_typedarray_type want, void **data, size_t *len) {
  napi_typedarray_type type;
  napi_value buf;
  size_t offset;
  if (napi_get_typedarray_info(env, v, &type, len, data, &buf, &offset) != napi_ok || type != want) {
    napi_throw_type_error(env, "ERR_INVALID_ARG_TYPE", "fastcdcNext: wrong argument type");
    return 0;
  }
  return 1;
}

// Rolls the hash over d[*i, end); true (with *i just past the byte) at the first byte where (h & mask) == 0.
static int roll(const uint8_t *d, size_t *i, size_t end, uint32_t mask, const int32_t *gear, uint32_t *h) {
  uint32_t x = *h;
  for (size_t k = *i; k < end; k++) {
    x = (x << 1) + (uint32_t)gear[d[k]];
    if ((x & mask) == 0) { *h = x; *i = k + 1; return 1; }
  }
  *h = x;
  *i = end;
  return 0;
}

static napi_value js_fastcdc_next(napi_env env, napi_callback_info info) {
  size_t argc = 5;
  napi_value argv[5];
  napi_get_cb_info(env, info, &argc, argv, NULL, NULL);
  napi_value result;
  if (argc < 5) { napi_throw_type_error(env, "ERR_INVALID_ARG_TYPE", "fastcdcNext: missing arguments"); return NULL; }
  uint8_t *d;
  int32_t *state, *params, *gear;
  size_t n, state_len, params_len, gear_len;
  uint32_t from;
  if (!typed(env, argv[0], napi_uint8_array, (void **)&d, &n) ||
      !typed(env, argv[2], napi_int32_array, (void **)&state, &state_len) ||
      !typed(env, argv[3], napi_int32_array, (void **)&params, &params_len) ||
      !typed(env, argv[4], napi_int32_array, (void **)&gear, &gear_len)) return NULL;
  if (napi_get_value_uint32(env, argv[1], &from) != napi_ok || state_len < 2 || params_len < 5 || gear_len < 256 || from > n) {
    napi_throw_range_error(env, "ERR_OUT_OF_RANGE", "fastcdcNext: bad arguments");
    return NULL;
  }
  const size_t min = (size_t)params[0], avg = (size_t)params[1], max = (size_t)params[2];
  const uint32_t mask_hard = (uint32_t)params[3], mask_easy = (uint32_t)params[4];
  size_t position = (size_t)state[0];
  uint32_t h = (uint32_t)state[1];
  size_t i = from;
  int64_t cut = -1;
  if (position < min) {
    size_t skip = min - position < n - i ? min - position : n - i;
    i += skip;
    position += skip;
  }
  if (position >= min && position < avg) {
    size_t start = i, end = i + (avg - position < n - i ? avg - position : n - i);
    if (roll(d, &i, end, mask_hard, gear, &h)) { cut = (int64_t)i; goto done; }
    position += end - start;
  }
  if (position >= avg) {
    size_t start = i, end = i + (max - position < n - i ? max - position : n - i);
    if (roll(d, &i, end, mask_easy, gear, &h)) { cut = (int64_t)i; goto done; }
    position += end - start;
    if (position >= max) { cut = (int64_t)end; goto done; }
  }
done:
  if (cut >= 0) { state[0] = 0; state[1] = 0; }
  else { state[0] = (int32_t)position; state[1] = (int32_t)h; }
  napi_create_int64(env, cut, &result);
  return result;
}

void fastcdc_register(napi_env env, napi_value exports) {
  napi_property_descriptor props[] = {
    { "fastcdcNext", 0, js_fastcdc_next, 0, 0, 0, napi_default, 0 },
  };
  napi_define_properties(env, exports, sizeof props / sizeof props[0], props);
}
