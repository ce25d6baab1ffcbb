#!/usr/bin/env python3
"""The tail-latency job run as a file: ``scripts/tail-latency.sh [COMMAND] [options]`` (the console
script ``tailreactor-tail-latency``) runs the same.  The code is the tailjob package next to this file;
docs/en/options.md says which subcommand takes which option.
"""

import sys

if __name__ == "__main__":  # run as a file, its directory (scripts/ci, package tailjob) is sys.path[0]
    if {"-h", "--help"} & set(sys.argv[1:]):
        # Help needs only the standard library (scripts/tail-latency.sh --help installs nothing).
        from tailjob.options import parse

        parse(sys.argv[1:])
    from tailjob.cli import main

    sys.exit(main())
