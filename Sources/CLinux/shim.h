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

// The uplink bill: what the kernel carried for one TCP socket, as a metered plan counts it.
#include <netinet/in.h>
#include <stddef.h>

/// The kernel's `struct tcp_info` (<linux/tcp.h>) up to `tcpi_bytes_retrans`, spelled out here:
/// including <linux/tcp.h> clashes with glibc's older copy of the struct in <netinet/tcp.h>,
/// which lacks the byte counters. The layout is the kernel's ABI, which only ever grows at the
/// end; `WireMeterTests` checks the counters against bytes it sent itself.
struct georelay_kernel_tcp_info {
    unsigned char state, ca_state, retransmits, probes, backoff, options, wscale, rate_flags;
    unsigned int rto, ato, snd_mss, rcv_mss;
    unsigned int unacked, sacked, lost, retrans, fackets;
    unsigned int last_data_sent, last_ack_sent, last_data_recv, last_ack_recv;
    unsigned int pmtu, rcv_ssthresh, rtt, rttvar, snd_ssthresh, snd_cwnd, advmss, reordering;
    unsigned int rcv_rtt, rcv_space;
    unsigned int total_retrans;
    unsigned long long pacing_rate, max_pacing_rate;
    unsigned long long bytes_acked, bytes_received;
    unsigned int segs_out, segs_in;
    unsigned int notsent_bytes, min_rtt, data_segs_in, data_segs_out;
    unsigned long long delivery_rate;
    unsigned long long busy_time, rwnd_limited, sndbuf_limited;
    unsigned int delivered, delivered_ce;
    unsigned long long bytes_sent, bytes_retrans;
};

/// One TCP socket's lifetime counters from TCP_INFO: payload bytes each way (sent counts
/// retransmissions, as the link carried them) and segments each way (each with its IP and TCP
/// headers). `ok` is 0 when the kernel cannot say (not a TCP socket, a kernel before 4.19).
struct georelay_tcp_counts {
    int ok;
    unsigned long long bytes_sent;
    unsigned long long bytes_received;
    unsigned long long segs_out;
    unsigned long long segs_in;
};
static inline struct georelay_tcp_counts georelay_read_tcp_counts(int fd) {
    struct georelay_tcp_counts out;
    memset(&out, 0, sizeof out);
    struct georelay_kernel_tcp_info info;
    memset(&info, 0, sizeof info);
    socklen_t length = sizeof info;
    if (getsockopt(fd, IPPROTO_TCP, 11 /* TCP_INFO */, &info, &length) != 0) return out;
    // Older kernels fill less of the struct: every field read must be inside what they wrote.
    if ((size_t)length < offsetof(struct georelay_kernel_tcp_info, bytes_retrans)) return out;
    out.ok = 1;
    out.bytes_sent = info.bytes_sent;
    out.bytes_received = info.bytes_received;
    out.segs_out = info.segs_out;
    out.segs_in = info.segs_in;
    return out;
}
#endif
