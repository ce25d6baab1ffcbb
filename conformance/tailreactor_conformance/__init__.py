"""tailreactor_conformance: the conformance suite any tailreactor backend or reactor must pass.

Numbered clauses (:mod:`.clauses`), a pytest plugin (:mod:`.plugin`, entry
point ``tailreactor_conformance``), the tests (``tests/``), Hypothesis
strategies and a state machine against a pure model (:mod:`.strategies`,
:mod:`.model`, :mod:`.machine`), and the runner ``tailreactor-conformance``
(:mod:`.cli`).  See docs/en/conformance.md (the tutorial) and
docs/en/conformance-reference.md (options, capabilities, clauses).
"""

from .clauses import CLAUSES, Clause, clause

__all__ = ["CLAUSES", "Clause", "clause"]
