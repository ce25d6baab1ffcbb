"""python -m tailreactor_conformance: the same as the tailreactor-conformance command."""

from .cli import main

raise SystemExit(main())
