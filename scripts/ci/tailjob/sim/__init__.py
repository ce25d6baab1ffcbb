"""The virtual-time tier of the tail-latency job (``scripts/tail-latency.sh --tier sim``).

The real :class:`tailreactor.Reactor` on a real backend (epoll, io_uring,
selectors) serves the real bench connections (:mod:`tailreactor.http`) over
socketpairs, loaded by the job's client classes and schedules
(:mod:`tailjob.loadgen`, :mod:`tailjob.workloads`); only time is virtual.  A
simulated run's figures are a function of (code, knobs, workload, seed, cost
model): the machine's load cannot move them.

* :mod:`tailjob.sim.costs` -- the cost model: what each unit of server work
  costs in virtual time, every constant with where it came from;
* :mod:`tailjob.sim.engine` -- one simulated run (:func:`engine.simulate`);
* :mod:`tailjob.sim.measure` -- :class:`~tailjob.sim.measure.SimMeasure`, the tier behind the trial
  loop's measure interface (:mod:`tailjob.measure`), for ``ab --tier sim`` and the sweep alike;
* :mod:`tailjob.sim.cli` -- ``--tier sim`` of the job's command line;
* :mod:`tailjob.sim.answer` -- the main job's answer: the sim tier beside the live run.
"""
