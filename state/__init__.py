"""The rules of fencewatch: what Kafka's group coordinator would decide.

What lives here: the assignment model (SPEC 2), the commit policies and
classification (SPEC 3), offset expiry (SPEC 4), truncation (SPEC 5),
transactional fencing (SPEC 6), sticky claims (SPEC 7) and alert construction.

Rules of this package (h11-style, sans-I/O):
- imports only the standard library and other ``fencewatch.state`` modules:
  no pyspark, pandas, confluent_kafka, prometheus_client; no clock reads, no
  logging — time is the event's ``ts`` and problems are returned as alerts;
- transitions take state and an event and return new state (or the same
  object when nothing changed) plus outputs;
- odd but well-typed input never raises; an exception here means a broken
  invariant (:class:`fencewatch.state.model.InvariantViolation`).
"""
