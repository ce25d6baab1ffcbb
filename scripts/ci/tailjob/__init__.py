"""tailjob: the tail-latency CI job behind ``scripts/tail-latency.sh``.

The flow, the same for an A/B, a calibration and the ``--peers`` comparison::

    cli.main --> a Job: plan (plan, workloads) --> runner.run_trials(legs, design, settings)
                     for each leg:  design.plan(leg)                          plan
                                    warm-up, then every trial's arms in order  interleave
                                    design.measure.run(RunPlan) -> RunRecord   measure, flag
                                    design.decide(leg result)                  decide
                 --> report / peersreport / calibrate (Markdown), plot, history (JSON, JSONL)

* :mod:`tailjob.metrics` -- **the metric table** (one row per compared figure:
  unit, how it is computed, minimum effect, which way is better); the
  percentiles wrk's script and the load client record, the per-class and the
  peers columns, the report columns all come from it;
* :mod:`tailjob.measure` -- **the measure interface**.  A tier is any object
  with ``name`` and ``run(plan: RunPlan) -> RunRecord``: given the plan of one
  run of one arm (leg, the server's environment, trial, position, offered load,
  settings) it returns the run's record (``metrics``: one value per row of the
  table; ``flags``).  :data:`~tailjob.measure.WRK` (closed loop) and
  :data:`~tailjob.measure.LOAD_CLIENT` (open loop, :mod:`tailjob.loadgen`) run
  the real server; another tier (virtual time, instruction counts) plugs in as
  ``ABDesign(..., tier=...)`` / ``run_job(..., tier=...)``;
* :mod:`tailjob.runner` -- **the trial loop** (:func:`~tailjob.runner.run_trials`)
  and the A/B design (verdicts per metric); :mod:`tailjob.peersjob` the peers
  design; :mod:`tailjob.calibrate` a series of A/B legs (A/A, injected slowdowns);
* :mod:`tailjob.workloads` -- **the workloads**, each one definition (client
  classes, server settings, default rate), a user's own traffic (a TOML file or
  ``--class`` options), and the load plan;
* :mod:`tailjob.plan` -- profiles, arms, legs, the randomised interleaved schedule;
* :mod:`tailjob.server`, :mod:`tailjob.peers`, :mod:`tailjob.procstat`,
  :mod:`tailjob.wrk`, :mod:`tailjob.loadgen`, :mod:`tailjob.probeleg` -- what a
  tier runs: servers, CPU accounting, wrk and its output, the load client, the probe files;
* :mod:`tailjob.stats`, :mod:`tailjob.pooled` -- medians, ratios, bootstrap intervals, verdicts;
* :mod:`tailjob.report`, :mod:`tailjob.peersreport`,
  :mod:`tailjob.plot`, :mod:`tailjob.history`, :mod:`tailjob.progress` -- the outputs;
* :mod:`tailjob.options` (``--help`` without the job's dependencies), :mod:`tailjob.cli` (``main``).
"""
