"""The shuffle (state) partitions a first start picks: the setting, else two per core it starts with."""
from __future__ import annotations

import pytest

from fencewatch.streaming.config import settings as cfgmod
from fencewatch.streaming.runtime.session import DEFAULT_CLUSTER_PARTITIONS, PARTITIONS_PER_CORE, state_partitions


@pytest.mark.parametrize("master, conf, expected", [
    ("local-cluster[3, 2, 1024]", {}, 12),
    ("spark://10.0.0.5:7077", {"spark.cores.max": "12"}, 24),
    ("k8s://https://api:6443", {"spark.executor.instances": "4", "spark.executor.cores": "3"}, 24),
    ("yarn", {"spark.executor.instances": "4"}, DEFAULT_CLUSTER_PARTITIONS),  # cores per executor unknown
    ("spark://10.0.0.5:7077", {}, DEFAULT_CLUSTER_PARTITIONS),
    ("spark://10.0.0.5:7077", {"spark.cores.max": "lots"}, DEFAULT_CLUSTER_PARTITIONS),
])
def test_unset_follows_the_cores_the_job_starts_with(master, conf, expected):
    assert state_partitions(master, None, conf) == expected


@pytest.mark.parametrize("master", ["local[2]", "local[4, 3]", "local[*]", "local"])
def test_a_local_master_takes_sparks_own_core_count(master):
    """Spark's count, not ours: ``local[*]`` in a container limited to 2 CPUs on a 64-core node is
    2 to the JVM and 64 to ``os.cpu_count``."""
    assert state_partitions(master, None, {}, 3) == 6
    assert state_partitions(master, None, {"spark.cores.max": "12"}, 3) == 6  # a cluster's setting


def test_the_session_sets_its_cores_as_the_shuffle_partitions(spark):
    """What ``spark_session`` passes for a local master: N of local[N] (the shared session is
    local[2]; its ``spark.default.parallelism`` says 2 as well), two partitions each."""
    sc = spark.sparkContext
    assert state_partitions(sc.master, None, dict(sc.getConf().getAll()), sc.defaultParallelism) == 4
    assert PARTITIONS_PER_CORE == 2


def test_a_setting_wins_over_the_cores():
    assert state_partitions("local[2]", 16, {}, 2) == 16
    assert state_partitions("spark://h:7077", 3, {"spark.cores.max": "40"}) == 3


@pytest.mark.parametrize("text", ["auto", "null", ""])
def test_config_reads_auto_as_unset(text):
    cfg = cfgmod.load_config(environ={"FENCEWATCH_STREAMING__SHUFFLE_PARTITIONS": text})
    assert cfg.streaming.shuffle_partitions is None


def test_config_refuses_zero_partitions():
    with pytest.raises(cfgmod.ConfigError, match="shuffle_partitions must be > 0"):
        cfgmod.load_config(environ={}, overrides={"streaming": {"shuffle_partitions": 0}})
