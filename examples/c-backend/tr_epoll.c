/*
 * tr_epoll.c -- a tailreactor backend in C over Linux epoll, libc only.
 *
 * Implements the ABI of conformance/include/tailreactor_backend.h and is
 * checked with
 *
 *     make -C examples/c-backend
 *     tailreactor-conformance --backend cabi:examples/c-backend/libtr_epoll.so
 *
 * The model
 * ---------
 * One epoll registration per fd carries both directions, with EPOLLONESHOT:
 * the kernel reports the fd once and then disables it until the next
 * EPOLL_CTL_MOD.  That is the one-shot contract (B1) with no bookkeeping in
 * the kernel's way: arming is one epoll_ctl, and epoll_ctl re-checks the
 * readiness the fd has now, so readiness present at arm time is reported (B2).
 * Because ONESHOT disables the whole fd, a report for one direction
 * re-enables the other direction if it is still armed (B1, both directions
 * independent).  The reference's Python epoll backend keeps level-triggered
 * registrations instead, to save the epoll_ctl of a keep-alive re-arm; this
 * file chooses the simpler model, the one CWIST uses.
 *
 * Per fd the backend keeps, in a table indexed by fd number, the two armed
 * tokens and whether the kernel holds a registration.  disarm drops a token;
 * with nothing left armed it removes the registration (EPOLL_CTL_DEL), so a
 * closed-then-reused fd number starts clean (B3, B5).  An fd closed without
 * disarm loses its registration in the kernel silently; arming its reused
 * number finds ENOENT and registers afresh, for the new arming alone: the
 * armings made for the closed file are dropped with it (the header's rule),
 * never reported for the file that took the number (B5).  epoll drops a
 * registration only with the file's last descriptor: a file closed without
 * disarm while a dup (or a forked child) keeps it open stays registered under
 * its old number, and no epoll_ctl can reach it any more.  So each
 * registration carries a generation beside the fd number in epoll_data,
 * bumped at every EPOLL_CTL_ADD, and a report of an older generation is the
 * closed file's: dropped, never given to the token armed for the new one.
 * ONESHOT fires such a registration once at most.
 *
 * wake() writes an eventfd that is registered level-triggered, so a wake made
 * while nobody waits is seen by the next wait (B7).  Any thread may call it,
 * also while close() runs: close waits until no wake is inside before it
 * closes the eventfd, so a wake never writes to a reused fd number.
 *
 * Broken variants (for tests/test_conformance_cabi_*.py; each breaks one rule):
 *   -DTR_BUG_NO_ONESHOT        a reported token stays armed          (B1)
 *   -DTR_BUG_IGNORE_DISARM     disarm changes nothing                (B3)
 *   -DTR_BUG_DROP_HUP          HUP/ERR alone satisfy no direction    (B6)
 *   -DTR_BUG_NO_WAKE           wake does nothing                     (B7)
 *   -DTR_BUG_NO_LIMIT_IS_POLL  a wait with no limit polls            (B7)
 *   -DTR_BUG_NO_LIMIT_RETURNS_ZERO  a wait with no limit blocks in slices of 100 ms
 *                              and returns 0 at the end of each, unwoken (B7)
 *   -DTR_BUG_SPIN_EINTR        a wait with no limit and nothing armed polls and returns
 *                              -EINTR, as a libev backend whose ev_async is unref'd (its
 *                              loop blocks only for a watcher of an fd): an idle
 *                              wait(None) spins until the wake (B7)
 *   -DTR_BUG_KEEP_WATCHING     disarm and a report leave the fd watched, level-triggered,
 *                              its reports ignored (a libev watcher left started): a
 *                              wait beside a ready fd nobody wants returns -EINTR over
 *                              and over until its timeout (B8)
 *   -DTR_BUG_SPIN_INSIDE_WAIT  a wait with no limit after a finite one polls (epoll_wait
 *                              with timeout 0) over and over, once that finite wait's
 *                              deadline has passed, until a wake or a report, in slices of
 *                              100 ms that end with -EINTR: a GLib backend whose ready time
 *                              is never set back, its wait re-running the loop itself: one
 *                              call a slice, never early, a core busy (B7)
 *   -DTR_BUG_TRUNCATE_TIMEOUT  timeout rounded down to milliseconds  (B8)
 *   -DTR_BUG_TRUNCATE_TIMEOUT_US  timeout rounded down to microseconds (a struct
 *                              timeval), then up to milliseconds: under 1 us polls (B8)
 *   -DTR_BUG_STALE_TIMER_RERUN  the timer set from a clock cached at the last loop run, the
 *                              wait's own deadline kept: after an idle gap the loop is re-run
 *                              with the timer due, never early, a core busy until the deadline (B8)
 *   -DTR_BUG_TIMEOUT_WRAPS     the rounding up of the largest timeouts wraps negative, taken
 *                              as past: a wait of INT64_MAX ns polls, as libevent's timeval
 *                              of (ns + 999) / 1000 fires at once (B8)
 *   -DTR_BUG_REUSE_KEEPS_OLD_ARMING  an arm of a number closed without disarm and
 *                              reused registers the closed file's armings too (B5)
 *   -DTR_BUG_KEEP_REFUSED_ARM  an arm that fails (EBADF) keeps its token: a closed
 *                              file alive in a dup reports it at its hang-up (B16)
 *   -DTR_BUG_EEXIST_FAILS      EEXIST from EPOLL_CTL_ADD fails the arm: a closed file
 *                              dup2'd back to its number cannot be armed (B5)
 *   -DTR_BUG_NO_GENERATION     a report's generation is not checked: a closed file kept
 *                              open by a dup reports to its number's new arming (B5)
 *   -DTR_BUG_SIGCHLD_HANDLER   create installs a SIGCHLD handler, as libev's
 *                              ev_default_loop does (B7)
 *   -DTR_BUG_ONE_EPOLL_PER_PROCESS  every backend shares one epoll set, as backends on a
 *                              library's default loop do: one backend's wait takes the
 *                              reports of an fd armed on two (B1)
 *   -DTR_BUG_ONE_LOOP_OWNER    one wait at a time in the process: a lock the process shares
 *                              is held through every epoll_wait, as backends on GLib's
 *                              default GMainContext wait for its ownership: a wait with a
 *                              ready fd blocks while another backend's wait(None) runs (B1)
 *   -DTR_BUG_EINTR_RESTARTS_COARSE  a finite wait retries a signal's EINTR itself,
 *                              its deadline kept on the kernel's coarse clock, as
 *                              libevent's loop does: up to a tick early (B8)
 *   -DTR_BUG_RETRY_EINTR       a signal's EINTR is retried inside the wait, as libevent's
 *                              loop and libuv's uv_run do: the caller's signal handlers
 *                              never run while it waits with no limit (B7)
 *   -DTR_BUG_LEAK_FD           close leaves the eventfd open         (B14)
 *   -DTR_BUG_KEEP_COLLECTED    a wait collects more than its capacity; disarm
 *                              leaves the rest                       (B3)
 *   -DTR_BUG_REARM_KEEPS_COLLECTED  the same collecting wait; disarm drops what
 *                              it holds, a re-arm keeps the replaced token's (B1)
 *   -DTR_BUG_REARM_HANDS_OVER  the same collecting wait; a re-arm of a direction whose
 *                              report it holds gives that report to the new token, as
 *                              a backend that swaps the token of a caught event does (B15)
 *   -DTR_BUG_RDHUP_AS_HUP      the peer's shutdown of its writing side (EPOLLRDHUP)
 *                              taken as a hang-up, as a libuv backend that maps
 *                              UV_DISCONNECT to TR_HUP: WRITE reported with no room (B15)
 *   -DTR_BUG_FLUSH_EATS_WAKE   flush consumes a pending wake, as a flush that
 *                              runs the library's loop can       (B7)
 *   -DTR_BUG_LOWEST_FDS_FIRST  a wait takes every ready fd and returns the
 *                              lowest numbers first, up to its capacity (B10)
 *   -DTR_BUG_OMIT_FLUSH        tr_backend_flush is not exported      (refused at load)
 *   -DTR_BUG_ABI_VERSION=N     reports ABI version N                 (refused at load)
 * and, refused by the suite's adapter with an error naming the value:
 *   -DTR_BUG_WAIT_PAUSES       wait never returns (the adapter's watchdog ends the run)
 *   -DTR_BUG_CLOSE_PAUSES      close after an arm never returns, as a library looping in
 *                              lists it corrupted (the watchdog bounds every call)
 *   -DTR_BUG_WAIT_SPINS        wait(0) never returns: it polls the kernel forever, as a
 *                              library loop re-armed inside its own callback does (the
 *                              watchdog ends it, also under pytest-xdist)
 *   -DTR_BUG_OVER_CAPACITY     wait returns more reports than its capacity
 *   -DTR_BUG_UNKNOWN_TOKEN     wait reports a token never given by arm
 *   -DTR_BUG_ZERO_REVENTS      a report with revents 0
 *   -DTR_BUG_RESERVED          a report with reserved != 0
 *   -DTR_BUG_ODD_REVENTS       a report with a revents bit outside TR_*
 *   -DTR_BUG_NVAL_REVENTS      a report with POLLNVAL in revents, as a backend over a library
 *                              that polls by number (GLib, poll(2)) passing its NVAL through
 *   -DTR_BUG_INT_MIN           arm returns INT_MIN, not a negative errno
 *   -DTR_BUG_CREATE_POSITIVE   create returns 7
 *   -DTR_BUG_FLUSH_COUNT       flush claims 1000 submissions
 *
 * Sources: epoll_ctl(2), epoll_wait(2), epoll(7), eventfd(2).
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#ifdef TR_BUG_ONE_LOOP_OWNER
#include <pthread.h>
#endif
#include <sched.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#if defined(TR_BUG_EINTR_RESTARTS_COARSE) || defined(TR_BUG_SPIN_INSIDE_WAIT) || defined(TR_BUG_STALE_TIMER_RERUN)
#include <time.h>
#endif
#include <unistd.h>

#include "tailreactor_backend.h"

/* Most reports one wait returns (CWIST's epoll_wait uses 1024 events). */
#define MAX_BATCH 1024

/* Kernel interest and the revents that satisfy each direction, by index
 * direction - 1.  HUP and ERR satisfy both: epoll reports them unasked, and a
 * peer's close must reach whichever token is armed (B6). */
static const uint32_t INTEREST[2] = {EPOLLIN | EPOLLRDHUP, EPOLLOUT};
#ifdef TR_BUG_DROP_HUP
static const uint32_t SATISFIES[2] = {TR_IN | TR_RDHUP, TR_OUT};
#else
static const uint32_t SATISFIES[2] = {TR_SATISFIES_READ, TR_SATISFIES_WRITE};
#endif

struct fd_rec {
    uint64_t token[2];  /* the armed token per direction */
    uint8_t armed[2];   /* 1 while that token waits to be reported */
    uint8_t registered; /* the kernel holds a registration for this fd number */
    uint32_t gen;       /* the generation of that registration (its epoll_data) */
#ifdef TR_BUG_KEEP_WATCHING
    uint32_t watched; /* the bug: every interest ever armed on the registration */
#endif
};

/* epoll_data of a registration: the fd number, and its generation above it. */
static uint64_t data_of(int fd, uint32_t gen) {
    return (uint64_t)gen << 32 | (uint32_t)fd;
}

struct tr_backend {
    int epfd;
    int wake_fd;           /* eventfd, level-triggered in epfd */
    atomic_int closed;     /* set once by close */
    atomic_int waking;     /* threads inside tr_backend_wake now */
    struct fd_rec *fds;    /* indexed by fd number, grown on demand */
    size_t nfds;
    struct epoll_event kernel[MAX_BATCH];
#if defined(TR_BUG_REARM_KEEPS_COLLECTED) || defined(TR_BUG_REARM_HANDS_OVER)
#define TR_DISARM_DROPS_HELD 1
#endif
#if defined(TR_BUG_KEEP_COLLECTED) || defined(TR_DISARM_DROPS_HELD)
#define TR_COLLECTS 1
    tr_event held[MAX_BATCH]; /* collected by a wait, not handed out yet */
    uint32_t nheld;
#endif
#ifdef TR_BUG_SPIN_INSIDE_WAIT
    int64_t due_ns; /* the last finite wait's deadline, never cleared (0: none yet) */
#endif
#ifdef TR_BUG_STALE_TIMER_RERUN
    int64_t cached_ns; /* the library's cached clock: the end of the last loop run (0: none yet) */
#endif
};

uint32_t tr_backend_abi_version(void) {
#ifdef TR_BUG_ABI_VERSION
    return TR_BUG_ABI_VERSION;
#else
    return TR_BACKEND_ABI_VERSION;
#endif
}

#ifdef TR_BUG_SIGCHLD_HANDLER
static void on_sigchld(int signo) {
    (void)signo;
}
#endif

#ifdef TR_BUG_ONE_EPOLL_PER_PROCESS
/* The bug: one epoll set for the process, made by the first create, closed by the last close. */
static int shared_epfd = -1, shared_users;
static int epoll_of_process(void) {
    if (shared_epfd < 0)
        shared_epfd = epoll_create1(EPOLL_CLOEXEC);
    if (shared_epfd >= 0)
        shared_users++;
    return shared_epfd;
}
#endif

int tr_backend_create(tr_backend **out) {
#ifdef TR_BUG_CREATE_POSITIVE
    (void)out;
    return 7;
#endif
    tr_backend *b = calloc(1, sizeof *b);
    if (!b)
        return -ENOMEM;
#ifdef TR_BUG_ONE_EPOLL_PER_PROCESS
    b->epfd = epoll_of_process();
#else
    b->epfd = epoll_create1(EPOLL_CLOEXEC);
#endif
    if (b->epfd < 0)
        goto fail;
    b->wake_fd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
    if (b->wake_fd < 0)
        goto fail_ep;
    struct epoll_event ev = {.events = EPOLLIN, .data.u64 = data_of(b->wake_fd, 0)};
    if (epoll_ctl(b->epfd, EPOLL_CTL_ADD, b->wake_fd, &ev) < 0)
        goto fail_wake;
#ifdef TR_BUG_SIGCHLD_HANDLER
    /* The bug: a handler of the backend's own, as libev's ev_default_loop installs. */
    struct sigaction sa = {.sa_handler = on_sigchld};
    sigemptyset(&sa.sa_mask);
    sigaction(SIGCHLD, &sa, NULL);
#endif
    *out = b;
    return 0;
fail_wake:;
    int err = errno;
    close(b->wake_fd);
    errno = err;
fail_ep:
    err = errno;
    close(b->epfd);
    errno = err;
fail:
    err = errno;
    free(b);
    return -err;
}

int tr_backend_capabilities(tr_backend *b, tr_capabilities *out) {
    (void)b;
    out->flags = TR_CAP_ORDERED; /* epoll's ready list is in the order readiness arose */
    out->max_batch = MAX_BATCH;
    return 0;
}

/* The record of fd, growing the table to hold it; NULL when out of memory. */
static struct fd_rec *record(tr_backend *b, int fd) {
    if ((size_t)fd >= b->nfds) {
        size_t n = b->nfds ? b->nfds : 64;
        while (n <= (size_t)fd)
            n *= 2;
        struct fd_rec *grown = realloc(b->fds, n * sizeof *grown);
        if (!grown)
            return NULL;
        memset(grown + b->nfds, 0, (n - b->nfds) * sizeof *grown);
        b->fds = grown;
        b->nfds = n;
    }
    return &b->fds[fd];
}

/* Make the kernel watch exactly the armed directions of fd, one-shot.  With
 * nothing armed the registration is left as it is (ONESHOT disabled it).
 * `fresh` is the direction index armed by this call (-1: none, a narrowing or
 * a re-enable): the one arming that is for the file the number names now. */
static int apply(tr_backend *b, int fd, struct fd_rec *r, int fresh) {
    uint32_t want = (r->armed[0] ? INTEREST[0] : 0) | (r->armed[1] ? INTEREST[1] : 0);
    if (!want)
        return 0;
#ifdef TR_BUG_KEEP_WATCHING
    want = r->watched |= want; /* the bug: never narrowed, */
#endif
    struct epoll_event ev = {.events = want | EPOLLONESHOT, .data.u64 = data_of(fd, r->gen)};
#ifdef TR_BUG_KEEP_WATCHING
    ev.events = want; /* and level-triggered: a report is filtered by state alone */
#endif
    if (r->registered) {
        if (epoll_ctl(b->epfd, EPOLL_CTL_MOD, fd, &ev) == 0)
            return 0;
        if (errno != ENOENT)
            return -errno;
        /* Closed without disarm and the number reused: the kernel dropped the
         * registration with the old file, and the armings made for that file
         * go with it (reporting them would report the new file's readiness
         * under tokens armed for the old one, B5).  Register the new file for
         * the arming of this call alone. */
        r->registered = 0;
#ifndef TR_BUG_REUSE_KEEPS_OLD_ARMING
        for (int d = 0; d < 2; d++)
            if (d != fresh)
                r->armed[d] = 0;
        want = fresh < 0 ? 0 : INTEREST[fresh];
        if (!want)
            return 0;
        ev.events = want | EPOLLONESHOT;
#ifdef TR_BUG_KEEP_WATCHING
        ev.events = r->watched = want;
#endif
#else
        (void)fresh;
#endif
    }
    /* A new registration, a new generation: one the backend gave up on (its
     * file closed without disarm, maybe alive in a dup) reports an older one. */
    ev.data.u64 = data_of(fd, ++r->gen);
#ifdef TR_BUG_EEXIST_FAILS
    if (epoll_ctl(b->epfd, EPOLL_CTL_ADD, fd, &ev) == 0) {
#else
    /* EEXIST: the kernel still holds this file's registration under the number
     * (closed without disarm while a dup kept it, given its number back). */
    if (epoll_ctl(b->epfd, EPOLL_CTL_ADD, fd, &ev) == 0 ||
        (errno == EEXIST && epoll_ctl(b->epfd, EPOLL_CTL_MOD, fd, &ev) == 0)) {
#endif
        r->registered = 1;
        return 0;
    }
    return -errno;
}

int tr_backend_arm(tr_backend *b, int fd, int direction, uint64_t token) {
#ifdef TR_BUG_INT_MIN
    return INT_MIN;
#endif
    if (atomic_load(&b->closed))
        return -ESHUTDOWN;
    if (direction != TR_READ && direction != TR_WRITE)
        return -EINVAL;
    if (fd < 0)
        return -EBADF;
    /* Grow the table only for an open fd (its number is below RLIMIT_NOFILE),
     * never for an arbitrary number that is not (B16). */
    if ((size_t)fd >= b->nfds && fcntl(fd, F_GETFD) < 0)
        return -errno;
    struct fd_rec *r = record(b, fd);
    if (!r)
        return -ENOMEM;
    int d = direction - 1;
#ifdef TR_BUG_REARM_HANDS_OVER
    /* The bug: the kernel reported this direction and the report waits in b->held;
     * the re-arm swaps the token in it, as if the caught event were still waiting. */
    if (!r->armed[d])
        for (uint32_t i = 0; i < b->nheld; i++)
            if (b->held[i].token == r->token[d]) {
                b->held[i].token = r->token[d] = token;
                return 0;
            }
#endif
    struct fd_rec old = *r;
    r->token[d] = token; /* an armed direction is replaced (R18) */
    r->armed[d] = 1;
    int rc = apply(b, fd, r, d); /* a closed fd: epoll_ctl says EBADF (B16) */
#ifndef TR_BUG_KEEP_REFUSED_ARM
    if (rc < 0) {
        old.registered = r->registered;
        *r = old;
    }
#else
    (void)old; /* the bug: the refused arm's token stays */
#endif
    return rc;
}

#ifdef TR_DISARM_DROPS_HELD
/* Forget the collected report of `token` (the suite never reuses a token number). */
static void drop_held(tr_backend *b, uint64_t token) {
    uint32_t kept = 0;
    for (uint32_t i = 0; i < b->nheld; i++)
        if (b->held[i].token != token)
            b->held[kept++] = b->held[i];
    b->nheld = kept;
}
#endif

int tr_backend_disarm(tr_backend *b, int fd, int direction) {
    if (atomic_load(&b->closed))
        return -ESHUTDOWN;
    if (direction != TR_READ && direction != TR_WRITE)
        return -EINVAL;
#ifdef TR_BUG_IGNORE_DISARM
    return 0;
#endif
    if (fd < 0 || (size_t)fd >= b->nfds)
        return 0;
    struct fd_rec *r = &b->fds[fd];
#ifdef TR_DISARM_DROPS_HELD
    drop_held(b, r->token[direction - 1]); /* disarm drops what a wait collected; arm does not */
#endif
    r->armed[direction - 1] = 0;
#ifdef TR_BUG_KEEP_WATCHING
    return 0; /* the bug: the kernel goes on watching it */
#endif
    if (r->armed[0] || r->armed[1]) {
        /* Narrow the registration to the direction still armed.  A failure
         * is harmless: wait reports only tokens that are armed. */
        (void)apply(b, fd, r, -1);
        return 0;
    }
    if (r->registered) {
        /* Also when the token was reported already: disarm is the owner's
         * "done with this fd" before a close.  ENOENT/EBADF: already gone. */
        epoll_ctl(b->epfd, EPOLL_CTL_DEL, fd, NULL);
        r->registered = 0;
    }
    return 0;
}

/* timeout_ns as epoll_wait's milliseconds: rounded up, so a wait never ends
 * before its timeout with nothing ready (B8). */
static int timeout_ms(int64_t timeout_ns) {
    if (timeout_ns < 0)
#ifdef TR_BUG_NO_LIMIT_IS_POLL
        return 0;
#elif defined(TR_BUG_NO_LIMIT_RETURNS_ZERO)
        return 100; /* the bug: a slice, and 0 returned at its end */
#else
        return -1;
#endif
#ifndef TR_BUG_TIMEOUT_WRAPS
    if (timeout_ns >= (int64_t)INT_MAX * 1000000)
        return INT_MAX;
#endif
#ifdef TR_BUG_TIMEOUT_WRAPS
    int64_t ms = (int64_t)((uint64_t)timeout_ns + 999999) / 1000000; /* the bug: wraps past INT64_MAX - 999999 */
    return ms < 0 ? 0 : (int)(ms < INT_MAX ? ms : INT_MAX); /* ... and that negative taken as past: a poll */
#elif defined(TR_BUG_TRUNCATE_TIMEOUT)
    return (int)(timeout_ns / 1000000);
#elif defined(TR_BUG_TRUNCATE_TIMEOUT_US)
    int64_t us = timeout_ns / 1000; /* struct timeval, rounded down */
    return (int)((us + 999) / 1000);
#else
    return (int)((timeout_ns + 999999) / 1000000);
#endif
}

#ifdef TR_COLLECTS
static int tr_backend_wait_collect(tr_backend *b, int64_t timeout_ns, tr_event *events, uint32_t capacity);
/* The bug: like a backend on an event library, a wait collects every report
 * the kernel has (up to MAX_BATCH) and hands out `capacity` of them; the rest
 * wait in b->held for the next call, and disarm does not drop them (B3). */
#endif

#ifdef TR_BUG_SPIN_EINTR
static int any_armed(const tr_backend *b) {
    for (size_t fd = 0; fd < b->nfds; fd++)
        if (b->fds[fd].armed[0] || b->fds[fd].armed[1])
            return 1;
    return 0;
}
#endif

#ifdef TR_BUG_LOWEST_FDS_FIRST
static int by_fd(const void *x, const void *y) {
    uint32_t a = (uint32_t)((const struct epoll_event *)x)->data.u64;
    uint32_t c = (uint32_t)((const struct epoll_event *)y)->data.u64;
    return (a > c) - (a < c);
}
#endif

int tr_backend_wait(tr_backend *b, int64_t timeout_ns, tr_event *events, uint32_t capacity) {
    if (atomic_load(&b->closed))
        return -ESHUTDOWN;
    if (!events || capacity == 0)
        return -EINVAL;
#ifdef TR_COLLECTS
    if (b->nheld == 0) {
        int got = tr_backend_wait_collect(b, timeout_ns, b->held, MAX_BATCH);
        if (got < 0)
            return got;
        b->nheld = (uint32_t)got;
    }
    uint32_t give = b->nheld < capacity ? b->nheld : capacity;
    memcpy(events, b->held, give * sizeof *events);
    memmove(b->held, b->held + give, (b->nheld - give) * sizeof *b->held);
    b->nheld -= give;
    return (int)give;
}

static int tr_backend_wait_collect(tr_backend *b, int64_t timeout_ns, tr_event *events, uint32_t capacity) {
#endif
#ifdef TR_BUG_WAIT_PAUSES
    for (;;)
        pause();
#endif
#ifdef TR_BUG_WAIT_SPINS
    if (timeout_ns == 0)
        for (;;)
            (void)epoll_wait(b->epfd, b->kernel, 1, 0);
#endif
    uint32_t limit = capacity < MAX_BATCH ? capacity : MAX_BATCH;
#ifdef TR_BUG_LOWEST_FDS_FIRST
    /* The bug: take every ready fd and serve the lowest numbers first.  The ones
     * left over stay armed and ready, and lose to the low ones again next time. */
    int k = epoll_wait(b->epfd, b->kernel, MAX_BATCH, timeout_ms(timeout_ns));
    if (k > 0)
        qsort(b->kernel, (size_t)k, sizeof *b->kernel, by_fd);
#elif defined(TR_BUG_ONE_LOOP_OWNER)
    /* The bug: the loop is the process's, run by one waiting thread at a time. */
    static pthread_mutex_t owner = PTHREAD_MUTEX_INITIALIZER;
    pthread_mutex_lock(&owner);
    int k = epoll_wait(b->epfd, b->kernel, (int)limit, timeout_ms(timeout_ns));
    int err = errno;
    pthread_mutex_unlock(&owner);
    errno = err;
#elif defined(TR_BUG_SPIN_EINTR)
    /* The bug: with no limit and no fd armed, the loop has no watcher that keeps it
     * blocking (the wake's is unref'd), so it polls. */
    int ms = timeout_ns < 0 && !any_armed(b) ? 0 : timeout_ms(timeout_ns);
    int k = epoll_wait(b->epfd, b->kernel, (int)limit, ms);
#elif defined(TR_BUG_SPIN_INSIDE_WAIT)
    /* The bug, a GLib backend whose deadline source's ready time is never set back to -1:
     * a finite wait sets it, and once passed it stays due.  A later wait with no limit sets
     * none, so each of its loop runs returns at once, and it re-runs the loop itself. */
    struct timespec c;
    clock_gettime(CLOCK_MONOTONIC, &c);
    int64_t start = (int64_t)c.tv_sec * 1000000000 + c.tv_nsec, now = start;
    int k;
    if (timeout_ns > 0)
        b->due_ns = start + timeout_ns;
    if (timeout_ns >= 0)
        k = epoll_wait(b->epfd, b->kernel, (int)limit, timeout_ms(timeout_ns));
    else
        for (;;) {
            int ms = b->due_ns == 0 ? -1 : now >= b->due_ns ? 0 : (int)((b->due_ns - now + 999999) / 1000000);
            if ((k = epoll_wait(b->epfd, b->kernel, (int)limit, ms)) != 0)
                break;
            clock_gettime(CLOCK_MONOTONIC, &c);
            now = (int64_t)c.tv_sec * 1000000000 + c.tv_nsec;
            if (now - start >= 100000000)
                return -EINTR; /* the end of a slice (say 100 ms): the caller calls again */
        }
#elif defined(TR_BUG_STALE_TIMER_RERUN)
    /* The bug, a library timer set from a clock cached at the last loop run (libev's ev_now,
     * libuv's loop time), the wait's own CLOCK_MONOTONIC deadline kept as the header wants:
     * after an idle gap the timer is due a gap early, and the loop, re-run with that timer
     * still due, returns at once again and again until the deadline: never early, a core busy. */
    struct timespec c;
    clock_gettime(CLOCK_MONOTONIC, &c);
    int64_t now = (int64_t)c.tv_sec * 1000000000 + c.tv_nsec;
    int64_t deadline = now + timeout_ns, due = (b->cached_ns ? b->cached_ns : now) + timeout_ns;
    int k;
    for (;;) {
        int ms = timeout_ns < 0 ? -1 : now >= due ? 0 : timeout_ms(due - now);
        k = epoll_wait(b->epfd, b->kernel, (int)limit, ms);
        clock_gettime(CLOCK_MONOTONIC, &c);
        now = (int64_t)c.tv_sec * 1000000000 + c.tv_nsec;
        if (k != 0 || timeout_ns <= 0 || now >= deadline)
            break;
    }
    b->cached_ns = now;
#elif defined(TR_BUG_RETRY_EINTR)
    int k; /* the bug: a signal's EINTR retried here (a wait with no limit: for good) */
    while ((k = epoll_wait(b->epfd, b->kernel, (int)limit, timeout_ms(timeout_ns))) < 0 && errno == EINTR)
        ;
#elif defined(TR_BUG_EINTR_RESTARTS_COARSE)
    /* The bug, libevent's loop without EVENT_BASE_FLAG_PRECISE_TIMER: a finite wait's deadline
     * is kept on CLOCK_MONOTONIC_COARSE (a tick of 1 to 10 ms), and a signal's EINTR or a
     * timeout runs the poll again until that clock reaches it.  A reading lags the time by up
     * to a tick; after a signal the time left is counted from a reading that may lag less than
     * the first, and the wait ends up to a tick early.  A wait with no limit returns EINTR. */
    struct timespec c;
    clock_gettime(CLOCK_MONOTONIC_COARSE, &c);
    int64_t deadline = (int64_t)c.tv_sec * 1000000000 + c.tv_nsec + timeout_ns;
    int k;
    while ((k = epoll_wait(b->epfd, b->kernel, (int)limit, timeout_ms(timeout_ns))) == 0 ||
           (k < 0 && errno == EINTR)) {
        if (timeout_ns <= 0)
            break; /* a poll, or EINTR with no limit */
        clock_gettime(CLOCK_MONOTONIC_COARSE, &c);
        timeout_ns = deadline - ((int64_t)c.tv_sec * 1000000000 + c.tv_nsec);
        if (timeout_ns <= 0) {
            k = 0;
            break;
        }
    }
#else
    int k = epoll_wait(b->epfd, b->kernel, (int)limit, timeout_ms(timeout_ns));
#endif
    if (k < 0)
        return -errno; /* EINTR: the caller runs its signal handlers, then retries with the time left */
#ifdef TR_BUG_SPIN_EINTR
    if (k == 0 && timeout_ns < 0)
        return -EINTR; /* the bug: a loop run that found nothing, taken as one cut short */
#endif
    uint32_t n = 0;
#ifdef TR_BUG_KEEP_WATCHING
    int woken = 0;
#endif
    for (int i = 0; i < k; i++) {
        int fd = (int)(uint32_t)b->kernel[i].data.u64;
        uint32_t gen = (uint32_t)(b->kernel[i].data.u64 >> 32);
        uint32_t revents = b->kernel[i].events;
#ifdef TR_BUG_RDHUP_AS_HUP
        if (revents & EPOLLRDHUP) /* the bug: HUP satisfies both directions */
            revents = (revents & ~(uint32_t)EPOLLRDHUP) | EPOLLHUP;
#endif
        if (fd == b->wake_fd) {
            uint64_t count;
            ssize_t got = read(fd, &count, sizeof count); /* EAGAIN: another wait took it */
            (void)got;
#ifdef TR_BUG_KEEP_WATCHING
            woken = 1;
#endif
            continue;
        }
        if ((size_t)fd >= b->nfds)
            continue;
        struct fd_rec *r = &b->fds[fd];
#ifndef TR_BUG_NO_GENERATION
        if (gen != r->gen)
            continue; /* a closed file's registration, alive in a dup: not this file's (B5) */
#else
        (void)gen;
#endif
        for (int d = 0; d < 2; d++) {
            /* A full array leaves the token armed: apply() below re-enables
             * it and the next wait reports it (B10). */
            if (r->armed[d] && (revents & SATISFIES[d]) && n < limit) {
                events[n].token = r->token[d];
                events[n].revents = revents;
                events[n].reserved = 0;
#ifdef TR_BUG_UNKNOWN_TOKEN
                events[n].token += (uint64_t)1 << 40;
#endif
#ifdef TR_BUG_ZERO_REVENTS
                events[n].revents = 0;
#endif
#ifdef TR_BUG_RESERVED
                events[n].reserved = 7;
#endif
#ifdef TR_BUG_ODD_REVENTS
                events[n].revents |= 0x40000000u;
#endif
#ifdef TR_BUG_NVAL_REVENTS
                events[n].revents |= 0x20u; /* POLLNVAL */
#endif
                n++;
#ifndef TR_BUG_NO_ONESHOT
                r->armed[d] = 0;
#endif
            }
        }
        apply(b, fd, r, -1); /* ONESHOT disabled the whole fd: re-enable what is still armed */
    }
#ifdef TR_BUG_OVER_CAPACITY
    if (n)
        return (int)capacity + 1;
#endif
#ifdef TR_BUG_KEEP_WATCHING
    if (k > 0 && n == 0 && !woken && timeout_ns != 0)
        return -EINTR; /* the header's loop run that returned with nothing: but at every run */
#endif
    return (int)n;
}

#ifndef TR_BUG_OMIT_FLUSH
int tr_backend_flush(tr_backend *b) {
    if (atomic_load(&b->closed))
        return -ESHUTDOWN;
#ifdef TR_BUG_FLUSH_COUNT
    return 1000;
#endif
#ifdef TR_BUG_FLUSH_EATS_WAKE
    uint64_t count; /* the bug: the loop run a flush makes takes the wake, and nothing keeps it */
    ssize_t got = read(b->wake_fd, &count, sizeof count);
    (void)got;
#endif
    return 0; /* arming is synchronous: nothing is ever queued */
}
#endif

int tr_backend_wake(tr_backend *b) {
#ifndef TR_BUG_NO_WAKE
    atomic_fetch_add(&b->waking, 1);
    if (!atomic_load(&b->closed)) {
        uint64_t one = 1;
        ssize_t put = write(b->wake_fd, &one, sizeof one); /* EAGAIN: a wake is pending anyway */
        (void)put;
    }
    atomic_fetch_sub(&b->waking, 1);
#else
    (void)b;
#endif
    return 0;
}

int tr_backend_close(tr_backend *b) {
#ifdef TR_BUG_CLOSE_PAUSES
    if (b->nfds) /* an fd was armed: the backend was used */
        for (;;)
            pause();
#endif
    if (atomic_exchange(&b->closed, 1))
        return 0;
#ifdef TR_BUG_ONE_EPOLL_PER_PROCESS
    epoll_ctl(b->epfd, EPOLL_CTL_DEL, b->wake_fd, NULL);
    if (--shared_users == 0) {
        close(b->epfd);
        shared_epfd = -1;
    }
#else
    close(b->epfd);
#endif
    /* A wake that saw closed == 0 may be writing the eventfd: let it finish
     * before the number can be reused.  Seq-cst atomics: a wake that starts
     * later sees closed == 1 and writes nothing. */
    while (atomic_load(&b->waking))
        sched_yield();
#ifndef TR_BUG_LEAK_FD
    close(b->wake_fd);
#endif
    free(b->fds);
    b->fds = NULL;
    b->nfds = 0;
    return 0;
}

void tr_backend_destroy(tr_backend *b) {
    if (!b)
        return;
    tr_backend_close(b);
    free(b);
}
