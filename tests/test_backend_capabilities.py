"""Backend capabilities (tailreactor.backends.base): what each backend declares, and bad declarations."""

from __future__ import annotations

import selectors

import pytest

from tailreactor.backends import create_backend
from tailreactor.backends.base import Capabilities, capabilities
from tailreactor.backends.epoll import EpollBackend
from tailreactor.backends.selectors_backend import SelectorsBackend


class Declares:
    def __init__(self, **attrs):
        self.__dict__.update(attrs)


def test_a_backend_that_declares_nothing_promises_nothing():
    assert capabilities(object()) == Capabilities(ordered=False, max_batch=None)


@pytest.mark.parametrize(
    "attrs, says",
    [
        ({"ordered": 1}, "ordered=1: accepted True or False"),
        ({"max_batch": 0}, "max_batch=0: accepted None (no cap) or an int >= 1"),
        ({"max_batch": True}, "max_batch=True"),
        ({"max_batch": "16"}, "max_batch='16'"),
    ],
)
def test_a_malformed_declaration_names_the_attribute_value_and_what_is_accepted(attrs, says):
    with pytest.raises(ValueError, match=says.replace("(", r"\(").replace(")", r"\)")):
        capabilities(Declares(**attrs))


def test_epoll_declares_order_and_its_batch_cap():
    b = EpollBackend(max_batch=16)
    try:
        assert capabilities(b) == Capabilities(ordered=True, max_batch=16)
    finally:
        b.close()


@pytest.mark.parametrize(
    "cls, ordered",
    [(selectors.EpollSelector, True), (selectors.PollSelector, False), (selectors.SelectSelector, False)],
)
def test_selectors_declares_order_only_on_a_selector_that_keeps_it(cls, ordered):
    b = SelectorsBackend(cls)
    try:
        assert capabilities(b) == Capabilities(ordered=ordered, max_batch=None)
        assert b.selector == cls.__name__
    finally:
        b.close()


def test_io_uring_declares_order():
    try:
        b = create_backend("io_uring")
    except OSError as exc:
        pytest.skip(f"io_uring unavailable here: {exc}")
    try:
        assert capabilities(b) == Capabilities(ordered=True, max_batch=None)
    finally:
        b.close()
