"""The shuffle (state) partitions a first start picks: the setting, else the cores it starts with."""
from __future__ import annotations

import os

import pytest

from fencewatch.streaming import config as cfgmod
from fencewatch.streaming.spark import DEFAULT_CLUSTER_PARTITIONS, state_partitions


@pytest.mark.parametrize("master, conf, expected", [
    ("local[2]", {}, 2),
    ("local[1]", {}, 1),
    ("local[4, 3]", {}, 4),  # local[N, maxFailures]
    ("local", {}, 1),
    ("local-cluster[3, 2, 1024]", {}, 6),
    ("spark://10.0.0.5:7077", {"spark.cores.max": "12"}, 12),
    ("k8s://https://api:6443", {"spark.executor.instances": "4", "spark.executor.cores": "3"}, 12),
    ("yarn", {"spark.executor.instances": "4"}, DEFAULT_CLUSTER_PARTITIONS),  # cores per executor unknown
    ("spark://10.0.0.5:7077", {}, DEFAULT_CLUSTER_PARTITIONS),
    ("spark://10.0.0.5:7077", {"spark.cores.max": "lots"}, DEFAULT_CLUSTER_PARTITIONS),
])
def test_unset_follows_the_cores_the_job_starts_with(master, conf, expected):
    assert state_partitions(master, None, conf) == expected


def test_local_star_is_this_machines_cores():
    assert state_partitions("local[*]") == (os.cpu_count() or 1)


def test_a_setting_wins_over_the_cores():
    assert state_partitions("local[2]", 16) == 16
    assert state_partitions("spark://h:7077", 3, {"spark.cores.max": "40"}) == 3


@pytest.mark.parametrize("text", ["auto", "null", ""])
def test_config_reads_auto_as_unset(text):
    cfg = cfgmod.load_config(environ={"FENCEWATCH_STREAMING__SHUFFLE_PARTITIONS": text})
    assert cfg.streaming.shuffle_partitions is None


def test_config_refuses_zero_partitions():
    with pytest.raises(cfgmod.ConfigError, match="shuffle_partitions must be > 0"):
        cfgmod.load_config(environ={}, overrides={"streaming": {"shuffle_partitions": 0}})
