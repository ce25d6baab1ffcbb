#!/usr/bin/env python3
"""The tail-latency job: interleaved A/B of the bench server under wrk, with verdicts.

Usage: scripts/tail-latency.sh [options]   (or: <venv>/bin/tailreactor-tail-latency, or this file)
With no options: the quick profile, --ab tail, on io_uring then epoll, then the same A/B in virtual
time (--tier sim) and a table of the two side by side.  --probe adds the latency probe of every
worker; --peers compares the bench server with asyncio, uvloop and nginx instead of an A/B.  --help
lists the options; docs/en/options.md says which mode takes which, docs/en/tail-latency-ci.md indexes
the job's pages.  The code is the tailjob package next to this file.
"""

import sys

if __name__ == "__main__":  # run as a file, its directory (scripts/ci, package tailjob) is sys.path[0]
    if {"-h", "--help"} & set(sys.argv[1:]):
        # Help needs only the standard library (scripts/tail-latency.sh --help installs nothing).
        from tailjob.options import build_parser

        build_parser().parse_args(["--help"])
    from tailjob.cli import main

    sys.exit(main())
