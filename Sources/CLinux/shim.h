#ifndef GEORELAY_CLINUX_SHIM_H
#define GEORELAY_CLINUX_SHIM_H
// Glibc's Swift module leaves these headers out; the relay's event loop needs them.
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <sys/un.h>

/// accept4 is declared only under _GNU_SOURCE, which Swift's Glibc module does not set.
extern int accept4(int sockfd, struct sockaddr *addr, socklen_t *addrlen, int flags);
static inline int georelay_accept4(int fd, int flags) { return accept4(fd, (struct sockaddr *)0, (socklen_t *)0, flags); }
#endif
