"""tailreactor: a readable reference event reactor with age-based dispatch.

Public surface:

* :class:`Reactor` (:mod:`tailreactor.reactor`) -- one-shot arming, timers,
  posts, the dispatch round, age-based dispatch, counters;
* :mod:`tailreactor.backends` -- epoll, io_uring, selectors, and selection;
* :mod:`tailreactor.config` -- every ``CWIST_*`` knob, parsed strictly;
* :mod:`tailreactor.http` -- the bench HTTP server (``tailreactor-bench``).
"""

from .backends import READ, WRITE, IoUringUnavailable, UnknownBackend, create_backend
from .config import Config, ConfigError
from .reactor import Counters, Reactor

__all__ = ["Reactor", "Counters", "Config", "ConfigError", "READ", "WRITE",
           "IoUringUnavailable", "UnknownBackend", "create_backend"]
__version__ = "0.1.0"
