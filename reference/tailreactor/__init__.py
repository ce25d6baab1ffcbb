"""tailreactor: a readable reference event reactor with age-based dispatch.

Public surface:

* :class:`Reactor` (:mod:`tailreactor.reactor`) -- one-shot arming, timers,
  posts, the dispatch round, age-based dispatch, counters;
* :mod:`tailreactor.backends` -- epoll, io_uring, selectors, and selection;
* :mod:`tailreactor.config` -- every ``CWIST_*`` knob, parsed strictly;
* :mod:`tailreactor.http` -- the bench HTTP server (``tailreactor-bench``).

The names below are imported lazily (PEP 562), so ``python -m
tailreactor.config`` runs the config module once, as ``__main__``, instead of
also finding it already imported by this package.
"""

from importlib import import_module

_EXPORTS = {
    "Reactor": "reactor",
    "Counters": "state",
    "Config": "config",
    "ConfigError": "config",
    "READ": "backends",
    "WRITE": "backends",
    "IoUringUnavailable": "backends",
    "UnknownBackend": "backends",
    "create_backend": "backends",
}

__all__ = list(_EXPORTS)
__version__ = "0.1.0"


def __getattr__(name):
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'tailreactor' has no attribute {name!r}")
    value = getattr(import_module(f".{module}", __name__), name)
    globals()[name] = value
    return value
