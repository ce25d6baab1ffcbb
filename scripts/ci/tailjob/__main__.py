"""``tailreactor-tail-latency`` (and ``python -m tailjob``): the job, once its extra is installed.

The ``job`` extra (numpy, scipy, matplotlib, rich) is checked before the job is imported: without it,
one line naming the ``pip install`` and exit 3, not a traceback.  ``--help`` answers without it.
"""

import sys

from . import PROG


def main() -> int:
    if {"-h", "--help"} & set(sys.argv[1:]):  # the parser needs only the standard library
        from .options import parse

        parse(sys.argv[1:])  # prints the help and exits 0
    # Imported here, not above: the sim tier's spawned workers import this module again, and with
    # --a-ref a worker must import tailreactor only after refcode.use has chosen arm A's code.
    from tailreactor.extras import require

    require("job", "tailreactor-tail-latency")
    from .cli import main as run

    try:
        return run()
    except KeyboardInterrupt:  # Ctrl-C: the servers and load are stopped by then (their finally blocks)
        print(f"{PROG}: interrupted", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())
