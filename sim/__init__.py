"""The traffic simulator: simulated KIP-848 and classic consumer groups producing contract §1 events.

What lives here: a discrete-event simulation of Kafka's group coordinator
(:mod:`.coordinator`, :mod:`.classic`) and its clients (:mod:`.clients`) with
the races real clusters have, named traffic profiles (:mod:`.profiles`),
event builders (:mod:`.emit`), writers for JSON lines, Avro and Kafka
(:mod:`.writers`), broker request-log lines (:mod:`.request_log`) and
:func:`~.run.run_simulation`, which ``fencewatch simulate`` runs.
See docs/simulator.md.

Rules of this package: deterministic for a given config (no wall clock, one
seeded RNG); imports nothing of the rules engine (``fencewatch.state``), so
its ground-truth labels are independent of the monitor they test; Kafka and
Avro libraries are imported only by the writers.
"""
