"""Helpers the reactor loop clause modules (``test_loop_*.py``) share: the stand-in for a
KeyboardInterrupt or SystemExit that R21's tests raise.  Not collected: it holds no test."""

from __future__ import annotations


class Escape(BaseException):
    """Stands for KeyboardInterrupt or SystemExit: not an Exception, so it is not caught (R9)."""
