/*
 * layerctl's C front (built by `npm run build` as native/build/Release/layerctl).
 *
 * `layerctl run …` costs a Node process of ~200 CPU-ms when the Node CLI
 * runs it, which caps a two-core node near 10 runs/s. This front sends a
 * `run` to the node's layerd over <home>/run.sock (src/cli/run-protocol.ts
 * has the format; src/cli/run-server.ts the daemon's side), which runs the
 * Node CLI's own run command and streams its stdout, stderr and exit code
 * back. `layerctl containerd pull` of a layerd image goes the same way (it is a
 * call to layerd, and the Node process was ~0.4 s of every pull); layerd
 * decides which invocations it serves (src/cli/run-socket-commands.ts) and
 * answers the others fallback. Everything else, and every case this front does
 * not serve, becomes the Node CLI (dist/cli/layerctl.js) by exec, with the
 * same arguments:
 *   - a command other than `run` and `containerd`;
 *   - no layerd answering on the socket (the Node CLI starts it; the next run
 *     finds it);
 *   - a home given as a relative path;
 *   - the daemon's fallback frame (another home, a request it does not parse).
 * So the answer is always the Node CLI's; this file only decides who runs it.
 *
 * The home is found as the Node CLI finds it (src/state/settings.ts): the last
 * --home, then LAYERD_HOME, then /var/lib/layerd for root, ~/.layerd otherwise.
 * layerd checks it again and answers fallback when it is not its own.
 *
 * Exit: the command's exit code; 125 (`layerctl run`'s own failure) when the
 * daemon goes away before the command ends. A caller that is killed closes
 * the socket, and layerd destroys the sandbox.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <libgen.h>
#include <limits.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#define RUN_PROTOCOL_MAGIC "layerd-run 1"
#define RUN_SOCKET_NAME "run.sock"
#define FRAME_STDOUT 'o'
#define FRAME_STDERR 'e'
#define FRAME_EXIT 'x'
#define FRAME_FALLBACK 'f'
#define EXIT_RUN_FAILED 125
/* From native/build/Release/ to the compiled Node CLI. */
#define NODE_CLI_FROM_EXE "/../../../dist/cli/layerctl.js"
#ifndef LAYERCTL_NODE
#define LAYERCTL_NODE "node"
#endif

extern char **environ;

/* Become the Node CLI with the same arguments. Returns only when no node can be run. */
static int exec_node_cli(int argc, char **argv) {
  char exe[PATH_MAX];
  ssize_t n = readlink("/proc/self/exe", exe, sizeof exe - 1);
  if (n < 0) { perror("layerctl: cannot find its own path (/proc/self/exe)"); return EXIT_RUN_FAILED; }
  exe[n] = '\0';
  char entry[PATH_MAX + sizeof NODE_CLI_FROM_EXE];
  snprintf(entry, sizeof entry, "%s%s", dirname(exe), NODE_CLI_FROM_EXE);
  char **args = calloc((size_t)argc + 2, sizeof *args);
  if (args == NULL) { perror("layerctl"); return EXIT_RUN_FAILED; }
  args[0] = (char *)"node";
  args[1] = entry;
  for (int i = 1; i < argc; i++) args[i + 1] = argv[i];
  const char *node = getenv("LAYERCTL_NODE");
  execv(node != NULL && node[0] != '\0' ? node : LAYERCTL_NODE, args);
  execvp("node", args);
  fprintf(stderr, "layerctl: cannot run the Node CLI (%s %s): %s\n", LAYERCTL_NODE, entry, strerror(errno));
  return EXIT_RUN_FAILED;
}

/* The command, as src/cli/main.ts finds it: the first argument not starting with '-'. */
static const char *command_name(int argc, char **argv) {
  for (int i = 1; i < argc; i++) if (argv[i][0] != '-') return argv[i];
  return NULL;
}

/* The home the Node CLI would use (NULL: cannot tell). */
static const char *home_of(int argc, char **argv, char *buf, size_t size) {
  const char *home = NULL;
  for (int i = 1; i < argc && strcmp(argv[i], "--") != 0; i++) {
    if (strcmp(argv[i], "--home") == 0 && i + 1 < argc) home = argv[++i];
    else if (strncmp(argv[i], "--home=", 7) == 0) home = argv[i] + 7;
  }
  if (home == NULL) home = getenv("LAYERD_HOME");
  if (home != NULL) return home;
  if (getuid() == 0) return "/var/lib/layerd";
  const char *user = getenv("HOME");
  if (user == NULL) return NULL;
  snprintf(buf, size, "%s/.layerd", user);
  return buf;
}

static int write_all(int fd, const char *p, size_t len) {
  while (len > 0) {
    ssize_t n = write(fd, p, len);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return -1;
    p += n;
    len -= (size_t)n;
  }
  return 0;
}

/* 1: all `len` bytes read; 0: end of stream first; -1: error. */
static int read_all(int fd, char *p, size_t len) {
  size_t got = 0;
  while (got < len) {
    ssize_t n = read(fd, p + got, len - got);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return -1;
    if (n == 0) return 0;
    got += (size_t)n;
  }
  return 1;
}

/* Append a NUL-terminated field to the request being built. */
static int add_field(char **buf, size_t *len, size_t *cap, const char *s) {
  size_t n = strlen(s) + 1;
  if (*len + n > *cap) {
    size_t want = (*cap == 0 ? 4096 : *cap * 2) + n;
    char *grown = realloc(*buf, want);
    if (grown == NULL) return -1;
    *buf = grown;
    *cap = want;
  }
  memcpy(*buf + *len, s, n);
  *len += n;
  return 0;
}

/* Whether the environment entry `e` goes with the request: LAYERD_*, and src/cli/run-socket-commands.ts's RUN_SOCKET_ENV. */
static int sent_env(const char *e) {
  static const char *const extra[] = { "CONTAINERD_ADDRESS=", "CONTAINERD_NAMESPACE=" };
  if (strncmp(e, "LAYERD_", 7) == 0) return 1;
  for (size_t i = 0; i < sizeof extra / sizeof extra[0]; i++) if (strncmp(e, extra[i], strlen(extra[i])) == 0) return 1;
  return 0;
}

/* The request of run-protocol.ts, its u32 LE length first. NULL on failure. */
static char *build_request(int argc, char **argv, size_t *out_len) {
  char cwd[PATH_MAX], count[16];
  if (getcwd(cwd, sizeof cwd) == NULL) return NULL;
  snprintf(count, sizeof count, "%d", argc - 1);
  char *buf = NULL;
  size_t len = 4, cap = 0;
  if (add_field(&buf, &len, &cap, RUN_PROTOCOL_MAGIC) < 0 || add_field(&buf, &len, &cap, cwd) < 0 || add_field(&buf, &len, &cap, count) < 0) goto fail;
  for (int i = 1; i < argc; i++) if (add_field(&buf, &len, &cap, argv[i]) < 0) goto fail;
  for (char **e = environ; *e != NULL; e++) {
    if (sent_env(*e) && add_field(&buf, &len, &cap, *e) < 0) goto fail;
  }
  uint32_t body = (uint32_t)(len - 4);
  for (int i = 0; i < 4; i++) buf[i] = (char)((body >> (8 * i)) & 0xff);
  *out_len = len;
  return buf;
fail:
  free(buf);
  return NULL;
}

static int connect_run_socket(const char *home) {
  struct sockaddr_un addr = { .sun_family = AF_UNIX };
  if ((size_t)snprintf(addr.sun_path, sizeof addr.sun_path, "%s/%s", home, RUN_SOCKET_NAME) >= sizeof addr.sun_path) return -1;
  int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return -1;
  if (connect(fd, (struct sockaddr *)&addr, sizeof addr) < 0) { close(fd); return -1; }
  return fd;
}

int main(int argc, char **argv) {
  signal(SIGPIPE, SIG_IGN); /* a closed socket or stdout is an error return, not death */
  const char *command = command_name(argc, argv);
  char home_buf[PATH_MAX];
  int socket_command = command != NULL && (strcmp(command, "run") == 0 || strcmp(command, "containerd") == 0);
  const char *home = socket_command ? home_of(argc, argv, home_buf, sizeof home_buf) : NULL;
  if (home == NULL || home[0] != '/') return exec_node_cli(argc, argv);
  int fd = connect_run_socket(home);
  if (fd < 0) return exec_node_cli(argc, argv);
  size_t len;
  char *request = build_request(argc, argv, &len);
  if (request == NULL || write_all(fd, request, len) < 0) { close(fd); free(request); return exec_node_cli(argc, argv); }
  free(request);
  int answered = 0;
  for (;;) {
    unsigned char head[5];
    int r = read_all(fd, (char *)head, sizeof head);
    if (r <= 0) break;
    uint32_t size = (uint32_t)head[1] | (uint32_t)head[2] << 8 | (uint32_t)head[3] << 16 | (uint32_t)head[4] << 24;
    char *payload = malloc(size == 0 ? 1 : size);
    if (payload == NULL || read_all(fd, payload, size) != 1) { free(payload); break; }
    if (head[0] == FRAME_FALLBACK && !answered) { free(payload); close(fd); return exec_node_cli(argc, argv); }
    if (head[0] == FRAME_EXIT && size == 4) {
      int32_t code = (int32_t)((uint32_t)(unsigned char)payload[0] | (uint32_t)(unsigned char)payload[1] << 8 |
                               (uint32_t)(unsigned char)payload[2] << 16 | (uint32_t)(unsigned char)payload[3] << 24);
      free(payload);
      return code & 0xff;
    }
    answered = 1;
    /* A closed stdout or stderr of ours drops that stream; the run goes on (as the Node CLI's would). */
    if (head[0] == FRAME_STDOUT) (void)write_all(STDOUT_FILENO, payload, size);
    else if (head[0] == FRAME_STDERR) (void)write_all(STDERR_FILENO, payload, size);
    free(payload);
  }
  fprintf(stderr, "layerctl %s: layerd closed %s/%s before the command ended; see %s/layerd.log\n", command, home, RUN_SOCKET_NAME, home);
  return EXIT_RUN_FAILED;
}
