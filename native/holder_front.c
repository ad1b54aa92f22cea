/*
 * The holder's C front (built by `npm run build` as native/build/Release/layerd-holder).
 *
 * A holder started as `node holder.js` boots Node and loads its modules
 * (~0.1 s) before it starts layerd, so that time was in series on every cold
 * start (bench/daemon-start.ts). This front starts layerd first and the Node
 * holder beside it:
 *
 *   layerd-holder NODE [NODE_FLAGS...] HOLDER_JS --home DIR --entry MAIN_JS [-- LAYERD_FLAGS...]
 *
 *   1. takes <home>/holder.pid, as src/holder/holder.ts does (O_EXCL; a stale
 *      one, whose process is gone, is replaced); its pid stays the holder's
 *      across the exec below;
 *   2. makes the layerd <-> holder socketpair (src/holder/fd-store-protocol.ts)
 *      and forks layerd with its end as fd 3 (LAYERD_HOLDER_FD), stdin
 *      /dev/null, stdout and stderr ours: the command line and environment
 *      the Node holder's own start gives it, and LAYERD_HOLDER_FRESH=1 (the
 *      holder keeps nothing yet, so layerd does not wait for its answers to
 *      `list` and `standby` while it boots);
 *   3. becomes the Node holder by exec, with `--adopt PID:FD` (layerd's pid,
 *      the holder's end): the holder serves that socket and waits for that
 *      child (src/holder/adopted-daemon.ts) as for one it started itself.
 *      As root, 10 nicer than layerd, with `--nice-back NICE`: its Node boot
 *      then takes only CPU that layerd's does not, and it goes back to NICE
 *      (every thread) first thing once booted.
 *
 * Nothing is lost while the Node holder boots: the socketpair exists before
 * layerd does, so what layerd sends (its requests, the fds it hands over)
 * waits in the socket until the holder reads it, and layerd is the holder
 * process's child from its first instruction.
 *
 * Whatever this front cannot do (other arguments, the pid file taken by a
 * live holder, a home it cannot write, a failed fork), it leaves to the Node
 * holder by exec with the same arguments, which then does everything
 * itself and reports what is wrong: this file only decides who starts layerd.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#define HOLDER_PID_FILE "holder.pid"
#define HOLDER_FD_ENV "LAYERD_HOLDER_FD"
#define HOLDER_FRESH_ENV "LAYERD_HOLDER_FRESH"
#define LAYERD_HOLDER_FD 3
/* How much nicer the Node holder boots than layerd, which boots beside it on the node's cores (root only; at most 19). */
#define HOLDER_BOOT_NICE_STEP 10

/* The parts of the command line: argv[1] is node, then node's flags, the holder's script and its options. */
typedef struct {
  int script;            /* index of HOLDER_JS */
  int rest;              /* index of the first LAYERD_FLAG (argc when none) */
  const char *home;
  const char *entry;
} command_line;

/* 1 when argv has the shape above (both options given, nothing else before `--`). */
static int parse(int argc, char **argv, command_line *c) {
  int i = 2;
  while (i < argc && argv[i][0] == '-') i++;
  if (i >= argc) return 0;
  c->script = i++;
  c->home = NULL;
  c->entry = NULL;
  for (; i < argc; i++) {
    if (strcmp(argv[i], "--") == 0) { i++; break; }
    if (i + 1 < argc && strcmp(argv[i], "--home") == 0) c->home = argv[++i];
    else if (i + 1 < argc && strcmp(argv[i], "--entry") == 0) c->entry = argv[++i];
    else return 0;
  }
  c->rest = i;
  return c->home != NULL && c->home[0] == '/' && c->entry != NULL;
}

/*
 * Become the Node holder: argv[1..], with `--adopt ADOPT` after the script when adopt is not NULL, and
 * `--nice-back NICE` when nice_back is not NULL. Returns only on failure.
 */
static void exec_holder(int argc, char **argv, int script, const char *adopt, const char *nice_back) {
  char **args = calloc((size_t)argc + 5, sizeof *args);
  if (args == NULL) return;
  int n = 0;
  for (int i = 1; i <= script; i++) args[n++] = argv[i];
  if (adopt != NULL) { args[n++] = (char *)"--adopt"; args[n++] = (char *)adopt; }
  if (nice_back != NULL) { args[n++] = (char *)"--nice-back"; args[n++] = (char *)nice_back; }
  for (int i = script + 1; i < argc; i++) args[n++] = argv[i];
  execv(argv[1], args);
  free(args);
}

/* Whether process `pid` lives (EPERM: it does, as another user's). */
static int alive(pid_t pid) {
  return kill(pid, 0) == 0 || errno == EPERM;
}

/* Take <home>/holder.pid for this process. 1: taken; 0: a live holder has it, or it cannot be written. */
static int take_pid_file(const char *home) {
  char path[PATH_MAX], line[32];
  if ((size_t)snprintf(path, sizeof path, "%s/%s", home, HOLDER_PID_FILE) >= sizeof path) return 0;
  for (int attempt = 0; attempt < 2; attempt++) {
    int fd = open(path, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
    if (fd >= 0) {
      int len = snprintf(line, sizeof line, "%d\n", (int)getpid());
      int ok = write(fd, line, (size_t)len) == len;
      close(fd);
      if (!ok) unlink(path);
      return ok;
    }
    if (errno != EEXIST) return 0;
    fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) return 0;
    ssize_t got = read(fd, line, sizeof line - 1);
    close(fd);
    line[got > 0 ? got : 0] = '\0';
    long pid = strtol(line, NULL, 10);
    if (pid > 0 && pid <= INT_MAX && alive((pid_t)pid)) return 0;
    unlink(path); /* stale: its process is gone */
  }
  return 0;
}

/* In the forked child: become layerd with `sock` as fd 3. Never returns. */
static void exec_layerd(int argc, char **argv, const command_line *c, int sock) {
  if (sock == LAYERD_HOLDER_FD) {
    int flags = fcntl(sock, F_GETFD);
    if (flags < 0 || fcntl(sock, F_SETFD, flags & ~FD_CLOEXEC) != 0) _exit(127);
  } else if (dup2(sock, LAYERD_HOLDER_FD) < 0) {
    _exit(127);
  }
  int null = open("/dev/null", O_RDONLY | O_CLOEXEC);
  if (null >= 0) dup2(null, STDIN_FILENO);
  /* The holder keeps nothing yet: layerd need not wait for it to boot to learn that (fd-store-protocol.ts). */
  if (setenv(HOLDER_FD_ENV, "3", 1) != 0 || setenv(HOLDER_FRESH_ENV, "1", 1) != 0) _exit(127);
  char **args = calloc((size_t)argc + 4, sizeof *args);
  if (args == NULL) _exit(127);
  int n = 0;
  for (int i = 1; i < c->script; i++) args[n++] = argv[i];
  args[n++] = (char *)c->entry;
  args[n++] = (char *)"--foreground";
  args[n++] = (char *)"--home";
  args[n++] = (char *)c->home;
  for (int i = c->rest; i < argc; i++) args[n++] = argv[i];
  execv(argv[1], args);
  fprintf(stderr, "layerd-holder: cannot run layerd (%s %s): %s\n", argv[1], c->entry, strerror(errno));
  _exit(127);
}

int main(int argc, char **argv) {
  if (argc < 3) {
    fprintf(stderr, "usage: layerd-holder NODE [NODE_FLAGS...] HOLDER_JS --home DIR --entry MAIN_JS [-- LAYERD_FLAGS...]\n");
    return 2;
  }
  command_line c;
  int sv[2];
  if (!parse(argc, argv, &c)) {
    int script = 2;
    while (script < argc - 1 && argv[script][0] == '-') script++;
    exec_holder(argc, argv, script, NULL, NULL);
  } else if (!take_pid_file(c.home) || socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, sv) != 0) {
    exec_holder(argc, argv, c.script, NULL, NULL);
  } else {
    pid_t pid = fork();
    if (pid == 0) exec_layerd(argc, argv, &c, sv[1]);
    close(sv[1]);
    if (pid < 0) {
      close(sv[0]);
      exec_holder(argc, argv, c.script, NULL, NULL);
    } else {
      int flags = fcntl(sv[0], F_GETFD);
      if (flags >= 0) fcntl(sv[0], F_SETFD, flags & ~FD_CLOEXEC); /* the Node holder's end survives the exec */
      char adopt[32];
      snprintf(adopt, sizeof adopt, "%d:%d", (int)pid, sv[0]);
      /* The holder's Node boot must not take CPU from layerd's on a busy node: nicer until it has booted. Going
         back needs CAP_SYS_NICE, so only root does this (a later layerd would inherit the nicer value). */
      char nice_back[16];
      int niced = 0;
      if (geteuid() == 0) {
        errno = 0;
        int prio = getpriority(PRIO_PROCESS, 0);
        int boot = prio + HOLDER_BOOT_NICE_STEP > 19 ? 19 : prio + HOLDER_BOOT_NICE_STEP;
        if (errno == 0 && boot > prio && setpriority(PRIO_PROCESS, 0, boot) == 0) {
          snprintf(nice_back, sizeof nice_back, "%d", prio);
          niced = 1;
        }
      }
      exec_holder(argc, argv, c.script, adopt, niced ? nice_back : NULL);
      /* No holder can run: layerd must not serve unprotected under a holder that never was. */
      kill(pid, SIGKILL);
      waitpid(pid, NULL, 0);
    }
  }
  fprintf(stderr, "layerd-holder: cannot run the Node holder (%s): %s\n", argv[1], strerror(errno));
  return 1;
}
