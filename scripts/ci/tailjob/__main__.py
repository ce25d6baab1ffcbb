"""``tailreactor-tail-latency`` (and ``python -m tailjob``): the job, once its extra is installed.

The ``job`` extra (numpy, scipy, matplotlib, rich) is checked before the job is imported: without it,
one line naming the ``pip install`` and exit 3, not a traceback.
"""

import sys

from tailreactor.extras import require


def main() -> int:
    require("job", "tailreactor-tail-latency")
    from .cli import main as run

    return run()


if __name__ == "__main__":
    sys.exit(main())
