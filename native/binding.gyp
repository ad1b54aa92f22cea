{
  "targets": [{
    "target_name": "layerd_native",
    "sources": ["layerd_native.c"],
    "cflags": ["-O2", "-Wall", "-Wextra", "-std=gnu11"]
  }]
}
