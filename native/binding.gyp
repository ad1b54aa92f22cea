{
  "targets": [{
    "target_name": "layerd_native",
    "sources": ["layerd_native.c", "fuse_server.c", "fuse_passthrough.c", "fastcdc.c", "fd_passing.c", "memory.c", "entry_stat.c", "spawn.c", "poll_once.c", "seccomp_supervisor.c", "open_in_root.c"],
    "cflags": ["-O2", "-Wall", "-Wextra", "-std=gnu11"]
  }, {
    "target_name": "layerctl",
    "type": "executable",
    "sources": ["layerctl.c"],
    "cflags": ["-O2", "-Wall", "-Wextra", "-std=gnu11"],
    "defines": ["LAYERCTL_NODE=\"<!(node -p process.execPath)\""]
  }, {
    "target_name": "layerd-holder",
    "type": "executable",
    "sources": ["holder_front.c"],
    "cflags": ["-O2", "-Wall", "-Wextra", "-std=gnu11"]
  }, {
    "target_name": "layerd-wall",
    "type": "executable",
    "sources": ["layerd_wall.c"],
    "cflags": ["-O2", "-Wall", "-Wextra", "-std=gnu11"],
    "ldflags": ["-static"]
  }]
}
