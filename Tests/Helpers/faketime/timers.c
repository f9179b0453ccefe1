/*
 * Preloaded ahead of libfaketime (LD_PRELOAD="timers.so libfaketime.so.1") so that the Swift
 * runtime's timers follow the faked clocks the test steps (Sources/GeoRelayTestKit/FakeTime.swift).
 *
 * libdispatch, which runs every Task.sleep on Linux, arms timerfds on CLOCK_MONOTONIC and
 * CLOCK_BOOTTIME with absolute deadlines read from those clocks. libfaketime 0.9.10 fakes the
 * clocks but converts every absolute timer deadline as if it were CLOCK_REALTIME, so with the
 * monotonic clocks faked (or the wall clock offset past the machine's uptime) a sleep lands
 * decades away or the kernel refuses it, and the process hangs in its first Task.sleep.
 *
 * Here an absolute deadline becomes what is left of it on the timer's own (faked) clock, armed
 * as a relative timer straight through the system call, and never longer than 50 ms: the
 * dispatch manager thread then wakes at least that often, reads the faked clock again and runs
 * what fell due. So a sleep armed before the test steps the clock forward ends within 50 ms of
 * the step, as a sleep ends at once when a suspended machine wakes past its deadline. Between
 * steps the faked clocks run at the real rate (no `x` speed-up: that divides every poll and
 * epoll timeout libfaketime sees, so below 1 s at x1000 they become busy loops, and it scales
 * the relay's real network round trips up into timeouts); nothing here scales.
 */
#define _GNU_SOURCE
#include <stdint.h>
#include <sys/syscall.h>
#include <sys/timerfd.h>
#include <time.h>
#include <unistd.h>

#define TRACKED 65536
#define LONGEST_NS 50000000LL

/* Each timerfd's clock, plus one (0: not created through here; taken as CLOCK_MONOTONIC). */
static int clocks[TRACKED];

int timerfd_create(int clockid, int flags) {
    int fd = (int)syscall(SYS_timerfd_create, clockid, flags);
    if (fd >= 0 && fd < TRACKED) __atomic_store_n(&clocks[fd], clockid + 1, __ATOMIC_RELAXED);
    return fd;
}

static int64_t nanoseconds(struct timespec t) { return (int64_t)t.tv_sec * 1000000000LL + t.tv_nsec; }

int timerfd_settime(int fd, int flags, const struct itimerspec *value, struct itimerspec *old) {
    if (value == NULL || (value->it_value.tv_sec == 0 && value->it_value.tv_nsec == 0)) {
        return (int)syscall(SYS_timerfd_settime, fd, flags, value, old); /* disarming */
    }
    struct itimerspec relative = *value;
    int64_t left = nanoseconds(value->it_value);
    if (flags & TFD_TIMER_ABSTIME) {
        int known = fd >= 0 && fd < TRACKED ? __atomic_load_n(&clocks[fd], __ATOMIC_RELAXED) : 0;
        struct timespec now;
        clock_gettime(known ? known - 1 : CLOCK_MONOTONIC, &now); /* libfaketime's: the faked time */
        left -= nanoseconds(now);
    }
    if (left < 1) left = 1;
    if (left > LONGEST_NS) left = LONGEST_NS;
    relative.it_value.tv_sec = (time_t)(left / 1000000000LL);
    relative.it_value.tv_nsec = (long)(left % 1000000000LL);
    flags &= ~(TFD_TIMER_ABSTIME | TFD_TIMER_CANCEL_ON_SET);
    return (int)syscall(SYS_timerfd_settime, fd, flags, &relative, old);
}
