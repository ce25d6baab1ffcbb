"""Round budget (mid-round submit of queued re-arms) and drain chunk (posts inside a batch)."""

from __future__ import annotations

from tailreactor import READ


def _long_round(make_reactor, clock, socketpairs, budget_us, n=4, callback_us=800):
    """n ready fds; every callback re-arms its fd and takes callback_us of reactor-clock time."""
    r = make_reactor(clock=clock, round_budget_us=budget_us, tail_us=0)
    pairs = socketpairs(n)

    def cb(ev):
        r.arm(ev.fd, READ, lambda e: None)
        clock.advance_us(callback_us)

    for a, b in pairs:
        r.arm(a.fileno(), READ, cb)
        b.send(b"x")
    assert r.run_once(1.0) == n
    return r


def test_round_budget_submits_rearms_mid_round(make_reactor, clock, socketpairs, backend_name):
    # 4 callbacks x 800 us: the budget of 1000 us is passed before the 3rd delivery.
    r = _long_round(make_reactor, clock, socketpairs, budget_us=1000)
    if backend_name == "io_uring":
        # Deliveries at 0, 800, 1600, 2400 us: at 1600 the round is past its 1000 us budget and the
        # re-arms of callbacks 1-2 are submitted; the next submit is due a budget later (2600).
        assert r.counters.round_budget_flushes == 1
        assert r.backend.flushes == 1
    else:
        # epoll arms synchronously (one epoll_ctl per arm): nothing is ever queued.
        assert r.counters.round_budget_flushes == 0


def test_round_budget_zero_never_flushes(make_reactor, clock, socketpairs):
    r = _long_round(make_reactor, clock, socketpairs, budget_us=0)
    assert r.counters.round_budget_flushes == 0
    assert getattr(r.backend, "flushes", 0) == 0


def test_short_round_does_not_flush(make_reactor, clock, socketpairs):
    r = _long_round(make_reactor, clock, socketpairs, budget_us=100_000)
    assert r.counters.round_budget_flushes == 0


def _batch_with_post(make_reactor, socketpairs, chunk, n=256):
    r = make_reactor(drain_chunk=chunk, tail_us=0)
    pairs = socketpairs(n)
    order: list[str] = []
    posted = []

    def cb(ev):
        order.append("io")
        if not posted:
            posted.append(1)
            r.post(lambda _: order.append("post"))

    for a, b in pairs:
        r.arm(a.fileno(), READ, cb)
        b.send(b"x")
    ran = r.run_once(1.0)
    assert ran == n, f"expected one batch of {n}, got {ran}"
    return r, order


def test_drain_chunk_runs_post_within_chunk(make_reactor, socketpairs):
    r, order = _batch_with_post(make_reactor, socketpairs, chunk=8)
    assert "post" in order
    assert order.index("post") == 8  # after the 8th callback: the first drain-chunk point
    assert r.counters.drain_chunk_drains == 1


def test_drain_chunk_zero_runs_post_next_round(make_reactor, socketpairs):
    r, order = _batch_with_post(make_reactor, socketpairs, chunk=0)
    assert "post" not in order
    r.run_once(0)
    assert order[-1] == "post" and order.count("io") == 256
    assert r.counters.drain_chunk_drains == 0


def test_round_budget_flushes_at_most_once_per_budget_interval(
    make_reactor, clock, socketpairs, backend_name
):
    """A long round submits its re-arms about every budget, not after every callback once late:
    20 callbacks x 800 us = 16 ms of round with a 1000 us budget gives 9 submits, not 18."""
    r = _long_round(make_reactor, clock, socketpairs, budget_us=1000, n=20)
    if backend_name == "io_uring":
        assert r.counters.round_budget_flushes == 9
    else:
        assert r.counters.round_budget_flushes == 0
