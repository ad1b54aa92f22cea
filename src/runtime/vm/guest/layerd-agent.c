/*
 * layerd-agent: the guest side of the microvm and vm tiers.
 *
 * Runs as PID 1 of the guest (the initrd's /init execs it once the image's
 * block view is mounted at --root). It opens one byte stream to the host
 * (a virtio-serial port under QEMU, a vsock connection under Firecracker),
 * says READY, then serves exec requests one at a time:
 *
 *   host -> guest   EXEC(argv, env, cwd, user)  STDIN(bytes)*  STDIN_EOF
 *                   KILL                         SHUTDOWN
 *   guest -> host   READY  STDOUT(bytes)*  STDERR(bytes)*  EXIT(code, signal)
 *                   or, when the command could not be set up (unknown user, working
 *                   directory not enterable), ERROR(kind, message) instead of EXIT
 *
 * Every frame is [type u8][length u32 little-endian][payload]. All output of
 * a command travels on the same ordered stream as its EXIT frame, so the host
 * has every byte when it sees EXIT; payloads are raw bytes (binary exact).
 *
 * Each command runs chrooted into the image root, in its own session, in the
 * cgroup /sys/fs/cgroup/sandbox (pids.max = the sandbox's pids limit), as the
 * requested user. When the command's main process exits, whatever it left
 * running in the cgroup is killed (cgroup.kill), like a container whose init
 * exited, so its pipes close and nothing outlives an exec.
 *
 * --resize DEV grows the mounted ext4 root online to the size of DEV (the
 * per-VM qcow2 overlay is bigger than the image's filesystem by the disk
 * quota), so the guest gets ENOSPC exactly when the quota is used up.
 *
 * Built statically (cc -static -Os) into the initrd by initrd-builder.ts.
 * Linux only; no dependencies besides libc.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <grp.h>
#include <limits.h>
#include <poll.h>
#include <signal.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <dirent.h>
#include <sys/ioctl.h>
#include <sys/mount.h>
#include <sys/reboot.h>
#include <sys/signalfd.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/statfs.h>
#include <sys/time.h>
#include <sys/types.h>
#include <sys/utsname.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>
#include <linux/fs.h>
#include <linux/vm_sockets.h>

#ifndef EXT4_IOC_RESIZE_FS
#define EXT4_IOC_RESIZE_FS _IOW('f', 16, uint64_t)
#endif

#define AGENT_VERSION "1"

/* host -> guest */
#define F_EXEC 1
#define F_STDIN 2
#define F_STDIN_EOF 3
#define F_KILL 4
#define F_SHUTDOWN 5
/* guest -> host */
#define F_READY 16
#define F_STDOUT 17
#define F_STDERR 18
#define F_EXIT 19
#define F_ERROR 21

#define MAX_FRAME_BYTES (4u << 20)
#define IO_CHUNK_BYTES 65536
#define SANDBOX_CGROUP "/sys/fs/cgroup/sandbox"
#define DEFAULT_PATH "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
#define VSOCK_HOST_CID 2
#define EXIT_GRACE_MS 1000

static int port_fd = -1;
static const char *root_dir = "/newroot";

/* Console diagnostics (the guest's console log on the host). */
static void logmsg (const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  fprintf(stderr, "layerd-agent: ");
  vfprintf(stderr, fmt, ap);
  fprintf(stderr, "\n");
  va_end(ap);
}

static void power_off (void) {
  sync();
  reboot(RB_POWER_OFF);
  reboot(RB_AUTOBOOT); /* QEMU runs with -no-reboot; Firecracker exits on reset */
  for (;;) pause();
}

static int write_all (int fd, const void *buf, size_t len) {
  const char *p = buf;
  while (len > 0) {
    ssize_t n = write(fd, p, len);
    if (n < 0) {
      if (errno == EINTR) continue;
      if (errno == EAGAIN) { struct pollfd w = { fd, POLLOUT, 0 }; poll(&w, 1, 100); continue; }
      return -1;
    }
    p += n;
    len -= (size_t)n;
  }
  return 0;
}

static void send_frame (uint8_t type, const void *payload, uint32_t len) {
  uint8_t head[5] = { type, (uint8_t)len, (uint8_t)(len >> 8), (uint8_t)(len >> 16), (uint8_t)(len >> 24) };
  if (write_all(port_fd, head, 5) < 0 || (len > 0 && write_all(port_fd, payload, len) < 0)) {
    logmsg("host channel write failed (%s); powering off", strerror(errno));
    power_off();
  }
}

/* ---- reading frames from the host ---- */

static uint8_t *in_buf;
static size_t in_len, in_cap;

/* Read what is available on the port into in_buf. Host gone (EOF) powers the guest off. */
static void read_port (void) {
  if (in_cap - in_len < IO_CHUNK_BYTES) {
    in_cap = in_cap * 2 + IO_CHUNK_BYTES;
    in_buf = realloc(in_buf, in_cap);
    if (in_buf == NULL) { logmsg("out of memory"); power_off(); }
  }
  ssize_t n = read(port_fd, in_buf + in_len, in_cap - in_len);
  if (n < 0 && (errno == EINTR || errno == EAGAIN)) return;
  if (n <= 0) {
    logmsg("host channel closed (%s); powering off", n == 0 ? "EOF" : strerror(errno));
    power_off();
  }
  in_len += (size_t)n;
}

/* Take one complete frame out of in_buf; returns 0 if none is complete yet. Payload stays valid until the next call. */
static uint8_t *frame_payload;
static int next_frame (uint8_t *type, uint32_t *len) {
  static size_t consumed;
  if (consumed > 0) { memmove(in_buf, in_buf + consumed, in_len - consumed); in_len -= consumed; consumed = 0; }
  if (in_len < 5) return 0;
  uint32_t l = (uint32_t)in_buf[1] | (uint32_t)in_buf[2] << 8 | (uint32_t)in_buf[3] << 16 | (uint32_t)in_buf[4] << 24;
  if (l > MAX_FRAME_BYTES) { logmsg("frame of %u bytes from host exceeds the limit; powering off", l); power_off(); }
  if (in_len < 5 + (size_t)l) return 0;
  *type = in_buf[0];
  *len = l;
  frame_payload = in_buf + 5;
  consumed = 5 + (size_t)l;
  return 1;
}

static void wait_frame (uint8_t *type, uint32_t *len) {
  while (!next_frame(type, len)) {
    struct pollfd p = { port_fd, POLLIN, 0 };
    if (poll(&p, 1, -1) < 0 && errno != EINTR) { logmsg("poll: %s", strerror(errno)); power_off(); }
    read_port();
  }
}

/* ---- the exec request ---- */

struct exec_req {
  char **argv;
  char **env;
  char *cwd;
  char *user;
  long long host_time_ms;
};

/* Payload: NUL-terminated fields: argc, argv..., envc, env..., cwd, user, host time (ms since epoch). */
static int parse_exec (char *p, uint32_t len, struct exec_req *r) {
  char *end = p + len;
  char *fields[8192 + 8];
  size_t nf = 0;
  while (p < end) {
    char *z = memchr(p, 0, (size_t)(end - p));
    if (z == NULL || nf >= sizeof fields / sizeof fields[0]) return -1;
    fields[nf++] = p;
    p = z + 1;
  }
  size_t i = 0;
  if (nf < 1) return -1;
  long argc = strtol(fields[i++], NULL, 10);
  if (argc < 1 || (size_t)argc > nf - i) return -1;
  r->argv = calloc((size_t)argc + 1, sizeof(char *));
  for (long k = 0; k < argc; k++) r->argv[k] = fields[i++];
  if (i >= nf) return -1;
  long envc = strtol(fields[i++], NULL, 10);
  if (envc < 0 || (size_t)envc > nf - i) return -1;
  r->env = calloc((size_t)envc + 2, sizeof(char *));
  for (long k = 0; k < envc; k++) r->env[k] = fields[i++];
  if (nf - i < 3) return -1;
  r->cwd = fields[i++];
  r->user = fields[i++];
  r->host_time_ms = strtoll(fields[i++], NULL, 10);
  return 0;
}

/* ---- user lookup in the image's /etc/passwd and /etc/group (called after chroot) ---- */

static int all_digits (const char *s) {
  if (*s == 0) return 0;
  for (; *s; s++) if (*s < '0' || *s > '9') return 0;
  return 1;
}

/* Find `name` (or numeric id) in a colon-separated file; copies the line's fields. Returns 1 if found. */
static int lookup_line (const char *file, const char *key, int by_id_field, char *line, size_t cap, char **f, int nf) {
  FILE *fp = fopen(file, "re");
  if (fp == NULL) return 0;
  int found = 0;
  while (fgets(line, (int)cap, fp) != NULL) {
    line[strcspn(line, "\n")] = 0;
    int k = 0;
    char *s = line;
    for (; k < nf; k++) {
      f[k] = s;
      char *c = strchr(s, ':');
      if (c == NULL) { k++; break; }
      *c = 0;
      s = c + 1;
    }
    for (; k < nf; k++) f[k] = "";
    if (strcmp(by_id_field ? f[2] : f[0], key) == 0) { found = 1; break; }
  }
  fclose(fp);
  return found;
}

struct ids { uid_t uid; gid_t gid; gid_t groups[64]; int ngroups; char home[PATH_MAX]; };

static char setup_error[512];

/* "user", "uid", "user:group", "uid:gid", "" (root). Fails with a message in setup_error. */
static int resolve_user (const char *spec, struct ids *ids) {
  char user[256] = "", group[256] = "", line[4096], *f[7];
  const char *colon = strchr(spec, ':');
  snprintf(user, sizeof user, "%.*s", colon ? (int)(colon - spec) : (int)strlen(spec), spec);
  if (colon) snprintf(group, sizeof group, "%s", colon + 1);
  if (user[0] == 0) snprintf(user, sizeof user, "0");
  ids->ngroups = 0;
  snprintf(ids->home, sizeof ids->home, "/");
  char name[256] = "";
  if (lookup_line("/etc/passwd", user, all_digits(user), line, sizeof line, f, 7)) {
    ids->uid = (uid_t)strtoul(f[2], NULL, 10);
    ids->gid = (gid_t)strtoul(f[3], NULL, 10);
    if (f[5][0]) snprintf(ids->home, sizeof ids->home, "%s", f[5]);
    snprintf(name, sizeof name, "%s", f[0]);
  } else if (all_digits(user)) {
    ids->uid = (uid_t)strtoul(user, NULL, 10);
    ids->gid = ids->uid == 0 ? 0 : ids->uid;
  } else {
    snprintf(setup_error, sizeof setup_error, "user\nuser %s: no such user in the image's /etc/passwd", spec);
    return -1;
  }
  if (group[0]) {
    if (lookup_line("/etc/group", group, all_digits(group), line, sizeof line, f, 4)) ids->gid = (gid_t)strtoul(f[2], NULL, 10);
    else if (all_digits(group)) ids->gid = (gid_t)strtoul(group, NULL, 10);
    else { snprintf(setup_error, sizeof setup_error, "user\nuser %s: no such group in the image's /etc/group", spec); return -1; }
  } else if (name[0]) {
    /* Supplementary groups: every group listing the user, as runc does. */
    FILE *fp = fopen("/etc/group", "re");
    while (fp != NULL && fgets(line, sizeof line, fp) != NULL && ids->ngroups < 64) {
      line[strcspn(line, "\n")] = 0;
      char *g[4] = { line, "", "", "" };
      int k = 1;
      for (char *s = line; k < 4 && (s = strchr(s, ':')) != NULL; k++) { *s++ = 0; g[k] = s; }
      for (char *m = strtok(g[3], ","); m != NULL; m = strtok(NULL, ",")) {
        if (strcmp(m, name) == 0) { ids->groups[ids->ngroups++] = (gid_t)strtoul(g[2], NULL, 10); break; }
      }
    }
    if (fp != NULL) fclose(fp);
  }
  return 0;
}

static const char *env_get (char **env, const char *key) {
  size_t kl = strlen(key);
  for (; *env; env++) if (strncmp(*env, key, kl) == 0 && (*env)[kl] == '=') return *env + kl + 1;
  return NULL;
}

static void mkdir_p (const char *path) {
  char buf[PATH_MAX];
  snprintf(buf, sizeof buf, "%s", path);
  for (char *s = buf + 1; *s; s++) {
    if (*s == '/') { *s = 0; mkdir(buf, 0755); *s = '/'; }
  }
  mkdir(buf, 0755);
}

/* execve with PATH search in the command's own environment (execvpe semantics without the shell fallback). */
static void exec_command (char **argv, char **env) {
  if (strchr(argv[0], '/') != NULL) { execve(argv[0], argv, env); return; }
  const char *path = env_get(env, "PATH");
  if (path == NULL) path = DEFAULT_PATH;
  int saw_eacces = 0;
  char *copy = strdup(path), *save = NULL;
  for (char *dir = strtok_r(copy, ":", &save); dir != NULL; dir = strtok_r(NULL, ":", &save)) {
    char full[PATH_MAX];
    snprintf(full, sizeof full, "%s/%s", *dir ? dir : ".", argv[0]);
    execve(full, argv, env);
    if (errno == EACCES) saw_eacces = 1;
  }
  errno = saw_eacces ? EACCES : ENOENT;
}

/* Report a set-up failure to the agent through the close-on-exec pipe `fd` and exit. */
static void setup_failed (int fd) {
  if (write(fd, setup_error, strlen(setup_error)) < 0) { /* the agent then reports exit 126 */ }
  _exit(126);
}

static void child_main (struct exec_req *r, int in_r, int out_w, int err_w, int report_w) {
  setsid();
  int cg = open(SANDBOX_CGROUP "/cgroup.procs", O_WRONLY | O_CLOEXEC);
  if (cg >= 0) { if (write(cg, "0", 1) < 0) { /* reported below through pids not being limited; keep going */ } close(cg); }
  dup2(in_r, 0);
  dup2(out_w, 1);
  dup2(err_w, 2);
  for (int fd = 3; fd < 1024; fd++) if (fd != report_w) close(fd);
  sigset_t none;
  sigemptyset(&none);
  sigprocmask(SIG_SETMASK, &none, NULL);
  for (int s = 1; s < NSIG; s++) signal(s, SIG_DFL);
  if (chroot(root_dir) != 0 || chdir("/") != 0) {
    snprintf(setup_error, sizeof setup_error, "root\nchroot %s: %s", root_dir, strerror(errno));
    setup_failed(report_w);
  }
  struct ids ids;
  if (resolve_user(r->user, &ids) != 0) setup_failed(report_w);
  const char *cwd = r->cwd[0] ? r->cwd : "/";
  struct stat st;
  if (stat(cwd, &st) != 0) mkdir_p(cwd); /* like runc: a missing working directory is created */
  if (setgroups((size_t)ids.ngroups, ids.groups) != 0 || setgid(ids.gid) != 0 || setuid(ids.uid) != 0) {
    snprintf(setup_error, sizeof setup_error, "user\ncannot switch to user %s: %s", r->user, strerror(errno));
    setup_failed(report_w);
  }
  if (chdir(cwd) != 0) {
    snprintf(setup_error, sizeof setup_error, "cwd\ncannot enter working directory %s: %s", cwd, strerror(errno));
    setup_failed(report_w);
  }
  /* HOME and PATH defaults, as container runtimes set them. */
  size_t n = 0;
  while (r->env[n]) n++;
  char **env = calloc(n + 3, sizeof(char *));
  memcpy(env, r->env, n * sizeof(char *));
  char home[PATH_MAX + 8];
  if (env_get(env, "HOME") == NULL) { snprintf(home, sizeof home, "HOME=%s", ids.home); env[n++] = home; }
  if (env_get(env, "PATH") == NULL) env[n++] = "PATH=" DEFAULT_PATH;
  exec_command(r->argv, env);
  int e = errno;
  fprintf(stderr, "layerd-agent: cannot run %s: %s\n", r->argv[0], strerror(e));
  _exit(e == ENOENT ? 127 : 126);
}

static void cgroup_kill (void) {
  int fd = open(SANDBOX_CGROUP "/cgroup.kill", O_WRONLY | O_CLOEXEC);
  if (fd >= 0) { if (write(fd, "1", 1) < 0) logmsg("cgroup.kill: %s", strerror(errno)); close(fd); }
}

static void set_clock (long long host_ms) {
  struct timespec now;
  clock_gettime(CLOCK_REALTIME, &now);
  long long guest_ms = (long long)now.tv_sec * 1000 + now.tv_nsec / 1000000;
  if (host_ms > 0 && llabs(guest_ms - host_ms) > 1000) {
    struct timespec t = { (time_t)(host_ms / 1000), (long)(host_ms % 1000) * 1000000 };
    clock_settime(CLOCK_REALTIME, &t);
  }
}

static void run_exec (char *payload, uint32_t len, int sfd) {
  struct exec_req r;
  memset(&r, 0, sizeof r);
  int in[2], out[2], err[2], report[2];
  if (parse_exec(payload, len, &r) != 0) {
    const char *m = "layerd-agent: malformed exec request\n";
    send_frame(F_STDERR, m, (uint32_t)strlen(m));
    send_frame(F_EXIT, "126\0" "0", 6);
    return;
  }
  set_clock(r.host_time_ms);
  if (pipe2(in, O_CLOEXEC) != 0 || pipe2(out, O_CLOEXEC) != 0 || pipe2(err, O_CLOEXEC) != 0 || pipe2(report, O_CLOEXEC) != 0) {
    logmsg("pipe: %s", strerror(errno));
    send_frame(F_EXIT, "126\0" "0", 6);
    return;
  }
  pid_t pid = fork();
  if (pid == 0) child_main(&r, in[0], out[1], err[1], report[1]);
  close(in[0]); close(out[1]); close(err[1]); close(report[1]);
  free(r.argv); free(r.env); /* the request's strings live in the frame buffer, which moves on the next read */
  if (pid < 0) {
    logmsg("fork: %s", strerror(errno));
    close(in[1]); close(out[0]); close(err[0]); close(report[0]);
    send_frame(F_EXIT, "126\0" "0", 6);
    return;
  }
  /* EOF here means execve succeeded (the pipe is close-on-exec) or the child died; text means set-up failed. */
  char report_buf[sizeof setup_error];
  size_t report_len = 0;
  for (;;) {
    ssize_t n = read(report[0], report_buf + report_len, sizeof report_buf - 1 - report_len);
    if (n > 0) { report_len += (size_t)n; if (report_len < sizeof report_buf - 1) continue; }
    if (n < 0 && errno == EINTR) continue;
    break;
  }
  close(report[0]);
  if (report_len > 0) {
    waitpid(pid, NULL, 0);
    close(in[1]); close(out[0]); close(err[0]);
    send_frame(F_ERROR, report_buf, (uint32_t)report_len);
    return;
  }
  fcntl(in[1], F_SETFL, O_NONBLOCK);
  int in_fd = in[1], out_fd = out[0], err_fd = err[0];
  uint8_t *pend = NULL;
  size_t pend_len = 0, pend_off = 0;
  int stdin_eof = 0, exited = 0, status = 0;
  /* STDIN/KILL frames may have arrived in the same read as EXEC: handle what is buffered first. */
  int pending_frames = 1;
  char buf[IO_CHUNK_BYTES];
  while (out_fd >= 0 || err_fd >= 0 || !exited) {
    if (pending_frames) {
      pending_frames = 0;
      uint8_t type;
      uint32_t l;
      while (next_frame(&type, &l)) {
        if (type == F_STDIN) {
          if (pend_off == pend_len) { pend_off = pend_len = 0; }
          pend = realloc(pend, pend_len + l);
          memcpy(pend + pend_len, frame_payload, l);
          pend_len += l;
        } else if (type == F_STDIN_EOF) {
          stdin_eof = 1;
          if (in_fd >= 0 && pend_off == pend_len) { close(in_fd); in_fd = -1; }
        } else if (type == F_KILL) {
          cgroup_kill();
          kill(-pid, SIGKILL);
        } else if (type == F_SHUTDOWN) {
          cgroup_kill();
          power_off();
        } else {
          logmsg("unexpected frame type %u during exec", type);
        }
      }
    }
    struct pollfd p[5];
    int np = 0, ip = -1, op = -1, ep = -1;
    p[np++] = (struct pollfd){ port_fd, POLLIN, 0 };
    p[np++] = (struct pollfd){ sfd, POLLIN, 0 };
    if (out_fd >= 0) { op = np; p[np++] = (struct pollfd){ out_fd, POLLIN, 0 }; }
    if (err_fd >= 0) { ep = np; p[np++] = (struct pollfd){ err_fd, POLLIN, 0 }; }
    if (in_fd >= 0 && pend_len > pend_off) { ip = np; p[np++] = (struct pollfd){ in_fd, POLLOUT, 0 }; }
    /* Once the command is gone and its cgroup killed, output still open after a grace period
       belongs to a process that left the cgroup: stop waiting for it. */
    int ready = poll(p, (nfds_t)np, exited ? EXIT_GRACE_MS : -1);
    if (ready < 0) { if (errno == EINTR) continue; logmsg("poll: %s", strerror(errno)); break; }
    if (ready == 0) {
      if (out_fd >= 0) close(out_fd);
      if (err_fd >= 0) close(err_fd);
      out_fd = err_fd = -1;
      continue;
    }
    if (p[1].revents & POLLIN) {
      struct signalfd_siginfo si;
      while (read(sfd, &si, sizeof si) > 0) {}
      int st;
      pid_t w;
      while ((w = waitpid(-1, &st, WNOHANG)) > 0) {
        if (w == pid) { exited = 1; status = st; cgroup_kill(); }
      }
    }
    if (op >= 0 && (p[op].revents & (POLLIN | POLLHUP | POLLERR))) {
      ssize_t n = read(out_fd, buf, sizeof buf);
      if (n > 0) send_frame(F_STDOUT, buf, (uint32_t)n);
      else if (n == 0 || errno != EINTR) { close(out_fd); out_fd = -1; }
    }
    if (ep >= 0 && (p[ep].revents & (POLLIN | POLLHUP | POLLERR))) {
      ssize_t n = read(err_fd, buf, sizeof buf);
      if (n > 0) send_frame(F_STDERR, buf, (uint32_t)n);
      else if (n == 0 || errno != EINTR) { close(err_fd); err_fd = -1; }
    }
    if (ip >= 0 && (p[ip].revents & (POLLOUT | POLLERR | POLLHUP))) {
      ssize_t n = write(in_fd, pend + pend_off, pend_len - pend_off);
      if (n > 0) pend_off += (size_t)n;
      else if (n < 0 && errno != EAGAIN && errno != EINTR) { close(in_fd); in_fd = -1; } /* EPIPE: the command stopped reading */
    }
    if (in_fd >= 0 && stdin_eof && pend_off == pend_len) { close(in_fd); in_fd = -1; }
    if (p[0].revents & (POLLIN | POLLHUP | POLLERR)) {
      read_port();
      pending_frames = 1;
    }
  }
  if (in_fd >= 0) close(in_fd);
  free(pend);
  char exitp[32];
  int code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
  int sig = WIFSIGNALED(status) ? WTERMSIG(status) : 0;
  int n = snprintf(exitp, sizeof exitp, "%d", code);
  n += 1 + snprintf(exitp + n + 1, sizeof exitp - (size_t)n - 1, "%d", sig);
  send_frame(F_EXIT, exitp, (uint32_t)n + 1);
}

/* ---- set-up ---- */

static void grow_root (const char *dev) {
  int fd = open(dev, O_RDONLY | O_CLOEXEC);
  uint64_t bytes = 0;
  uint8_t sb[1024];
  if (fd < 0 || ioctl(fd, BLKGETSIZE64, &bytes) != 0 || pread(fd, sb, sizeof sb, 1024) != (ssize_t)sizeof sb) {
    logmsg("resize: cannot read %s: %s", dev, strerror(errno));
    if (fd >= 0) close(fd);
    return;
  }
  close(fd);
  /* The mounted filesystem's current size from its superblock (statfs leaves out metadata). */
  uint32_t log_block = (uint32_t)sb[0x18] | (uint32_t)sb[0x19] << 8 | (uint32_t)sb[0x1a] << 16 | (uint32_t)sb[0x1b] << 24;
  uint64_t cur = (uint64_t)sb[4] | (uint64_t)sb[5] << 8 | (uint64_t)sb[6] << 16 | (uint64_t)sb[7] << 24;
  if (sb[0x60] & 0x80) cur |= ((uint64_t)sb[0x150] | (uint64_t)sb[0x151] << 8 | (uint64_t)sb[0x152] << 16 | (uint64_t)sb[0x153] << 24) << 32;
  uint64_t blocks = bytes / (1024ull << log_block);
  if (blocks <= cur) return;
  int dfd = open(root_dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (dfd < 0 || ioctl(dfd, EXT4_IOC_RESIZE_FS, &blocks) != 0) logmsg("resize of %s to %llu blocks failed: %s", root_dir, (unsigned long long)blocks, strerror(errno));
  if (dfd >= 0) close(dfd);
}

/* The virtio-serial port named `name` (/dev/vportNpM), waiting for the driver to create it. */
static int open_serial_port (const char *name) {
  for (int tries = 0; tries < 500; tries++) {
    DIR *d = opendir("/sys/class/virtio-ports");
    struct dirent *e;
    while (d != NULL && (e = readdir(d)) != NULL) {
      if (e->d_name[0] == '.') continue;
      char path[512], got[256] = "";
      snprintf(path, sizeof path, "/sys/class/virtio-ports/%s/name", e->d_name);
      FILE *f = fopen(path, "re");
      if (f == NULL) continue;
      if (fgets(got, sizeof got, f) != NULL) got[strcspn(got, "\n")] = 0;
      fclose(f);
      if (strcmp(got, name) == 0) {
        snprintf(path, sizeof path, "/dev/%s", e->d_name);
        int fd = open(path, O_RDWR | O_CLOEXEC);
        closedir(d);
        if (fd >= 0) return fd;
        logmsg("open %s: %s", path, strerror(errno));
        return -1;
      }
    }
    if (d != NULL) closedir(d);
    usleep(10000);
  }
  return -1;
}

static int connect_vsock (unsigned port) {
  for (int tries = 0; tries < 500; tries++) {
    int fd = socket(AF_VSOCK, SOCK_STREAM | SOCK_CLOEXEC, 0);
    struct sockaddr_vm a = { .svm_family = AF_VSOCK, .svm_cid = VSOCK_HOST_CID, .svm_port = port };
    if (fd >= 0 && connect(fd, (struct sockaddr *)&a, sizeof a) == 0) return fd;
    if (fd >= 0) close(fd);
    usleep(10000);
  }
  return -1;
}

static void setup_cgroup (const char *pids) {
  mkdir("/sys/fs/cgroup", 0755);
  if (mount("cgroup2", "/sys/fs/cgroup", "cgroup2", MS_NOSUID | MS_NODEV | MS_NOEXEC, NULL) != 0) { logmsg("mount cgroup2: %s", strerror(errno)); return; }
  int fd = open("/sys/fs/cgroup/cgroup.subtree_control", O_WRONLY | O_CLOEXEC);
  if (fd < 0 || write(fd, "+pids +memory", 13) < 0) logmsg("cgroup controllers: %s", strerror(errno));
  if (fd >= 0) close(fd);
  mkdir(SANDBOX_CGROUP, 0755);
  fd = open(SANDBOX_CGROUP "/pids.max", O_WRONLY | O_CLOEXEC);
  if (fd < 0 || write(fd, pids, strlen(pids)) < 0) logmsg("pids.max: %s", strerror(errno));
  if (fd >= 0) close(fd);
}

int main (int argc, char **argv) {
  const char *port_name = "org.layerd.agent", *resize_dev = NULL, *pids = "max";
  long vsock_port = -1;
  for (int i = 1; i + 1 < argc; i += 2) {
    if (strcmp(argv[i], "--root") == 0) root_dir = argv[i + 1];
    else if (strcmp(argv[i], "--port") == 0) port_name = argv[i + 1];
    else if (strcmp(argv[i], "--vsock") == 0) vsock_port = strtol(argv[i + 1], NULL, 10);
    else if (strcmp(argv[i], "--resize") == 0) resize_dev = argv[i + 1];
    else if (strcmp(argv[i], "--pids") == 0) pids = argv[i + 1];
  }
  /* The agent itself must survive the OOM killer and the command's signals. */
  int oom = open("/proc/self/oom_score_adj", O_WRONLY | O_CLOEXEC);
  if (oom >= 0) { if (write(oom, "-1000", 5) < 0) logmsg("oom_score_adj: %s", strerror(errno)); close(oom); }
  sigset_t mask;
  sigemptyset(&mask);
  sigaddset(&mask, SIGCHLD);
  sigprocmask(SIG_BLOCK, &mask, NULL);
  signal(SIGPIPE, SIG_IGN);
  int sfd = signalfd(-1, &mask, SFD_NONBLOCK | SFD_CLOEXEC);
  if (resize_dev != NULL) grow_root(resize_dev);
  setup_cgroup(pids);
  port_fd = vsock_port >= 0 ? connect_vsock((unsigned)vsock_port) : open_serial_port(port_name);
  if (port_fd < 0) { logmsg("no host channel (%s)", vsock_port >= 0 ? "vsock" : port_name); power_off(); }
  struct utsname u;
  uname(&u);
  struct statfs sf;
  char ready[512];
  unsigned long long free_bytes = statfs(root_dir, &sf) == 0 ? (unsigned long long)sf.f_bavail * (unsigned long long)sf.f_bsize : 0;
  FILE *up = fopen("/proc/uptime", "re");
  double uptime = 0;
  if (up != NULL) { if (fscanf(up, "%lf", &uptime) != 1) uptime = 0; fclose(up); }
  int n = snprintf(ready, sizeof ready, "version=%s\nkernel=%s\nrootFreeBytes=%llu\nuptimeS=%.3f\n", AGENT_VERSION, u.release, free_bytes, uptime);
  send_frame(F_READY, ready, (uint32_t)n);
  for (;;) {
    uint8_t type;
    uint32_t len;
    wait_frame(&type, &len);
    if (type == F_EXEC) run_exec((char *)frame_payload, len, sfd);
    else if (type == F_SHUTDOWN) { cgroup_kill(); power_off(); }
    else if (type == F_STDIN || type == F_STDIN_EOF || type == F_KILL) { /* for an exec that already ended */ }
    else logmsg("unknown frame type %u", type);
    /* Reap anything left over (orphans reparented to PID 1). */
    struct signalfd_siginfo si;
    while (read(sfd, &si, sizeof si) > 0) {}
    while (waitpid(-1, NULL, WNOHANG) > 0) {}
  }
}
