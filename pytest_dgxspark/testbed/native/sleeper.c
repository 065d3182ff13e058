/* Stand-in daemon of the dgxspark testbed: keeps its command line alive, optionally serving unix sockets.
 *
 * Installed under a daemon's real path (rke2, containerd, kubelet, dockerd, ...) so that comm and args
 * are the real ones. $DGXSPARK_LISTEN (colon-separated paths) names unix sockets to listen on; each
 * accepted connection is closed at once, so the socket answers like a live daemon's.
 *
 * `<daemon> --version` (or -v) prints /usr/lib/dgxspark-testbed/versions/<daemon> and exits, as the real binary
 * answers; without that file it says so and exits 1. It never blocks: a probe of the stand-in cannot hang.
 */
#include <errno.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#define MAX_SOCKETS 8

static void make_parents(char *path) {
    for (char *p = path + 1; *p; p++) {
        if (*p != '/') continue;
        *p = '\0';
        mkdir(path, 0755);
        *p = '/';
    }
}

static int listen_on(const char *path) {
    struct sockaddr_un addr;
    char copy[sizeof addr.sun_path];
    int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0 || strlen(path) >= sizeof addr.sun_path) return -1;
    memset(&addr, 0, sizeof addr);
    addr.sun_family = AF_UNIX;
    strcpy(addr.sun_path, path);
    strcpy(copy, path);
    make_parents(copy);
    unlink(path);
    if (bind(fd, (struct sockaddr *)&addr, sizeof addr) < 0 || listen(fd, 64) < 0) {
        fprintf(stderr, "sleeper: cannot listen on %s: %s\n", path, strerror(errno));
        close(fd);
        return -1;
    }
    return fd;
}

static int print_version(const char *argv0) {
    const char *base = strrchr(argv0, '/');
    char path[512];
    char buf[4096];
    size_t got;
    FILE *f;
    base = base ? base + 1 : argv0;
    snprintf(path, sizeof path, "/usr/lib/dgxspark-testbed/versions/%s", base);
    f = fopen(path, "r");
    if (!f) {
        fprintf(stderr, "%s: --version is not simulated on this testbed node (%s: %s)\n", base, path, strerror(errno));
        return 1;
    }
    while ((got = fread(buf, 1, sizeof buf, f)) > 0) fwrite(buf, 1, got, stdout);
    fclose(f);
    return 0;
}

int main(int argc, char **argv) {
    struct pollfd fds[MAX_SOCKETS];
    int n = 0;
    if (argc > 1 && (!strcmp(argv[1], "--version") || !strcmp(argv[1], "-v") || !strcmp(argv[1], "version")))
        return print_version(argv[0]);
    const char *spec = getenv("DGXSPARK_LISTEN");
    if (spec && *spec) {
        char *list = strdup(spec);
        for (char *tok = strtok(list, ":"); tok && n < MAX_SOCKETS; tok = strtok(NULL, ":")) {
            int fd = listen_on(tok);
            if (fd >= 0) { fds[n].fd = fd; fds[n].events = POLLIN; n++; }
        }
        free(list);
    }
    if (n == 0) for (;;) pause();
    for (;;) {
        if (poll(fds, (nfds_t)n, -1) < 0) continue;
        for (int i = 0; i < n; i++) {
            if (!(fds[i].revents & POLLIN)) continue;
            int conn = accept(fds[i].fd, NULL, NULL);
            if (conn >= 0) close(conn);
        }
    }
}
