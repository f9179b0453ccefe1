#ifndef GEORELAY_CLINUX_SHIM_H
#define GEORELAY_CLINUX_SHIM_H
// Glibc's Swift module leaves these headers out; the relay's event loop and its health checks need them.
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

/// setns is declared only under _GNU_SOURCE: the tests' network namespaces (a thread joins one
/// to bind a fake server there).
extern int setns(int fd, int nstype);
static inline int georelay_join_network_namespace(int fd) { return setns(fd, 0x40000000 /* CLONE_NEWNET */); }

/// pthread_setname_np is declared only under _GNU_SOURCE: a thread's name, for `top -H` and
/// crash reports (Foundation's Thread did this; the relay does without Foundation).
#include <pthread.h>
extern int pthread_setname_np(pthread_t thread, const char *name);
static inline void georelay_name_this_thread(const char *name) { (void)pthread_setname_np(pthread_self(), name); }

// Uplinks: the kernel's announcements of links, addresses and routes coming and going.
#include <errno.h>
#include <string.h>
#include <linux/netlink.h>
#include <linux/rtnetlink.h>

/// A NETLINK_ROUTE socket subscribed to link, address and route changes (IPv4 and IPv6), or -1
/// with errno set. Its messages are only a wake-up: the reader drains them and asks the kernel
/// for the routes it cares about, so nothing of their content is parsed.
static inline int georelay_route_watch_socket(void) {
    int fd = socket(AF_NETLINK, SOCK_RAW | SOCK_CLOEXEC, NETLINK_ROUTE);
    if (fd < 0) return -1;
    struct sockaddr_nl address;
    memset(&address, 0, sizeof address);
    address.nl_family = AF_NETLINK;
    address.nl_groups = RTMGRP_LINK | RTMGRP_IPV4_IFADDR | RTMGRP_IPV4_ROUTE | RTMGRP_IPV6_IFADDR | RTMGRP_IPV6_ROUTE;
    if (bind(fd, (struct sockaddr *)&address, sizeof address) != 0) {
        int saved = errno;
        close(fd);
        errno = saved;
        return -1;
    }
    return fd;
}

/// accept4 is declared only under _GNU_SOURCE, which Swift's Glibc module does not set.
extern int accept4(int sockfd, struct sockaddr *addr, socklen_t *addrlen, int flags);
static inline int georelay_accept4(int fd, int flags) { return accept4(fd, (struct sockaddr *)0, (socklen_t *)0, flags); }

// Device health: the kernel's clock discipline state and the spool filesystem's free space.
#include <errno.h>
#include <string.h>
#include <sys/statvfs.h>
#include <sys/vfs.h>
#include <sys/timex.h>

/// What adjtimex(2) says about the system clock, read without changing anything (modes 0,
/// which any user may do). `state` is adjtimex's return value (TIME_OK ... TIME_ERROR, or -1
/// with `error` set); `unsynchronised` is STA_UNSYNC, which the kernel sets until an NTP
/// daemon (or chrony, or systemd-timesyncd) has disciplined the clock and clears again
/// when nothing has for a while; `maxerror_us` is the kernel's bound on the clock's error.
struct georelay_clock_state {
    int state;
    int error;
    int unsynchronised;
    long maxerror_us;
    long esterror_us;
};
static inline struct georelay_clock_state georelay_read_clock(void) {
    struct timex tx;
    memset(&tx, 0, sizeof tx);
    struct georelay_clock_state out;
    memset(&out, 0, sizeof out);
    out.state = adjtimex(&tx);
    if (out.state < 0) {
        out.error = errno;
        return out;
    }
    out.unsynchronised = (tx.status & STA_UNSYNC) != 0;
    out.maxerror_us = tx.maxerror;
    out.esterror_us = tx.esterror;
    return out;
}

/// Free bytes an unprivileged process may still use (f_bavail) and the filesystem's size,
/// for the directory at `path`; -1 with errno set when statvfs(3) fails.
static inline int georelay_filesystem_space(const char *path, unsigned long long *available, unsigned long long *total) {
    struct statvfs vfs;
    if (statvfs(path, &vfs) != 0) return -1;
    *available = (unsigned long long)vfs.f_bavail * vfs.f_frsize;
    *total = (unsigned long long)vfs.f_blocks * vfs.f_frsize;
    return 0;
}

// The tests' satellite wire: a TUN device in each of two network namespaces, a process between.
#include <fcntl.h>
#include <sys/ioctl.h>

/// A TUN device named `name` (IP packets, no packet information) in the calling thread's network
/// namespace, or -1 with errno set. `struct ifreq` is spelled out: <linux/if.h> and <net/if.h>
/// clash in one module.
static inline int georelay_open_tun(const char *name) {
    int fd = open("/dev/net/tun", O_RDWR | O_CLOEXEC);
    if (fd < 0) return -1;
    struct { char name[16]; short flags; char pad[22]; } request;
    memset(&request, 0, sizeof request);
    strncpy(request.name, name, sizeof request.name - 1);
    request.flags = 0x0001 /* IFF_TUN */ | 0x1000 /* IFF_NO_PI */;
    if (ioctl(fd, 0x400454ca /* TUNSETIFF */, &request) != 0) {
        int saved = errno;
        close(fd);
        errno = saved;
        return -1;
    }
    return fd;
}

/// posix_openpt and its companions are declared only under _XOPEN_SOURCE: the tests' fake Iridium
/// modem answers on a pseudo-terminal's master, the relay opening its slave as it would a modem.
extern int posix_openpt(int flags);
extern int grantpt(int fd);
extern int unlockpt(int fd);
extern int ptsname_r(int fd, char *buf, size_t buflen);

#endif
