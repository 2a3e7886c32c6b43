"""The rules of fencewatch: what Kafka's group coordinator would decide (docs/contract.md).

What lives here: the assignment model (contract §2), commit judging (§3), offset
expiry (§4), truncation (§5), transactions (§6), sticky claims (§7), and the
alerts, status and metrics summary the outputs (§8) are made of. ``README.md``
in this folder maps each rule to the one function that decides it.

Rules of this package (h11-style, sans-I/O):
- imports only the standard library and other ``fencewatch.state`` modules:
  no pyspark, pandas, confluent_kafka, prometheus_client; no clock reads, no
  logging; time is the event's ``ts`` and problems are returned as alerts;
- the rules (``assignment``, ``fencing``, ``judging``, ``expiry``,
  ``truncation``, ``sticky``, ``spike``) are pure functions over frozen values;
  the group aggregate (``group.Group``) and the truncation watch are
  mutable and updated in place by their transitions (copying them per event
  cost more than the judging: docs/decisions.md);
- odd but well-typed input never raises.
"""
