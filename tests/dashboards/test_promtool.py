"""promtool check/test the shipped alert rules (needs Debian's prometheus package; `make system-deps`)."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

PROM = Path(__file__).resolve().parents[2] / "dashboards" / "prometheus"
RULES = PROM / "rules" / "fencewatch.rules.yml"
TESTS = PROM / "tests" / "fencewatch.rules.test.yml"


@pytest.fixture(scope="module")
def promtool() -> str:
    path = shutil.which("promtool")
    assert path, "promtool not found: install Debian's prometheus package (`make system-deps`)"
    return path


def run(*args: str, cwd: Path | None = None) -> subprocess.CompletedProcess:
    return subprocess.run(args, capture_output=True, text=True, cwd=cwd)


def test_check_rules(promtool):
    result = run(promtool, "check", "rules", str(RULES))
    assert result.returncode == 0, result.stdout + result.stderr
    assert "SUCCESS: 16 rules found" in result.stdout


def test_check_example_config(promtool):
    result = run(promtool, "check", "config", str(PROM / "prometheus.yml"))
    assert result.returncode == 0, result.stdout + result.stderr


def test_rule_unit_tests_pass(promtool):
    result = run(promtool, "test", "rules", str(TESTS))
    assert result.returncode == 0, result.stdout + result.stderr


def test_every_alert_has_a_firing_and_a_silent_case():
    text = TESTS.read_text()
    rules = [line.split(":", 1)[1].strip() for line in RULES.read_text().splitlines() if line.strip().startswith("- alert:")]
    for alert in rules:
        assert f"alertname: {alert}\n        exp_alerts: []" in text, f"{alert}: no case where it stays silent"
        assert f"alertname: {alert}\n        exp_alerts:\n" in text, f"{alert}: no case where it fires"


@pytest.mark.parametrize(
    "original, broken",
    [
        ("increase(fencewatch_zombie_commits_total[5m])) > 0", "increase(fencewatch_zombie_commits_total[5m])) > 5"),
        ("* 60 > 20", "* 60 > 0"),  # the fencing floor
        ("keep_firing_for: 10m", "keep_firing_for: 0s"),  # the anti-flapping hold
        ("- time() < 3600", "- time() < 60"),
        ("[5m])) * 60 > 200", "[5m])) * 60 > 0"),  # the broker commit floor (partitions/min)
        ('request=~"OffsetCommit|TxnOffsetCommit",error=~"STALE_MEMBER_EPOCH|ILLEGAL_GENERATION"}',
         'request=~"OffsetCommit|TxnOffsetCommit",error!="NONE"}'),  # other errors must not count
        ("unless\n                sum without (error)", "and\n                sum without (error)"),  # a lazily created meter
        ("fencewatch_input_lag_records > 1000000", "fencewatch_input_lag_records > 1000000000"),
        ("and on (instance) fencewatch_up == 1", "and on (instance) fencewatch_up >= 0"),
        # the bridge serves build_info too: the job gone, the bridge alive must still fire
        ("absent(fencewatch_up) or", "absent(fencewatch_build_info) or"),
        ('absent(fencewatch_bridge_up) or up{job="fencewatch-bridge"} == 0',
         'absent(fencewatch_bridge_up) or up{job="fencewatch-bridge"} < 0'),
    ],
    ids=["zombie-threshold", "spike-floor", "spike-hysteresis", "expiry-window", "broker-floor",
         "broker-errors", "broker-lazy-meter", "input-lag", "input-stalled-needs-up",
         "absent-on-a-shared-series", "bridge-target-down"],
)
def test_unit_tests_catch_a_broken_rule(promtool, tmp_path, original, broken):
    """The rule tests bite: weakening a rule makes `promtool test rules` fail."""
    text = RULES.read_text()
    assert original in text
    (tmp_path / "rules").mkdir()
    (tmp_path / "rules" / RULES.name).write_text(text.replace(original, broken))
    (tmp_path / "tests").mkdir()
    shutil.copy(TESTS, tmp_path / "tests" / TESTS.name)
    result = run(promtool, "test", "rules", str(tmp_path / "tests" / TESTS.name))
    assert result.returncode != 0, f"rule tests still pass with {broken!r}"
