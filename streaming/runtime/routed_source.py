"""``run --source events`` on our own Kafka source: the router applied inside the source's ``read``.

The query's first stage was a Python source (``fencewatch-kafka``) yielding Spark's Kafka rows,
a JVM projection building each record's event id and coordinates, then the router in a
``mapInPandas``: every record crossed Python -> JVM -> Python once more, ~700 bytes of JSON
converted between Arrow and JVM rows on the way, to come out as one pickled row per key.
``fencewatch-routed`` reads the same offsets with the same options and admission control, and
hands the records of each read batch straight to the router (``routing.route_records``), so the
JVM only sees the routed rows (one per key per read batch; docs/decisions.md, "The Kafka source
and pacing").

Used when the job reads through ``fencewatch-kafka`` (Spark's own connector keeps the
``mapInPandas`` router) and no Schema Registry decoder is configured.
"""
from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any, Iterator, Mapping

from fencewatch.streaming.runtime.input_plan import OTHER
from fencewatch.streaming.sources.kafka.consumer import read_split
from fencewatch.streaming.sources.kafka.datasource import KafkaBatchReader, KafkaDataSource, KafkaStreamReader
from fencewatch.streaming.sources.kafka.options import parse_options

NAME = "fencewatch-routed"
ROUTER_OPTION = "fencewatch.router"  # JSON: topics -> (source name, seq rank), input format, schema ids


@dataclass(frozen=True)
class RouterSpec:
    """What ``read`` needs to route a topic-partition's records (pickled to the executors)."""

    topics: tuple[tuple[str, str, int], ...]  # input_plan.topic_ranks: (topic, source name, rank in seq)
    input_format: str = "json"
    schema_ids: tuple[int, ...] = (1,)
    group_buckets: int = 0  # streaming.group_buckets, as the checkpoint froze it

    def to_option(self) -> str:
        return json.dumps({"topics": self.topics, "input_format": self.input_format,
                           "schema_ids": self.schema_ids, "group_buckets": self.group_buckets})

    @classmethod
    def from_option(cls, text: str) -> "RouterSpec":
        d = json.loads(text)
        return cls(tuple(tuple(t) for t in d["topics"]), d["input_format"], tuple(d["schema_ids"]),
                   int(d.get("group_buckets", 0)))


class _Router:
    """The builder's records -> one Arrow batch of ROUTED rows (or None when nothing routed)."""

    def __init__(self, spec: RouterSpec) -> None:
        from fencewatch.streaming.runtime.routing import make_checker

        self.names = {t: (source, rank) for t, source, rank in spec.topics}
        self.check = make_checker(spec.input_format, spec.schema_ids)
        self.group_buckets = spec.group_buckets

    def __call__(self, builder) -> Any:
        from fencewatch.streaming.runtime.routing import arrow_batch, route_records

        topic, part = builder.topic, builder.partition
        source, rank = self.names.get(topic, OTHER)
        # (librdkafka timestamp type, ms): type 0 is "none" (the JVM path gave a null there). The
        # coordinates are made from the event id by the router, only for a record that needs them.
        prefix = f"{topic}/{part}/"
        records = ((value, offset * 4 + rank, prefix + str(offset), None, source, ms if kind else None, None)
                   for value, offset, (kind, ms) in zip(builder.values, builder.offsets, builder.stamps))
        cols = route_records(records, self.check, bool(builder.caught_up), self.group_buckets)
        builder.clear()
        if not cols["key"]:
            return None
        return arrow_batch(cols)


class _RoutesInRead:
    """``read`` hands each batch of records to the router; the router's spec travels with the
    reader when Spark pickles it to the executors (the router itself is built there, once)."""

    def _with_router(self, router: RouterSpec) -> None:
        self._router_spec = router
        self._router: _Router | None = None

    def __getstate__(self) -> dict[str, Any]:
        return {"_options": self._options, "_router_spec": self._router_spec}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__init__(state["_options"], state["_router_spec"])  # type: ignore[misc]

    def read(self, partition) -> Iterator[Any]:
        if self._router is None:
            self._router = _Router(self._router_spec)
        return read_split(partition, flush=self._router)


class RoutedStreamReader(_RoutesInRead, KafkaStreamReader):
    """``fencewatch-kafka``'s planning (offsets, limits, caught-up marks); ``read`` routes."""

    def __init__(self, options, router: RouterSpec) -> None:
        KafkaStreamReader.__init__(self, options)
        self._with_router(router)


class RoutedBatchReader(_RoutesInRead, KafkaBatchReader):
    """``spark.read``: ``[startingOffsets, endingOffsets)`` as ``fencewatch-kafka`` plans it, routed."""

    def __init__(self, options, router: RouterSpec) -> None:
        KafkaBatchReader.__init__(self, options)
        self._with_router(router)


class RoutedKafkaSource(KafkaDataSource):
    """``format("fencewatch-routed")``: ``fencewatch-kafka``'s options plus ``fencewatch.router``."""

    @classmethod
    def name(cls) -> str:
        return NAME

    def __init__(self, options: Mapping[str, str]) -> None:
        rest = {k: v for k, v in options.items() if k != ROUTER_OPTION}
        super().__init__(rest)
        self._router = RouterSpec.from_option(options[ROUTER_OPTION])

    def schema(self):
        from fencewatch.streaming.runtime.columns import ROUTED

        return ROUTED

    def streamReader(self, schema):
        return RoutedStreamReader(self._parsed, self._router)

    def reader(self, schema):
        parsed = self._parsed if self._parsed.ending_offsets is not None else \
            parse_options(self.options, streaming=False)
        return RoutedBatchReader(parsed, self._router)


def read_routed_stream(spark, *, bootstrap: str, topics: list[str], router: RouterSpec,
                       options: Mapping[str, str]):
    """The routed rows (``schemas.ROUTED``) of ``topics``, read with ``fencewatch-kafka``'s options."""
    merged = {str(k): str(v) for k, v in options.items()}
    merged.update({"kafka.bootstrap.servers": bootstrap, "subscribe": ",".join(topics),
                   ROUTER_OPTION: router.to_option()})
    parse_options({k: v for k, v in merged.items() if k != ROUTER_OPTION}, streaming=True)  # our messages
    spark.dataSource.register(RoutedKafkaSource)
    return spark.readStream.format(NAME).options(**merged).load()
