"""Fixtures of the streaming tests: ``kafka_source``, the job's two Kafka readers.

``kafka_source`` (function, parametrized): ``python`` (fencewatch-kafka) and ``spark`` (Spark's
own connector, ``format("kafka")``), the values of ``streaming.kafka_source``; a test that takes
it runs once with each. The connector's jars come from ``make connector-jars`` (``make test``
fetches them first); without them the ``spark`` case fails and says how to fetch them.
"""
from __future__ import annotations

import pytest

KAFKA_SOURCES = ("python", "spark")


def connector_or_fail() -> list[str]:
    import pyspark

    from fencewatch.streaming.sources.connector import connector_jars, missing_hint

    jars = connector_jars(pyspark.__version__)
    if not jars:
        pytest.fail(missing_hint(pyspark.__version__))
    return jars


@pytest.fixture(params=KAFKA_SOURCES)
def kafka_source(request) -> str:
    if request.param == "spark":
        connector_or_fail()
    return request.param
