/*
 * tailreactor_backend.h -- the C ABI of a tailreactor backend (ABI version 1).
 *
 * A backend written in C, Rust, Go or anything else that can export C
 * functions from a shared library is checked with
 *
 *     tailreactor-conformance --backend cabi:path/to/libfoo.so
 *
 * The suite loads the library with ctypes, runs every backend clause on it,
 * and runs the reactor (R) and HTTP (H) clauses through the Python reference
 * reactor on top of it.  Receive arming (B17) and harvest (R23-R25) are not in
 * ABI version 1: the suite skips them.  See docs/en/conformance.md, "Checking
 * a backend written in C, Rust or Go" (the quick start), docs/en/conformance-c-abi.md
 * (every function's rule, a backend over an event library) and
 * examples/c-backend/tr_epoll.c.
 *
 * Building: a shared object exporting the ten functions below with C linkage
 * and default visibility; a missing one is refused at load (exit status 2).
 *
 *     cc -std=c11 -Wall -fPIC -shared -I "$(dirname "$(tailreactor-conformance --header)")" -o libfoo.so foo.c
 *
 * (add -pthread if wake takes a lock; over an event library, its library
 * after foo.c: -levent_core, and -levent_pthreads with evthread_use_pthreads,
 * -luv, -lev, or $(pkg-config --cflags --libs glib-2.0), which also gives
 * GLib's two -I paths).  Under -std=c11, #define _GNU_SOURCE before the first #include:
 * strict C11 declares no clock_gettime, pipe2 or accept4.  The header ships
 * with the Python package: `tailreactor-conformance --header` prints its path
 * (conformance/tailreactor_conformance/include/ in a checkout, a symbolic
 * link to conformance/include/: one file, this one).  A wheel holds the file
 * itself, byte for byte this one (tests/test_conformance_header.py checks).
 * PATH after cabi: is a file path, relative to the current directory; the
 * table names the backend cabi: and the file name without .so (cabi:libfoo).
 *
 * The contract is the one of reference/tailreactor/backends/base.py, stated
 * here in full for C; the clause each rule is checked by is named beside it.  In short: a backend
 * knows file descriptors, two directions and opaque 64-bit tokens.  It arms
 * one-shot readiness interest, reports what became ready, can be woken from
 * another thread, and can be closed.  Timers, posts, stamps and the dispatch
 * policy live in the reactor above it.
 *
 * Errors: every function that can fail returns an int, >= 0 on success and a
 * negative errno value on failure (-EBADF, -ENOMEM, ...: -4095..-1), as the
 * kernel and liburing do.  Nothing is reported through the global errno.  The
 * suite refuses any other negative value, and a positive one from create,
 * with an error that names it.  arm, disarm, wait and flush on a closed
 * backend return -ESHUTDOWN, before any other check.
 *
 * Threads: the calls on one backend never overlap, except tr_backend_wake,
 * which any thread may call at any time, also while another thread is inside
 * tr_backend_wait and while tr_backend_close runs, so wake must never touch
 * what close releases (an fd number, a library's loop: B13).  An atomic flag
 * that wake checks before it writes is not enough: close can run between the
 * check and the write.  Either hold one lock across wake's check and write
 * and across close's setting of the flag, or count the wakes in progress and
 * have close, once it set the flag, wait until none is left before it
 * releases anything (examples/c-backend/tr_epoll.c does that).  The
 * other calls need not come from the thread that created the backend (B7
 * creates and arms on one thread and waits on another): keep no per-thread
 * state.  A process creates many backends, one after another, and an earlier
 * handle (closed, not destroyed yet) may still exist when create is called
 * again; several may also be open at once (a reactor per thread), each
 * reporting only its own armings, also of an fd armed on both, and closing
 * one leaves the others working (B1).  Keep every piece of state in the
 * handle (libuv: a uv_loop_t of the backend's own, never uv_default_loop();
 * GLib: a GMainContext of its own, g_main_context_new, never the default
 * context, which g_unix_fd_add_full, g_timeout_add and g_idle_add attach
 * their sources to without saying so: g_source_attach(source, ctx) each).
 * Two backends' waits run at the same time on two threads: one waits with no
 * limit while the other reports its own ready fd (B1); on a loop the process
 * shares, one waiting thread owns it at a time, and the other's wait blocks.
 * Never hold a loop's ownership between calls (GLib: g_main_context_acquire,
 * in create or anywhere): g_main_context_iteration takes it and drops it
 * itself, and while one thread holds it, every wait made from another
 * thread blocks for good (B1, B7: FAIL (hung)).
 *
 * Memory: every pointer argument is the caller's and valid only during the
 * call; the library keeps none of them.  The handle is the library's.
 *
 * The fds it is given (a backend on an event library: libuv, libev, libevent):
 * - Kinds: the reactor and the suite arm non-blocking sockets, and pipes in
 *   B6; never regular files (poll reports them always ready, epoll refuses
 *   them).
 * - Flags: a backend may set O_NONBLOCK on an fd it arms (libuv's
 *   uv_poll_init does); it must not clear it, and must change no other flag
 *   of the fd or its open file (FD_CLOEXEC, O_APPEND, O_ASYNC, the owner).
 * - An armed fd closed without disarm: the caller's bug, but the backend must
 *   survive it -- the suite closes each test's sockets before the backend, so
 *   armed fds are closed under it in nearly every test.  It may drop that
 *   arming silently (epoll drops the registration with the file) or report it
 *   once with TR_ERR; it must not abort (libuv and libev abort when epoll_ctl
 *   fails on such an fd, libuv 1.44 without a message: the suite's crash line
 *   is then all there is, see docs/en/conformance.md, "Reading the result", for
 *   a backtrace), must go on serving every other fd, and a later arm of the
 *   reused number must register the new file (B5).  Check the fd with
 *   fcntl(F_GETFD) before handing it to the library, and forget the arming on
 *   EBADF.  Both libuv (uv_poll_start: the watcher queue that uv_run's poll
 *   applies) and libev (fd_reify) apply watcher changes at the next loop run:
 *   the fd reaches epoll_ctl then, not at arm, so a check at arm does not
 *   cover a close between the arm and the loop run.  Before each loop run,
 *   check every fd whose watchers changed since the last one -- by an arm, a
 *   disarm, or the one-shot stop of a reported direction (libev: an
 *   EPOLL_CTL_MOD while the other direction stays armed; libuv 1.44: every
 *   uv_poll_start and uv_poll_stop removes the fd from epoll at once,
 *   EPOLL_CTL_DEL, and the change the loop run applies is an EPOLL_CTL_ADD)
 *   -- and drop a closed file's armings (B5: arm, close, wait; READ and
 *   WRITE armed, flush, close, READ disarmed, wait; WRITE reported, close,
 *   wait).  Empty that set of changed fds just before the loop run, not
 *   after it: a change a callback makes during the run (the one-shot stop,
 *   a restart with the direction left) reaches the kernel at the next run.
 *   libev may also rebuild its epoll set on its own and re-add every active
 *   fd (when it sees an event of a stale generation), which meets the same
 *   assertion for a closed fd that nothing changed; see libev below.
 *   That arming was made for the closed file: it is never reported for the
 *   file that took the number, also when the reused number is armed for the
 *   other direction (B5).  A backend that keeps one registration per fd
 *   number with both directions (epoll, poll; libevent merges an fd's events
 *   into one; libuv: one uv_poll_t per fd number) must not re-register the
 *   old direction with the new one.  A backend on epoll itself learns it from
 *   epoll_ctl: ENOENT on EPOLL_CTL_MOD says the number names another file
 *   now.  Over libuv no ENOENT comes: its deferred EPOLL_CTL_ADD fails with
 *   EBADF on a closed fd (libuv aborts) and succeeds, silently, on the file
 *   that took a reused number.  Where no ENOENT reaches the backend, compare
 *   fstat's st_dev and st_ino with those the fd had when armed, at every arm of a number that
 *   has an arming, and before a deferred registration reaches the kernel (or
 *   at delivery), and drop the closed file's armings first: a number closed,
 *   reused and never armed again is otherwise registered, or polled, as the
 *   new file with the old arming (B5).  For the contract the same st_dev
 *   and st_ino is the same file: a number taken by a dup of the armed fd
 *   (the same open file description, so the same readiness) may keep its
 *   arming, and an arm of it must register it and succeed, also after a late
 *   disarm (the file closed under the backend while a dup kept it, dup2'd
 *   back to its number: B5).  Over epoll EPOLL_CTL_ADD then finds the
 *   registration left with the file, EEXIST: that is this very file, so
 *   EPOLL_CTL_MOD it (with the new generation), never fail the arm.  They
 *   name the inode, which another open of it shares too (a
 *   FIFO opened twice, a pipe's other end): no call after the close tells
 *   those apart, and no clause builds it.  A library that polls by number
 *   meets a number closed while armed at every loop run until its watch is
 *   removed.  poll(2) and GLib report POLLNVAL (G_IO_NVAL).  libevent's poll
 *   method turns POLLNVAL into EV_READ|EV_WRITE, which looks like readiness:
 *   fstat the number at each report (EBADF, or another st_dev and st_ino,
 *   is the closed file's).  select(2) fails the whole call with EBADF, so
 *   libevent's select method makes every event_base_loop return -1 until
 *   that number's event is removed: on -1, check every added number
 *   (fcntl(F_GETFD)), event_del the closed ones and run the loop again.
 *   When none is closed, or the loop fails again after that clean-up in the
 *   same wait, return -errno as event_base_loop left it (libevent 2.1's
 *   select method keeps select's EBADF there), -EIO if it left 0: a second
 *   failure is the library's, not a closed fd's, and retrying it spins.
 *   Drop that number's armings and the library's watch of it there (GLib:
 *   g_source_remove_unix_fd, or g_source_destroy of a source of that fd
 *   alone; libevent: event_del), or report TR_ERR once and drop
 *   them; never keep polling it (each loop run then returns at once and the
 *   wait spins until its deadline, which B7 sees by its CPU time), and never
 *   report POLLNVAL itself: it is no TR_* bit (the suite's adapter
 *   refuses it, naming it).  poll and select cannot tell a reused number
 *   from its closed file, and libevent's epoll method retries a failed MOD
 *   as an ADD
 *   with the old direction in it (so event_del the old event before
 *   event_add).  It does so at a disarm too: event_del of one direction of
 *   a number that names another file now is a MOD that fails with ENOENT,
 *   retried as an ADD of the other old direction, onto the new file.  So
 *   compare st_dev and st_ino at a disarm of an armed direction as well, and
 *   on a mismatch (or EBADF) event_del both directions first (B5).
 *   The file may outlive its number: a dup, a forked child or SCM_RIGHTS
 *   keeps it open, and epoll drops a registration only with the file's last
 *   descriptor (epoll(7) Q6).  Its registration then stays in the kernel,
 *   keyed by the closed number and a file no number names, and no epoll_ctl
 *   can reach it.  Two cases:
 *   (a) The number is not armed again (reused or not): the closed file's
 *       readiness may be reported once to the arming made for it, its own
 *       token (epoll does that, and so does examples/c-backend/tr_epoll.c);
 *       the callback then acts on whatever the number names now.  That is
 *       the caller's bug, not the backend's: a backend may report it, or
 *       drop it (an fstat at delivery tells the files apart, at a syscall
 *       per report), and no clause checks which.
 *   (b) The number is armed again, for the file that took it (with or
 *       without a disarm in between, which then finds ENOENT or EBADF): the
 *       closed file's readiness never reaches the new token, nor the one it
 *       replaced (B5).  Over epoll, put a generation beside the fd in
 *       epoll_data (the number in the low 32 bits, a new generation at each
 *       EPOLL_CTL_ADD above it) and drop a report of an older generation;
 *       with EPOLLONESHOT the abandoned registration fires once at most,
 *       level-triggered it fires at every wait while its file is ready, and
 *       such a wait may then return with nothing before its timeout (the
 *       caller's bug: nothing can remove it).  Where the library keeps only
 *       the number (Python's select.epoll, libevent), poll the number's file
 *       at each report under a number found naming another file, for the
 *       rest of the backend's life: nothing tells it when the closed file's
 *       last descriptor goes (a poll(2) per report under such a number).
 *       Find it also after a late disarm left nothing armed: compare the identity
 *       the library registered (libuv registers at the loop run, so the
 *       closed file is registered once a wait ran after its arm; B5 closes
 *       it both before and after a wait), not only that of the armings.
 *       A report that poll proves false is dropped and its arming stays armed
 *       (nothing disarmed it): a one-shot event the library removed before
 *       the callback is added again after the loop run, never inside its
 *       callback (the closed file, still registered and ready, activates it
 *       again in the same run; with a loop that runs while callbacks fire,
 *       libevent's EVLOOP_NONBLOCK without EVLOOP_ONCE, wait(0) never
 *       returns).  The wait then runs the loop again for the time left, or
 *       returns -EINTR after that loop run (the caller calls again with the
 *       time left, see tr_backend_wait); a wait(0) returns 0, or the other
 *       reports it has.  libev
 *       keeps a generation of its own and drops such a report, then rebuilds
 *       its epoll set (see libev below).
 * - fds of its own: a backend may open fds per backend (its epoll fd, an
 *   eventfd for wake) and must close all of them in tr_backend_close (B14).
 *   fds a library opens once per process and keeps for the process's life
 *   (libuv's signal lock pipe, the Go runtime's poller) are allowed: B14 counts from
 *   after one backend was created and closed, so they are already open then.
 *   Per loop, libuv's uv_loop_init opens a signal pipe, an eventfd (for its
 *   uv_async_t handles) and the epoll fd: those are the backend's, closed by
 *   uv_loop_close (B14).
 *   Per arm, no fd at all (B14).
 * - State beside the kernel: a backend that queues arms until its loop runs,
 *   or collects more reports in a loop run than one wait may return (its
 *   capacity, or max_batch), holds reports it has not delivered.  Those are
 *   still the armings' reports: disarm drops them (B3), a re-arm drops the
 *   replaced token's (B1, R18), and they belong to the arming they were
 *   collected for, never to a later arming of the same fd number (B5).  One
 *   held when its fd is closed without disarm, the number not armed again,
 *   may still go to its own token (its file's readiness since the arming,
 *   B15) or be dropped: B5 allows either.  Once the number is armed again,
 *   in either direction, it is dropped: its callback would read the file
 *   that took the number (B5).  The
 *   suite passes a capacity of 1 to create that situation (B3, B5).
 * - Its own clock: a wait's deadline is taken from a clock read when the wait
 *   starts, not from one cached at the end of the previous loop run (libuv's
 *   uv_now; call uv_update_time first), or a wait after an idle gap returns
 *   early (B8).  Over libuv uv_update_time is not enough: the loop time is
 *   whole milliseconds rounded down, and uv_run retries EINTR with the poll's
 *   timeout counted from it, so a wait a signal lands in returns up to 1 ms
 *   early.  Keep a CLOCK_MONOTONIC deadline of your own and run the loop
 *   again with the time left.  libevent's timers run on CLOCK_MONOTONIC_COARSE (up to a
 *   tick, 1-4 ms, behind) unless the base is made with
 *   EVENT_BASE_FLAG_PRECISE_TIMER (CLOCK_MONOTONIC, and a timerfd under
 *   epoll).  Whatever the library's clock, the deadline check of
 *   tr_backend_wait ("never returns earlier") keeps the wait correct.
 * - Its own time units: round timeout_ns up at every conversion.  A struct
 *   timeval (libevent's timers) holds microseconds: ns / 1000 + (ns % 1000
 *   != 0), which cannot overflow near INT64_MAX (tr_backend_wait); never
 *   ns / 1000, which makes a wait under a microsecond a poll and one of
 *   1.5 us return up to a microsecond early (B8).
 * - Deferred arms: libevent's EVENT_BASE_FLAG_EPOLL_USE_CHANGELIST, and libuv
 *   and libev always, make watcher changes wait for the next loop run: until
 *   then the kernel has not seen an arm, a disarm or a one-shot stop, and an
 *   fd closed meanwhile meets epoll_ctl there (see above).  Whether flush
 *   must run the loop to apply them: see tr_backend_flush.
 * - A caught event: a library cannot tell an event that still waits from one
 *   its loop caught and has not handed over (libevent's active queue, libuv's
 *   pending callbacks).  A re-arm must not swap the token of such an event:
 *   its report was for the replaced token and goes with it (B1, B15).  See
 *   tr_backend_arm.
 * - Wake: use something latched (an eventfd or a pipe the loop watches,
 *   uv_async_send, event_active on an event of its own); libevent's
 *   event_base_loopbreak and event_base_loopexit are not: made while no loop
 *   runs, they are lost (B7).  event_active from another thread needs
 *   libevent's locks: evthread_use_pthreads() once in the process before
 *   event_base_new (-levent_pthreads); the base then locks itself and opens
 *   a notify fd, closed by event_base_free.  An eventfd that wake
 *   writes and the loop watches needs neither, and then
 *   EVENT_BASE_FLAG_NOLOCK is allowed (it changes something only once
 *   evthread_use_pthreads ran in the process): wake touches no part of the
 *   base, and the other calls never overlap ("Threads" above).  See
 *   tr_backend_wake.
 *   Latched is not enough where the library also fires that same wake-up
 *   for its own reasons.  GLib's g_main_context_wakeup is latched: it writes
 *   the context's eventfd (a GWakeup), which stays readable until a loop
 *   run's poll finds it and GLib reads it back.  But GLib also writes it
 *   when a source with fds is attached or
 *   destroyed (attaching one with no fds does not), at g_source_add_unix_fd
 *   and its modify and remove on an attached source, at every change of an
 *   attached source's ready time (g_source_set_ready_time) and around each
 *   dispatch; a loop run that
 *   returns with nothing then says nothing.  The wait must be able to tell
 *   that tr_backend_wake was called: by a callback of its own (uv_async_t,
 *   ev_async, event_active on an event of the backend's own), or by a flag
 *   (an atomic) that wake sets before it wakes the library, and that the
 *   wait reads and clears at its start and after every loop run.  This
 *   comes before the advice to treat a re-run as an EINTR retry (see
 *   tr_backend_wait's -EINTR): a loop run that returns with the flag set is
 *   the wake (return 0, or the reports); only one with the flag clear is
 *   an early return to retry.  Taking every empty loop run as the wake
 *   ends waits early (B7, B8); taking every one as -EINTR with no flag
 *   loses the wake, and a wait with no limit never returns (B7).
 * - Process-wide setup: a library call that configures the whole process
 *   (evthread_use_pthreads, event_set_log_callback) is allowed, made once
 *   (pthread_once) before the first base; it then holds for every user of
 *   the library in the process.  libevent warns on stderr at each failed
 *   epoll_ctl MOD of an fd closed under it, as the suite's tests close fds
 *   in nearly every test: harmless, and a silent event_set_log_callback
 *   hides it (for every user of libevent in the process, so a choice).
 * - Out of memory inside a library callback: a report that cannot be queued
 *   must not be dropped (its one-shot arming is gone, and the token is never
 *   reported: B10).  Reserve the room at arm instead (one slot per armed
 *   direction: two per fd), so that a callback never allocates, and let
 *   tr_backend_arm return -ENOMEM when it cannot; or, failing that, add the
 *   arming again after the loop run (a level-triggered library reports it
 *   again at a later wait).  Signal handlers and the signal mask are
 *   the process's (Python's, under the suite): a backend changes neither,
 *   installs no handler, ignores no signal and blocks none (B7 checks, in a
 *   fresh process: the caught, ignored and blocked signals of
 *   /proc/thread-self/status after create, arm, wait, wake and close are
 *   those before create; a signal reaches a wait through the caller's
 *   handlers, see tr_backend_wait's -EINTR).
 * - Signals: a library that retries EINTR itself (libevent's loop and libuv's
 *   uv_run do)
 *   keeps the caller's signal handlers from running until the wait ends
 *   (B7).  GLib's g_main_context_iteration neither retries EINTR nor says
 *   it saw one: a poll function of the backend's own
 *   (g_main_context_set_poll_func) that calls g_poll and notes EINTR can
 *   tell; it gets no user data, so the note may be thread-local, set and
 *   read within one tr_backend_wait ("no per-thread state" means none that
 *   outlives a call).  See tr_backend_wait.
 * - GLib's ready time: a source whose ready time (g_source_set_ready_time)
 *   has passed stays ready, dispatched at every loop run, until it is set
 *   back to -1.  Set it back in its dispatch (or before the wait returns):
 *   left due, every later loop run returns at once, and a wait with no
 *   limit spins, a core busy until a wake or a report.  Such a wait is never
 *   early: B7 sees it by the CPU time of a wait(None) held open after a
 *   finite one.
 *   The ready time is in microseconds: round the deadline up
 *   (ns / 1000 + (ns % 1000 != 0)), and still compare CLOCK_MONOTONIC with the
 *   deadline after the loop run (B8).
 * - GLib's empty loop runs: retry an empty loop run inside the wait, never
 *   as -EINTR.  Each call's g_source_set_ready_time makes GLib wake its
 *   context itself, so every call's first loop run returns empty; a wait
 *   that returns -EINTR there is called again at once, and spins (B8 counts
 *   the calls).  See tr_backend_wait's -EINTR for the general rule.
 * - GLib's fd watch: g_source_modify_unix_fd(source, tag, 0) does not stop
 *   watching.  GLib still polls the fd with events 0, and poll(2) returns
 *   POLLHUP, POLLERR and POLLNVAL whatever the events asked, so an unarmed
 *   fd that hangs up is dispatched at every loop run (a spin B7 sees by its
 *   CPU time).  Remove the fd (g_source_remove_unix_fd) when nothing of it is
 *   armed.  G_IO_PRI (POLLPRI) has no TR_* bit: never ask for it.
 * - GLib in short: a GMainContext of the backend's own (g_main_context_new,
 *   never acquired across calls); wake as an atomic flag plus
 *   g_main_context_wakeup, with a count of wakes in progress that close
 *   waits for; a poll function of its own that notes EINTR; a ready time
 *   rounded up, set back to -1 once due, and the wait's own CLOCK_MONOTONIC
 *   deadline, empty loop runs retried inside the wait; g_source_remove_unix_fd
 *   at each report and disarm, G_IO_NVAL dropped, and st_dev/st_ino compared
 *   at arm and at delivery.  GLib aborts when an allocation fails
 *   (g_malloc): -ENOMEM from arm cannot be honoured over it, and no clause
 *   tests it.
 * - TR_CAP_ORDERED: claim it from an argument, not a run: see
 *   tr_capabilities.  Most backends over a library do not claim it, and the
 *   reactor is correct without it.
 * - libuv: a uv_loop_t of the backend's own (uv_loop_init), a uv_poll_t per
 *   fd, a uv_async_t for wake.  uv_run(UV_RUN_ONCE) (libuv 1.44) runs the
 *   timers that are due before it polls, and takes the poll's timeout from
 *   the timers left: a one-shot timer for the wait's timeout that is due by
 *   then fires there, and the poll that follows has no timer to bound it: it
 *   blocks until an fd or a wake (B8's short waits then do not return, and
 *   the watchdog ends them).  That happens even right after uv_update_time:
 *   uv_run reads the clock again, and a 1 ms timer is due whenever a
 *   millisecond boundary passes in between.  Always give the timer a repeat
 *   (uv_timer_start(t, cb, ms, ms)), or start it again in its callback, so a
 *   timer is pending while uv_run polls.  Closing the handles: see tr_backend_close.
 *   In short, a libuv backend needs:
 *   - its own uv_loop_t; one uv_poll_t per fd number, restarted with the
 *     directions left at each report and disarm (uv_poll_stop when none);
 *   - an fstat (st_dev, st_ino) of each changed fd at arm and before each
 *     uv_run, and a poll(2) of each report under a number found reused;
 *   - its own CLOCK_MONOTONIC deadline, a repeating uv_timer_t, 100 ms slices
 *     that end in -EINTR;
 *   - a uv_async_t that sets a flag, with a lock or count against close;
 *   - close: uv_close on every handle, uv_run, then uv_loop_close.
 * - libevent: event_assign on a struct event kept in a record of your own
 *   needs <event2/event_struct.h> (event.h leaves the struct opaque), and
 *   only on an event neither added nor active: event_del it first (event.h:
 *   assigning a pending or active event corrupts the base's lists; an arm
 *   of a direction already armed meets it; event_enable_debug_mode() catches
 *   it while developing).
 *   event_base_loop returns 1 at once, having waited for nothing, when no
 *   event is added (a timer counts, the base's internal events do not),
 *   unless given EVLOOP_NO_EXIT_ON_EMPTY: a wait(None) with nothing armed
 *   then returns at once.  Keep the wake's event added (EV_PERSIST), or
 *   pass the flag; a return of 1 is no wake (-EINTR or run again, never 0:
 *   B7).  Its poll and select methods: "The fds it is given" above, and
 *   tr_backend_arm (the select method's FD_SETSIZE).  A re-arm event_dels
 *   the old event before event_assign: check what can fail first (the fd,
 *   its file, -ERANGE, room for its reports), and if event_add still fails,
 *   assign and add the old token again, so a failed arm changes no arming;
 *   return -errno, or -EIO if event_add left errno 0.
 *   In short, a libevent backend needs: its own event_base
 *   (EVENT_BASE_FLAG_PRECISE_TIMER, IGNORE_ENV); two one-shot events per fd
 *   in a record that never moves, event_del before each event_assign; a
 *   queue of caught reports with its room reserved at arm, dropped at
 *   disarm and re-arm; a latched wake (an eventfd with an EV_PERSIST event
 *   setting a flag) with a lock or a count against close; one timer per
 *   loop run, its own CLOCK_MONOTONIC deadline (saturated), timevals
 *   rounded up, 100 ms slices ending in -EINTR; st_dev/st_ino compared at
 *   arm, at the disarm of an armed direction and at each report, and a
 *   poll(2) of each report under a number found reused.
 * - libev: a loop of the backend's own, ev_loop_new, never ev_default_loop
 *   (it installs a SIGCHLD handler), with EVBACKEND_EPOLL, EVFLAG_NOENV
 *   (without it LIBEV_FLAGS in the environment picks the method, poll or
 *   select too, and these notes are about epoll), EVFLAG_NOSIGMASK (libev
 *   4.33 changes the signal mask only for ev_signal watchers, which a
 *   backend has none of: the flag keeps it so) and EVFLAG_NOTIMERFD (no
 *   timerfd of its own); an ev_async watcher for wake.  ev_run(EVRUN_ONCE)
 *   returns after a signal (EINTR) as after any wake-up with nothing for
 *   the backend, and does not say which: see tr_backend_wait's -EINTR.  Its epoll method blocks at
 *   least about a millisecond (a 500 ns wait took 1.09 ms, median): see
 *   tr_backend_wait's lateness.  More of libev:
 *   - Its clock: ev_now is the time cached when the loop last ran; a timer
 *     started after an idle gap counts from it and fires early.  Call
 *     ev_now_update before ev_timer_start, or keep a deadline of your own
 *     ("The sure way" in tr_backend_wait) (B8).
 *   - ev_run(EVRUN_ONCE) returns by itself after about 60 s (MAX_BLOCKTIME,
 *     59.743 s), also with a timer pending further off: a wait that returns
 *     there, before its deadline, has nothing and no wake, so it returns
 *     -EINTR or runs the loop again, never 0 ("returns only when woken" and
 *     "never earlier", B7, B8; no clause waits 60 s).
 *   - EVFLAG_NOTIMERFD: libev 4.31 and later may open a timerfd per loop to
 *     see wall-clock jumps (for ev_periodic watchers; 4.33 opens it only
 *     then).  A backend uses no wall clock: the flag keeps that fd from
 *     ever being opened.  Without it nothing changes in 4.33, and no clause
 *     tells the two apart.
 *   - libev keeps pointers to active watchers: an ev_io must not move while
 *     it is started.  Never realloc a table of ev_io; allocate each fd's
 *     record once, or stop its watchers before moving them.
 *   - A number that names a new file must be told to libev: ev_io_set (or
 *     ev_io_init) on the stopped watcher, or a new watcher, before
 *     ev_io_start.  ev_io_start alone keeps libev's idea of the file, and
 *     with the events libev last applied unchanged it makes no epoll_ctl:
 *     the new file is never registered, or a dup'd old file's readiness
 *     reaches the new token (B5; libev's manual: "The special problem of
 *     disappearing file descriptors").
 *   - Busy loops (see tr_backend_wait's -EINTR): ev_unref on the ev_async
 *     (with no other watcher active, ev_run does not block at all), and a
 *     watcher left started after its report or its disarm with its
 *     callbacks ignored (libev's epoll is level-triggered: while that fd
 *     stays ready, every loop run returns at once).  Keep the ev_async
 *     referenced, and stop a watcher at its report and at disarm
 *     (ev_io_stop), as over every library (tr_backend_wait's -EINTR).
 *   - The rebuild: a report of a stale generation makes libev rebuild its
 *     epoll set and re-add the fd of every active watcher.  A correct
 *     caller triggers it too: a disarm leaves the kernel registration
 *     (libev removes it lazily), the fd is closed while a dup or a child
 *     keeps the file open, its number is reused and armed again, and the
 *     old file becomes ready.  That is harmless while every active
 *     watcher's fd is open and names the file it was armed for (the wait
 *     returns -EINTR once).  After the caller's bug, an armed fd closed
 *     without disarm, the rebuild asserts on a number that is closed, and
 *     re-adds one that names another file now under the old arming, which
 *     then reports the old token for the new file (B5's rule broken).  The
 *     contract does not ask a backend to survive that: over libev it may
 *     abort or misreport there (avoiding both takes an fstat of every
 *     armed fd before each loop run).  No clause builds it.
 *   - Its poll method (EVBACKEND_POLL) does not report POLLNVAL: it asserts
 *     ("libev: poll found invalid fd in poll set") at the first loop run
 *     that meets an fd closed while watched, a correct caller's disarmed fd
 *     included while libev still watches it.  Over poll, check every
 *     watched fd (fcntl F_GETFD, and st_dev/st_ino) before each loop run,
 *     not only the changed ones, and stop the watchers of a closed one.
 *     Its select method stops a closed fd's watchers itself on EBADF and
 *     has no FD_SETSIZE limit: tr_backend_arm's -ERANGE is libevent's.
 *   - A caught event: ev_run(EVRUN_ONCE) runs every pending callback before
 *     it returns, so a report caught and not handed over lives only in the
 *     backend's own queue; a re-arm drops it from there (B1, B15).
 */
#ifndef TAILREACTOR_BACKEND_H
#define TAILREACTOR_BACKEND_H

#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* The version this header describes.  A library returns it from
 * tr_backend_abi_version(); the suite refuses any other (exit status 2). */
#define TR_BACKEND_ABI_VERSION 1u

/* Directions: what an arming waits for. */
#define TR_READ 1  /* readable (POLLIN) */
#define TR_WRITE 2 /* writable (POLLOUT) */

/* revents bits, equal to Linux's POLL* and EPOLL* values, so epoll events and
 * io_uring poll results pass through untranslated. */
#define TR_IN 0x001    /* POLLIN */
#define TR_OUT 0x004   /* POLLOUT */
#define TR_ERR 0x008   /* POLLERR */
#define TR_HUP 0x010   /* POLLHUP */
#define TR_RDHUP 0x2000 /* POLLRDHUP */

/* The bits that satisfy a direction.  HUP and ERR satisfy both, so a peer's
 * close or a socket error reaches whichever token is armed (B6). */
#define TR_SATISFIES_READ (TR_IN | TR_ERR | TR_HUP | TR_RDHUP)
#define TR_SATISFIES_WRITE (TR_OUT | TR_ERR | TR_HUP)

/* One report of tr_backend_wait. */
typedef struct tr_event {
    uint64_t token;   /* the token given to tr_backend_arm */
    uint32_t revents; /* TR_* bits seen, no other bit; never 0, and satisfies the armed direction.
                       * The other direction's bits may be present too (an fd polled for
                       * both directions).  A peer's close or a socket error must reach the
                       * armed tokens (B6); a library that cannot tell HUP or ERR from
                       * readiness reports what it can see, and the callback then finds EOF
                       * or the error in recv/send.
                       * libuv (uv_poll: UV_READABLE, UV_WRITABLE, UV_DISCONNECT, a status):
                       * TR_IN for UV_READABLE and TR_OUT for UV_WRITABLE, each to its own
                       * direction's token; TR_RDHUP for UV_DISCONNECT, to the READ token
                       * only; TR_ERR for a status < 0.  UV_DISCONNECT is EPOLLRDHUP: the
                       * peer shut its writing side (EOF for READ), not a hang-up.  Never
                       * TR_HUP for it: HUP satisfies WRITE too, and a WRITE token armed
                       * beside READ would be reported while the send buffer is full and
                       * the fd not writable (B15: the peer's shutdown(SHUT_WR) with both
                       * directions armed).  UV_DISCONNECT comes only when uv_poll_start
                       * was asked for it; asking is optional: the peer's shutdown makes
                       * the fd readable (EOF) anyway, so READ is reported with TR_IN
                       * without it, and the suite cannot tell whether it was asked (B6
                       * and B15 pass either way).  A callback with status < 0 has
                       * stopped the handle, both directions: report TR_ERR to every
                       * armed token of that fd, READ and WRITE, or the other one is
                       * never reported (B6).
                       * io_uring: a POLL_ADD's mask always includes POLLRDHUP (and ERR,
                       * HUP), so a POLLOUT poll completes with POLLRDHUP alone after the
                       * peer's shutdown: that is no readiness for WRITE (B15).
                       * libevent: its epoll method turns EPOLLHUP and EPOLLERR into
                       * EV_READ|EV_WRITE, cut to the event's own directions (EV_CLOSED only
                       * when asked for): TR_IN for EV_READ, TR_OUT for EV_WRITE, TR_RDHUP
                       * for EV_CLOSED.  Asking for EV_CLOSED is optional, as for
                       * UV_DISCONNECT: the peer's shutdown makes the fd readable anyway.
                       * libev (ev_io): its epoll method also turns hang-up and error into
                       * read and write readiness, cut to the watcher's events: TR_IN for
                       * EV_READ, TR_OUT for EV_WRITE, TR_ERR for EV_ERROR. */
    uint32_t reserved; /* 0 */
    /* The suite refuses a report with revents 0, a bit outside TR_IN, TR_OUT,
     * TR_ERR, TR_HUP and TR_RDHUP, reserved != 0, or a token no arm gave. */
} tr_event;

/* Capability flags: what a backend claims beyond the core contract.  The
 * suite checks a clause that needs a capability only on backends that claim
 * it (a clause the backend does not claim is skipped, with the reason). */
#define TR_CAP_ORDERED 0x1u /* B9: tokens are reported in the order their readiness arose */
/* When to claim TR_CAP_ORDERED: when the reports come in the order readiness
 * arose, counted from the flush after the arms (B9), and the backend can say
 * why: every layer between the kernel and events[] keeps that order.  epoll's
 * ready list and io_uring's completion ring give it; the backend hands
 * reports over in the order it got them (held-over ones first).  A backend
 * that claims it must pass B9, also under --profile deep; one that does not
 * claim it has B9 skipped under every profile, deep too, and nothing about
 * order applies to it.  A pass is not the evidence: B9 samples
 * orders and finds no counterexample, it proves none.  poll(2) and select
 * report in fd-array order: never claim it there.  Library notes: libevent
 * runs one priority's callbacks in the order its method activated them, so a
 * base with one priority whose event_base_get_method is "epoll" (the whole
 * string) keeps epoll's order, its poll and select methods do not.  With
 * EVENT_BASE_FLAG_EPOLL_USE_CHANGELIST (or EVENT_EPOLL_USE_CHANGELIST in the
 * environment, unless EVENT_BASE_FLAG_IGNORE_ENV) the method is "epoll (with
 * changelist)": it batches arms until the next loop run, so the order holds
 * only if flush runs the loop (B9).  A library whose order
 * its documentation does not state: do not claim it.  Without it B9 is
 * skipped and the reactor is still correct (every event runs, aged ones
 * first); only its TAIL_US=0 order is then the backend's rather than first
 * come, first served. */

typedef struct tr_capabilities {
    uint32_t flags;     /* TR_CAP_* bits */
    uint32_t max_batch; /* most reports one wait returns, a promise (B10); 0 = no cap declared
                         * (a wait still returns at most its capacity) */
} tr_capabilities;

/* The opaque backend handle. */
typedef struct tr_backend tr_backend;

/* TR_BACKEND_ABI_VERSION of the header the library was built with. */
uint32_t tr_backend_abi_version(void);

/* Create a backend: store its handle in *out and return 0, or return
 * -errno (*out untouched). */
int tr_backend_create(tr_backend **out);

/* Fill *out with what the backend claims.  0, or -errno.  The suite calls it
 * once, right after create; the claims hold for the backend's life. */
int tr_backend_capabilities(tr_backend *b, tr_capabilities *out);

/* One-shot interest in `direction` (TR_READ or TR_WRITE) on `fd`.
 * - `token` is opaque: store it and give it back unchanged in the report.
 *   The suite gives every arming a fresh number (never 0, never reused), so
 *   it sees a report of an arming that was reported, disarmed or replaced
 *   (B1, B3).
 * - When the fd becomes ready, or is ready already, a later wait reports
 *   (token, revents) exactly once; the interest is then gone until armed
 *   again (B1, B2).  Both directions of one fd are independent (B1).
 * - Arming a direction that is armed replaces its token (R18).  The new
 *   token reports only readiness it could see: readiness present when it is
 *   armed (the kernel re-checks it: EPOLL_CTL_MOD, a new POLL_ADD, B2) or
 *   arising after.  A report caught for the replaced token and not handed
 *   over (collected by a loop run in flush or wait, held beyond a full batch)
 *   belongs to the replaced token and is dropped, never given to the new one:
 *   its data may have been read since (B1, B15).
 * - A closed or invalid fd returns -EBADF (B16).  Only the arm of a
 *   direction that is armed, or that the latest wait reported (the fd's own
 *   callback re-arming it), may skip the check, and only where the closed fd
 *   still fails later: arm returns 0 and a later wait reports the new token
 *   once with TR_ERR (io_uring's POLL_ADD does).  B16 accepts either there,
 *   and only -EBADF elsewhere.  Another direction value returns -EINVAL (the
 *   suite's adapter checks the direction itself, so the suite never passes one).
 * - A failed arm (any -errno: -EBADF, -ERANGE, -ENOMEM) changes no arming:
 *   undo what it changed before it returns.  The refused token is never
 *   reported, nor registered by a later arm of the number (B16); the fd's
 *   armings stay as they were, the refused direction's old token still armed
 *   (over a closed fd those are "closed without disarm" armings: reported once
 *   or dropped, B5).  Why: the caller's arm failed, so it still holds the old
 *   token as armed and never held the new one.  No clause checks that the old
 *   token of an open fd stays armed (the suite cannot make an arm of an open
 *   fd fail).
 * - At least 1024 fds can be armed at once, numbered past 1024 too (B11).
 *   A number the library cannot take returns -ERANGE, checked before the
 *   library sees it (libevent's select method: FD_SETSIZE, 1024, and up; a
 *   build with _FORTIFY_SOURCE, as Debian's, aborts inside event_add).
 *   Such a backend fails B11, and the reactor arms numbers past 1024 under
 *   load: a library method with that limit is not for this reactor.
 * - Arming right after a report, before the next wait, is honoured (B12).
 * - An arm costs no file descriptor (B14). */
int tr_backend_arm(tr_backend *b, int fd, int direction, uint64_t token);

/* After it returns, the token armed for that direction of `fd` is never
 * reported by a later wait (B3), also when the fd was ready already, and
 * also after the fd number is closed and reused for another file (B5).
 * Disarming what is not armed does nothing and returns 0.  The reactor calls
 * it before an fd is closed, also when the token was already reported, so a
 * backend that keeps a registration across arms drops it here.  Any fd number
 * is accepted (never armed, negative: not armed, 0); an armed fd closed under
 * the backend is disarmed all the same and returns 0 (an EBADF or ENOENT from
 * the kernel there means "gone already").  Another direction value returns
 * -EINVAL (never passed by the suite).  0, or -errno. */
int tr_backend_disarm(tr_backend *b, int fd, int direction);

/* Block up to timeout_ns nanoseconds (< 0: no limit, 0: poll) and write up
 * to `capacity` reports to events[0..n); return n, never more than capacity,
 * or -errno.  n == 0: the timeout passed, or a wake ended the wait with
 * nothing ready.  A woken wait that has reports returns them: n says nothing
 * of a wake (the caller looks for posted work after every wait).
 * - capacity is >= 1: max_batch when one is declared, else 1024; the suite
 *   lowers it to 1 in B3 and B5.  capacity 0 returns -EINVAL (the suite
 *   never passes it).  Write events[0..n) and no entry past n:
 *   the caller clears the entries it has read, and after a wait cut short
 *   (a signal handler that raised) it takes each leading entry whose revents
 *   is not 0 as a report it has not read yet.
 * - The clock is CLOCK_MONOTONIC (the suite measures with it).  timeout_ns
 *   is the time to the reactor's next timer, rounded up to whole nanoseconds
 *   by the caller: any value from 0 to INT64_MAX (about 292 years) is
 *   accepted, never refused.  ppoll and epoll_pwait2 take it whole; poll and
 *   epoll_wait take milliseconds, a struct timeval microseconds: round up at
 *   each conversion.  A value beyond what the library can take may be
 *   clamped to its largest (epoll_wait: INT_MAX ms, about 24.8 days): a wait
 *   that ends there returns 0, and the reactor waits again.  Near INT64_MAX
 *   the arithmetic overflows (undefined in C): (ns + 999) / 1000 of
 *   INT64_MAX is a timeval of -9.2e9 s, which libevent fires at once, so a
 *   wait that runs the loop again spins.  Round up as ns / 1000 + (ns % 1000
 *   != 0), and saturate a deadline of your own (now + timeout_ns).
 *   libevent 2.1 takes any normalized timeval (tv_usec < 1000000) whose
 *   tv_sec plus its clock fits a time_t (INT64_MAX ns, 9.2e9 s, does; its
 *   epoll method clamps to 35 minutes itself); past that, or negative, the
 *   timer fires at once.  Keep a timeval to one slice: the 100 ms slices
 *   (-EINTR below) do that anyway.  The suite passes 0, values from 500 ns
 *   to a few seconds, and INT64_MAX, woken after 0.3 s (B8).
 * - A wake (tr_backend_wake) ends the wait blocked then, else the next one
 *   to start (B7): it is latched (an eventfd counter is) until a wait
 *   returns after it was made.  That wait may consume it, whatever it
 *   returns (reports or 0, wait(0) too), or leave it for the next wait,
 *   which then returns at once: the suite accepts either.  flush never
 *   consumes it (B7).  Several wakes before a wait may end that one wait only.
 *   A wait that starts with a wake pending may return 0 at once, or run the
 *   loop once without blocking first and return what it finds: both pass.
 * - With no limit and nothing ready it returns only when woken (B7).
 * - Never returns earlier than timeout_ns with nothing ready, also for a
 *   fraction of a microsecond: round up, never down (B8).  The sure way,
 *   whatever the library's clock and rounding: read CLOCK_MONOTONIC when the
 *   wait starts; when the library returns with nothing to report and no wake
 *   before that deadline, run it again with the time left.  B8 times a C
 *   backend's waits from 500 ns (998.5 ns, 1.5 and 2.5 us) to 50 ms in C, around
 *   the library call alone (a loop the suite builds with $CC, else cc; it
 *   calls again after -EINTR with the time left, as the adapter does, and
 *   times a wait from its first call to its last return), so a wait that
 *   polls, or a timeout rounded down to microseconds or to
 *   milliseconds, is seen returning before its timeout every time: the
 *   caller's own work around the call hides none.  A timeout that the
 *   backend's own poll (tr_backend_wait(0)) costs as much as skips, naming
 *   that cost; the longer ones still run.
 * - How late it may return: nothing is promised and no clause measures it;
 *   a late wait makes the reactor's timers fire as much later.  epoll_wait's
 *   whole milliseconds make a 1.5 ms wait 2 ms; libev's epoll method blocks
 *   about a millisecond at least (a 500 ns wait took 1.09 ms, median).  A
 *   finer timer (epoll_pwait2, ppoll, a timerfd) costs the reactor less.
 * - HUP and ERR are reported to the READ token and to a WRITE token (B6).
 * - Reports only readiness that existed at some moment since the arming (B15).
 * - What it does not return now it returns in a later wait: no ready token
 *   starves (B10).  With TR_CAP_ORDERED, reports come in the order readiness
 *   arose, arm order for fds ready when armed (B9).
 * - -EINTR: ended early with nothing to report.  A signal does that (the
 *   kernel's EINTR): return it.  The caller retries -EINTR (the Python
 *   adapter that the suite and the reactor load the library with): it runs
 *   its signal handlers, then calls again with the time left; a handler
 *   that raises (Ctrl-C: KeyboardInterrupt) ends the caller's wait.  A
 *   backend that retries EINTR itself, or whose library does (libevent's
 *   loop, libuv's uv_run: its poll goes on with the time left), delays the
 *   handlers until the wait ends:
 *   Ctrl-C during a wait with no limit then waits for the next wake or
 *   report.  B7 sends a wait with no limit a signal again and again until
 *   it ends, its handler raising: the wait must end by that exception.
 *   Such a backend should block in slices (say 100 ms) and return
 *   -EINTR when a slice ends before the deadline with nothing ready and no
 *   wake, in a wait with a limit too (libevent's loop retries EINTR until
 *   its timer fires: Ctrl-C during wait(30 s) would wait 30 s).  Never 0
 *   there: 0 says the timeout passed or a wake came (B7, B8).  A self-pipe
 *   needs a signal handler, and the handlers are the process's (see the top
 *   of this file).  No clause measures how soon a handler runs (B7 checks
 *   only that it does, in a wait with no limit and in one of INT64_MAX); a handler
 *   that returns must not end a wait early (B7, B8).  Where the library's
 *   early return does not say why (libev's ev_run(EVRUN_ONCE) returns after
 *   EINTR exactly as after a spurious wake-up), treat every re-run as an
 *   EINTR retry, once the wake is ruled out (a library that also fires the
 *   wake's own wake-up itself: the flag of "Wake" at the top of this file):
 *   returning -EINTR with no signal is allowed, the caller only
 *   calls again with the time left (after running any handlers), but not
 *   run after run: a wait whose library loop returns at once every time (a
 *   watcher of the backend's own unreferenced, as libev's ev_unref on the
 *   wake's ev_async; a watcher left started on a ready fd nobody wants, its
 *   callbacks ignored) spins, a core busy until its timeout or wake.  So,
 *   over every library, stop the library's watch of a direction at its
 *   report and at its disarm: libev's ev_io_stop, libuv's uv_poll_stop (or
 *   uv_poll_start with the directions left), libevent's event_del (an event
 *   without EV_PERSIST is removed before its callback), GLib's
 *   g_source_remove_unix_fd (its condition 0 still polls: "GLib's fd watch"
 *   at the top of this file).  And a backend whose library wakes itself at
 *   each call (GLib: each call's g_source_set_ready_time) must not return
 *   -EINTR for that wake-up: the next call wakes it again, without end; run
 *   the loop again inside the call.  The
 *   suite counts the calls of a wait held open (B7 with no limit and nothing
 *   armed, B8 beside a disarmed and a reported ready fd) and accepts one for
 *   every 10 ms it ran (a tenth of the 100 ms slice above), plus a few for
 *   registrations removed lazily; and it measures the CPU time the waiting
 *   thread used, which catches a spin inside one call (the library's loop
 *   re-run by the wait itself): at most 30 ms, or 5% of the wait's run, is
 *   accepted (B7 also after a finite wait, beside a disarmed fd that hung up
 *   and an armed one closed).  Not for a
 *   wait(0) (it returns 0), and only after the library ran and returned:
 *   -EINTR never stands for a wait not made.  A loop run that returns at
 *   once with nothing (libev, when a registration it removes lazily, of an
 *   fd disarmed and still ready, fires) is such a return: -EINTR is right
 *   there, and the caller's retry is the next run.  But a wait that returns
 *   -EINTR (or 0) again and again with no signal, wake or report is a busy
 *   loop, a core busy, whichever the library, within one call or across
 *   calls: B7 and B8 measure the CPU time of the waits above (libev's two
 *   ways into it: the libev notes at the top of this file).
 * A call into C cannot be interrupted: the suite takes a wait that has not
 * returned within its timeout plus twice its liveness bound as hung, prints
 * one line and ends the process (the bound: TAILREACTOR_CONFORMANCE_LIVENESS_S,
 * 3 s by default, so 6 s; 9 s with no limit): with -n 0 the run; under
 * pytest-xdist the worker, and the test fails its clause as FAIL (hung),
 * that line and the command that reruns the test quoted under the table. */
int tr_backend_wait(tr_backend *b, int64_t timeout_ns, tr_event *events, uint32_t capacity);

/* Make queued arms visible to the kernel now; return how many were submitted
 * (0 for a backend that arms synchronously, as one that builds its interest
 * set at each wait with poll(2) or select does), or -errno (R14).  The suite
 * refuses a count above two per arm or disarm since the last flush, plus one.
 * For a backend that queues arms until its next loop run, flush is that point:
 * - after it returns, readiness that arises is seen by the kernel for every
 *   arm made before it: the tests make fds ready right after a flush and
 *   expect the report (B3, B5, B11, R14), and TR_CAP_ORDERED's "order
 *   readiness arose" is measured from it (B9: arms, flush, then the fds made
 *   ready one by one);
 * - running the library's loop here is required only where it shows: with
 *   TR_CAP_ORDERED (B9), or over a library whose registration misses
 *   readiness already present when it reaches the kernel (edge-triggered
 *   with no check at registration).  Over a level-triggered library (libuv's
 *   uv_poll, libev's and libevent's epoll methods, poll) a flush that returns
 *   0 and leaves the changes to the next wait's loop run is correct: the
 *   registration then sees whatever became ready meanwhile, and the report
 *   comes as it would;
 * - it may run the library's loop once without blocking (uv_run with
 *   UV_RUN_NOWAIT; libevent: event_base_loop with EVLOOP_ONCE|EVLOOP_NONBLOCK,
 *   as for a wait(0): EVLOOP_NONBLOCK alone keeps dispatching while
 *   callbacks fire and stops only after a pass that activates nothing) and
 *   so collect reports; it must not block, and the reports
 *   it collects are delivered by later waits, or dropped by a disarm (B3) or
 *   a re-arm; a wake it sees run (uv_async_t, ev_async) is kept for the next
 *   wait, as tr_backend_wake says (a post's wake may come before the
 *   round-budget flush of R14, and the round's wait after it);
 * - it returns the number of submissions (an EPOLL_CTL_* or an SQE each), 0
 *   when the library gives no count. */
int tr_backend_flush(tr_backend *b);

/* From any thread: make a blocked tr_backend_wait, or the next one if none
 * is blocked, return soon (B7, R7, R8).  Latched: a wake made while no wait
 * runs (also before the first, and while flush runs the loop) ends the next
 * wait; an eventfd counter or a pipe the loop watches is, libevent's
 * event_base_loopbreak is not (which wait consumes it: tr_backend_wait).
 * Where the library writes that same eventfd for its own reasons (GLib's
 * g_main_context_wakeup), wake sets a flag of the backend's own first, which
 * the wait reads and clears: a loop run that returns says nothing by itself.
 * Harmless after and during close.
 * 0, or -errno. */
int tr_backend_wake(tr_backend *b);

/* Release every kernel resource, every fd the backend opened included (B14),
 * and return 0.  When the library cannot release something (uv_loop_close
 * returns UV_EBUSY: a handle's close callback has not run), return its
 * -errno (-EBUSY): the caller's close raises it (the adapter: an OSError
 * naming tr_backend_close; the test that closed it fails), and the backend
 * counts as closed all the same.  Afterwards, whatever close returned, arm,
 * disarm, wait and flush return -ESHUTDOWN (B13); close again and wake do
 * nothing and return 0.  The handle stays valid until tr_backend_destroy,
 * which frees what close left.  After a close that returned -EBUSY, destroy
 * frees the handle but not what the library still holds (a uv_loop_t that
 * uv_loop_close refused, its handles): leak those rather than free memory
 * the library may still use.
 * libuv: uv_close is asynchronous: a handle is closed, and its memory free
 * to reuse, only when its close callback has run, in a later loop run.
 * uv_loop_close returns UV_EBUSY until every handle's close callback ran,
 * and the loop's epoll fd stays open until it succeeds (B14).  So close
 * calls uv_close on every handle (each uv_poll_t, the uv_async_t, the
 * timer; uv_walk finds them), then runs the loop (uv_run(UV_RUN_DEFAULT)
 * returns once no handle is left) and then uv_loop_close, which must
 * return 0; it frees the handles' memory in their close callbacks or
 * later, never before.  libuv knows an fd by its number: uv_poll_init on a
 * number whose old uv_poll_t is still started returns UV_EEXIST, so an arm
 * of a number whose handle is left from a closed file stops that handle
 * (uv_poll_stop, or uv_close) before it makes a new one (B5).  Keeping one
 * uv_poll_t per fd number for the backend's life instead, stopped when its
 * file's armings are dropped and started again for the file that takes the
 * number, is as correct: the handle stands for the number, the armings for
 * the file.  wake must not touch the uv_async_t once close began: a lock,
 * or a count of wakes in progress, as "Threads" above says. */
int tr_backend_close(tr_backend *b);

/* Free the handle (closing it first if needed).  Called once, when no thread
 * can call into the backend any more. */
void tr_backend_destroy(tr_backend *b);

#ifdef __cplusplus
}
#endif

#endif /* TAILREACTOR_BACKEND_H */
