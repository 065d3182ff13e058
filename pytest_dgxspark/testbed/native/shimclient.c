/* Client of a simulated node's shim server (testbed/native/shimserver.py), installed in place of each fake tool.
 *
 * It sends its argv, the name it was executed as, umask, ignored and blocked signals and environment, with its
 * stdin, stdout, stderr and working directory as file descriptors (SCM_RIGHTS), over the node's unix socket; the
 * server forks a child that runs the unchanged Python shim as __main__ on those descriptors and answers the child's
 * wait status, which this client then exits with (re-raising the signal the child died of). Signals sent to the
 * client (HUP, INT, QUIT, TERM, USR1, USR2, ALRM) are passed on to the child; when the client dies (SIGKILL of its
 * process group) the server kills the child. Where the server cannot take the call (no socket, no answer, a closed
 * standard descriptor), the client execs the Python shim the way the tool ran before: python3 -IS <source> args.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/auxv.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#ifndef SHIM_PYTHON
#define SHIM_PYTHON "/usr/bin/python3"
#endif
#define SHIM_SOCKET "/run/dgxspark-testbed/shims.sock"
#define SHIM_SOURCES "/usr/lib/dgxspark-testbed/shims-py/"
#define MAX_MESSAGE (192 * 1024)

extern char **environ;
static int server = -1;
static const int forwarded[] = {SIGHUP, SIGINT, SIGQUIT, SIGTERM, SIGUSR1, SIGUSR2, SIGALRM};

static void run_python(const char *name, int argc, char **argv) {
    char source[PATH_MAX];
    char **args = calloc((size_t)argc + 3, sizeof(char *));
    snprintf(source, sizeof source, SHIM_SOURCES "%s", name);
    if (args == NULL) {
        perror("dgxspark shim client");
        _exit(127);
    }
    args[0] = SHIM_PYTHON;
    args[1] = "-IS";
    args[2] = source;
    for (int i = 1; i < argc; i++)
        args[i + 2] = argv[i];
    execv(SHIM_PYTHON, args);
    fprintf(stderr, "dgxspark shim client: exec %s %s: %s\n", SHIM_PYTHON, source, strerror(errno));
    _exit(127);
}

static void forward(int sig) {
    char message[2] = {'S', (char)sig};
    int saved = errno;
    send(server, message, sizeof message, MSG_NOSIGNAL | MSG_DONTWAIT);
    errno = saved;
}

static int append(char *buf, size_t *len, const char *text) {
    size_t n = strlen(text) + 1;
    if (*len + n > MAX_MESSAGE)
        return -1;
    memcpy(buf + *len, text, n);
    *len += n;
    return 0;
}

/* The request: NUL-terminated fields (magic, name, executed-as, umask, ignored, blocked, argc, args..., env...). */
static int request(char *buf, size_t *len, const char *name, int argc, char **argv, unsigned long long *ignored) {
    char number[64];
    const char *execfn = (const char *)getauxval(AT_EXECFN);
    mode_t mask = umask(0);
    sigset_t blocked;
    unsigned long long blocked_bits = 0;
    umask(mask);
    sigprocmask(SIG_BLOCK, NULL, &blocked);
    *ignored = 0;
    for (int sig = 1; sig < 64; sig++) {
        struct sigaction current;
        if (sigaction(sig, NULL, &current) == 0 && current.sa_handler == SIG_IGN)
            *ignored |= 1ULL << sig;
        if (sigismember(&blocked, sig) == 1)
            blocked_bits |= 1ULL << sig;
    }
    *len = 0;
    if (append(buf, len, "DGXSHIM1") || append(buf, len, name) || append(buf, len, execfn ? execfn : argv[0]))
        return -1;
    snprintf(number, sizeof number, "%o", (unsigned)mask);
    if (append(buf, len, number))
        return -1;
    snprintf(number, sizeof number, "%llx", *ignored);
    if (append(buf, len, number))
        return -1;
    snprintf(number, sizeof number, "%llx", blocked_bits);
    if (append(buf, len, number))
        return -1;
    snprintf(number, sizeof number, "%d", argc - 1);
    if (append(buf, len, number))
        return -1;
    for (int i = 1; i < argc; i++)
        if (append(buf, len, argv[i]))
            return -1;
    for (char **env = environ; *env; env++)
        if (append(buf, len, *env))
            return -1;
    return 0;
}

static int send_request(const char *buf, size_t len, int cwd) {
    int fds[4] = {0, 1, 2, cwd};
    char control[CMSG_SPACE(sizeof fds)];
    struct iovec iov = {(void *)buf, len};
    struct msghdr msg = {0};
    struct cmsghdr *cmsg;
    memset(control, 0, sizeof control);
    msg.msg_iov = &iov;
    msg.msg_iovlen = 1;
    msg.msg_control = control;
    msg.msg_controllen = sizeof control;
    cmsg = CMSG_FIRSTHDR(&msg);
    cmsg->cmsg_level = SOL_SOCKET;
    cmsg->cmsg_type = SCM_RIGHTS;
    cmsg->cmsg_len = CMSG_LEN(sizeof fds);
    memcpy(CMSG_DATA(cmsg), fds, sizeof fds);
    return sendmsg(server, &msg, MSG_NOSIGNAL) == (ssize_t)len ? 0 : -1;
}

/* The next answer: 'R' (the child runs), 'X' + wait status; 0 on end of stream. */
static ssize_t answer(char *buf, size_t size) {
    ssize_t n;
    do
        n = recv(server, buf, size, 0);
    while (n < 0 && errno == EINTR);
    return n;
}

static void exit_as(int status) {
    if (WIFSIGNALED(status)) {
        int sig = WTERMSIG(status);
        struct rlimit none = {0, 0};
        sigset_t only;
        setrlimit(RLIMIT_CORE, &none); /* the child dumped its core already, where cores are on */
        signal(sig, SIG_DFL);
        sigemptyset(&only);
        sigaddset(&only, sig);
        sigprocmask(SIG_UNBLOCK, &only, NULL);
        raise(sig);
        _exit(128 + sig);
    }
    _exit(WIFEXITED(status) ? WEXITSTATUS(status) : 1);
}

int main(int argc, char **argv) {
    static char buf[MAX_MESSAGE];
    char exe[PATH_MAX], reply[16];
    const char *name;
    unsigned long long ignored;
    size_t len;
    ssize_t got, n = readlink("/proc/self/exe", exe, sizeof exe - 1);
    struct sockaddr_un address = {.sun_family = AF_UNIX, .sun_path = SHIM_SOCKET};
    int cwd, status;

    if (n > 0)
        exe[n] = '\0';
    else if (getauxval(AT_EXECFN)) /* no /proc: the name it was executed as */
        snprintf(exe, sizeof exe, "%s", (const char *)getauxval(AT_EXECFN));
    else
        snprintf(exe, sizeof exe, "%s", argc > 0 ? argv[0] : "");
    name = strrchr(exe, '/') ? strrchr(exe, '/') + 1 : exe;
    for (int fd = 0; fd < 3; fd++)
        if (fcntl(fd, F_GETFD) < 0)
            run_python(name, argc, argv);
    cwd = open(".", O_PATH | O_DIRECTORY | O_CLOEXEC);
    server = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0);
    if (cwd < 0 || server < 0 || connect(server, (struct sockaddr *)&address, sizeof address) < 0 ||
        request(buf, &len, name, argc, argv, &ignored) < 0 || send_request(buf, len, cwd) < 0)
        run_python(name, argc, argv);
    close(cwd);
    got = answer(reply, sizeof reply);
    if (got != 1 || reply[0] != 'R') /* the server declined, or went away before starting anything */
        run_python(name, argc, argv);
    for (size_t i = 0; i < sizeof forwarded / sizeof forwarded[0]; i++) {
        struct sigaction action = {0};
        if (ignored & (1ULL << forwarded[i]))
            continue;
        action.sa_handler = forward;
        action.sa_flags = SA_RESTART;
        sigemptyset(&action.sa_mask);
        sigaction(forwarded[i], &action, NULL);
    }
    got = answer(reply, sizeof reply);
    if (got != 1 + (ssize_t)sizeof status || reply[0] != 'X') {
        fprintf(stderr, "dgxspark shim client: the shim server went away while %s ran\n", name);
        return 255;
    }
    memcpy(&status, reply + 1, sizeof status);
    exit_as(status);
    return 1;
}
