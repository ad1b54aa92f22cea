// layerd-wall: the first program inside a Linux-tier sandbox. It puts up the
// walls that must be raised by the sandboxed process itself, then execs the
// command:
//   --landlock RW_DIR…   a Landlock domain (ABI-dependent) in which every
//                        write-type access is refused except beneath the given
//                        directories (the sandbox's own layer, tmpfs and device
//                        paths); abstract unix sockets and signals are scoped
//                        to the sandbox where the kernel has scopes (ABI 6);
//   --seccomp-fd N       read a classic-BPF program from fd N and install it
//                        with SECCOMP_FILTER_FLAG_NEW_LISTENER;
//   --notify-fd M        send the listener fd over the unix socket on fd M
//                        (SCM_RIGHTS), so the supervisor outside the sandbox,
//                        not the sandbox, answers the filter's notifications;
//   --close-fd K         close fd K before exec (this program's own file, when
//                        it was executed through /proc/self/fd/K).
// Both fds are closed before exec: the command never holds the listener (it
// could answer its own notifications) nor the socket.
// Static, so it runs in any image, whatever its libc.
// Exit codes: 127 command not found, 126 wall or exec failure (the reason on stderr).
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <linux/filter.h>
#include <linux/seccomp.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <unistd.h>

// Landlock's uapi, spelled out: the build host's headers may predate the ABI the kernel offers.
#define LL_CREATE_RULESET_VERSION 1U
#define LL_RULE_PATH_BENEATH 1
#define LL_FS_EXECUTE (1ULL << 0)
#define LL_FS_WRITE_FILE (1ULL << 1)
#define LL_FS_READ_FILE (1ULL << 2)
#define LL_FS_READ_DIR (1ULL << 3)
#define LL_FS_REMOVE_DIR (1ULL << 4)
#define LL_FS_REMOVE_FILE (1ULL << 5)
#define LL_FS_MAKE_CHAR (1ULL << 6)
#define LL_FS_MAKE_DIR (1ULL << 7)
#define LL_FS_MAKE_REG (1ULL << 8)
#define LL_FS_MAKE_SOCK (1ULL << 9)
#define LL_FS_MAKE_FIFO (1ULL << 10)
#define LL_FS_MAKE_BLOCK (1ULL << 11)
#define LL_FS_MAKE_SYM (1ULL << 12)
#define LL_FS_REFER (1ULL << 13)     // ABI 2
#define LL_FS_TRUNCATE (1ULL << 14)  // ABI 3
#define LL_FS_IOCTL_DEV (1ULL << 15) // ABI 5
#define LL_SCOPE_ABSTRACT_UNIX_SOCKET (1ULL << 0)  // ABI 6
#define LL_SCOPE_SIGNAL (1ULL << 1)                // ABI 6
#define LL_RESTRICT_SELF_LOG_NEW_EXEC_ON (1U << 1) // ABI 7

struct ll_ruleset_attr { uint64_t handled_access_fs, handled_access_net, scoped; };
struct ll_path_beneath_attr { uint64_t allowed_access; int32_t parent_fd; } __attribute__((packed));

static void die(const char *what) {
  fprintf(stderr, "layerd-wall: %s: %s\n", what, strerror(errno));
  exit(126);
}

static int landlock_abi(void) {
  long abi = syscall(__NR_landlock_create_ruleset, NULL, 0, LL_CREATE_RULESET_VERSION);
  return abi < 0 ? 0 : (int)abi;
}

static void apply_landlock(char **dirs, int ndirs) {
  int abi = landlock_abi();
  if (abi < 1) { errno = ENOSYS; die("landlock is not available"); }
  uint64_t write = LL_FS_WRITE_FILE | LL_FS_REMOVE_DIR | LL_FS_REMOVE_FILE | LL_FS_MAKE_CHAR | LL_FS_MAKE_DIR |
                   LL_FS_MAKE_REG | LL_FS_MAKE_SOCK | LL_FS_MAKE_FIFO | LL_FS_MAKE_BLOCK | LL_FS_MAKE_SYM;
  if (abi >= 2) write |= LL_FS_REFER;
  if (abi >= 3) write |= LL_FS_TRUNCATE;
  if (abi >= 5) write |= LL_FS_IOCTL_DEV;
  // Reads and execution stay unhandled: the sandbox's mount namespace already decides what it can see.
  struct ll_ruleset_attr attr = { write, 0, abi >= 6 ? (LL_SCOPE_ABSTRACT_UNIX_SOCKET | LL_SCOPE_SIGNAL) : 0 };
  size_t size = abi >= 6 ? sizeof attr : 2 * sizeof(uint64_t) - (abi >= 4 ? 0 : sizeof(uint64_t));
  int ruleset = (int)syscall(__NR_landlock_create_ruleset, &attr, size, 0);
  if (ruleset < 0) die("landlock_create_ruleset");
  for (int i = 0; i < ndirs; i++) {
    int fd = open(dirs[i], O_PATH | O_CLOEXEC | O_DIRECTORY);
    if (fd < 0) {
      if (errno == ENOENT || errno == ENOTDIR) continue;  // a directory the image lacks (or a link to a file): nothing to allow
      die(dirs[i]);
    }
    struct ll_path_beneath_attr rule = { write, fd };
    if (syscall(__NR_landlock_add_rule, ruleset, LL_RULE_PATH_BENEATH, &rule, 0) != 0) die("landlock_add_rule");
    close(fd);
  }
  if (prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0) die("prctl(NO_NEW_PRIVS)");
  // Log denials of the command it execs too (by default only this program's own would be).
  unsigned flags = abi >= 7 ? LL_RESTRICT_SELF_LOG_NEW_EXEC_ON : 0;
  if (syscall(__NR_landlock_restrict_self, ruleset, flags) != 0) die("landlock_restrict_self");
  close(ruleset);
}

static struct sock_fprog read_program(int fd) {
  size_t cap = 4096 * sizeof(struct sock_filter), len = 0;
  unsigned char *buf = malloc(cap);
  if (buf == NULL) die("malloc");
  for (;;) {
    ssize_t n = read(fd, buf + len, cap - len);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) die("read seccomp program");
    if (n == 0) break;
    len += (size_t)n;
    if (len == cap) { errno = E2BIG; die("seccomp program"); }
  }
  close(fd);
  if (len == 0 || len % sizeof(struct sock_filter) != 0) { errno = EINVAL; die("seccomp program"); }
  struct sock_fprog prog = { (unsigned short)(len / sizeof(struct sock_filter)), (struct sock_filter *)buf };
  return prog;
}

static void send_fd(int sock, int fd) {
  char byte = 'L';
  struct iovec iov = { &byte, 1 };
  char control[CMSG_SPACE(sizeof(int))];
  memset(control, 0, sizeof control);
  struct msghdr msg = { 0 };
  msg.msg_iov = &iov;
  msg.msg_iovlen = 1;
  msg.msg_control = control;
  msg.msg_controllen = sizeof control;
  struct cmsghdr *c = CMSG_FIRSTHDR(&msg);
  c->cmsg_level = SOL_SOCKET;
  c->cmsg_type = SCM_RIGHTS;
  c->cmsg_len = CMSG_LEN(sizeof(int));
  memcpy(CMSG_DATA(c), &fd, sizeof fd);
  ssize_t n;
  do n = sendmsg(sock, &msg, MSG_NOSIGNAL); while (n < 0 && errno == EINTR);
  if (n != 1) die("send seccomp listener");
}

static int parse_fd(const char *s) {
  char *end;
  long v = strtol(s, &end, 10);
  if (*s == 0 || *end != 0 || v < 0 || v > 1 << 20) { fprintf(stderr, "layerd-wall: bad fd %s\n", s); exit(126); }
  return (int)v;
}

int main(int argc, char **argv) {
  int seccomp_fd = -1, notify_fd = -1, close_fd = -1, i = 1;
  char *dirs[64];
  int ndirs = 0, landlock = 0;
  for (; i < argc && strcmp(argv[i], "--") != 0; i++) {
    if (strcmp(argv[i], "--seccomp-fd") == 0 && i + 1 < argc) seccomp_fd = parse_fd(argv[++i]);
    else if (strcmp(argv[i], "--notify-fd") == 0 && i + 1 < argc) notify_fd = parse_fd(argv[++i]);
    else if (strcmp(argv[i], "--close-fd") == 0 && i + 1 < argc) close_fd = parse_fd(argv[++i]);
    else if (strcmp(argv[i], "--landlock") == 0) landlock = 1;
    else if (strcmp(argv[i], "--rw") == 0 && i + 1 < argc && ndirs < 64) dirs[ndirs++] = argv[++i];
    else { fprintf(stderr, "layerd-wall: unknown option %s\n", argv[i]); return 126; }
  }
  if (i + 1 >= argc) { fprintf(stderr, "usage: layerd-wall [--landlock [--rw DIR]…] [--seccomp-fd N --notify-fd M] [--close-fd K] -- CMD [ARG…]\n"); return 126; }
  if (close_fd >= 0) close(close_fd);
  if (landlock) apply_landlock(dirs, ndirs);
  if (seccomp_fd >= 0) {
    struct sock_fprog prog = read_program(seccomp_fd);
    if (prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0) die("prctl(NO_NEW_PRIVS)");
    int listener = (int)syscall(__NR_seccomp, SECCOMP_SET_MODE_FILTER, SECCOMP_FILTER_FLAG_NEW_LISTENER, &prog);
    if (listener < 0) die("seccomp(NEW_LISTENER)");
    if (notify_fd < 0) { errno = EINVAL; die("--seccomp-fd needs --notify-fd"); }
    send_fd(notify_fd, listener);
    close(listener);
    close(notify_fd);
  }
  char **cmd = argv + i + 1;
  execvp(cmd[0], cmd);
  int e = errno;
  fprintf(stderr, "layerd-wall: %s: %s\n", cmd[0], strerror(e));
  return e == ENOENT ? 127 : 126;
}
