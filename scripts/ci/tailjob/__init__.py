"""tailjob: the tail-latency CI job behind ``scripts/ci/tail_latency.py``.

One module per job:

* :mod:`tailjob.plan` -- profiles (quick, seed, high), A/B arms, legs, the
  randomised interleaved (RMIT) schedule;
* :mod:`tailjob.server` -- start/stop the bench server, wait until it listens;
* :mod:`tailjob.procstat` -- CPU accounting from ``/proc`` (server process tree,
  machine busy time, wrk's rusage);
* :mod:`tailjob.wrk` -- the wrk command line and the parser of its output
  (``TAILREACTOR_METRICS`` line printed by ``scripts/ci/tail_latency.lua``);
* :mod:`tailjob.runner` -- one measured run and the whole job loop;
* :mod:`tailjob.stats` -- medians, B/A ratios, bootstrap CI, verdicts;
* :mod:`tailjob.report` -- the Markdown report;
* :mod:`tailjob.plot` -- percentile-spectrum plot (SVG, PNG);
* :mod:`tailjob.history` -- provenance, per-job JSON, the JSONL history line;
* :mod:`tailjob.progress` -- progress display (rich);
* :mod:`tailjob.options` -- the options (``--help`` without the job's dependencies);
* :mod:`tailjob.cli` -- command-line interface.
"""
