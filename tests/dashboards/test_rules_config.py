"""The alert-rule generator's settings (dashboards/rules.py): what an operator sets reaches the
rules, bad settings are refused with a message naming them, and every variant loads in promtool."""

from __future__ import annotations

import shutil
import subprocess

import pytest
import yaml

from fencewatch.dashboards import rules


def alerts(text: str) -> dict[str, dict]:
    return {r["alert"]: r for g in yaml.safe_load(text)["groups"] for r in g["rules"]}


def promtool_check(tmp_path, text: str) -> None:
    promtool = shutil.which("promtool")
    assert promtool, "promtool not found: install Debian's prometheus package (`make system-deps`)"
    path = tmp_path / "custom.rules.yml"
    path.write_text(text)
    result = subprocess.run([promtool, "check", "rules", str(path)], capture_output=True, text=True)
    assert result.returncode == 0, result.stdout + result.stderr


def test_settings_from_file_and_set_reach_every_rule(tmp_path, capsys):
    settings = tmp_path / "alerting.yaml"
    settings.write_text("fencing_spike_floor_per_min: 30\nfencing_spike_window: 10m\n"
                        "kafka_selector: 'job=\"kafka\", env=\"prod\"'\nbroker_commit_fencing_floor_per_min: 1000\n")
    out = tmp_path / "rules.yml"
    assert rules.main(["--config", str(settings), "--set", "runbook_base_url=https://wiki.example.com/fw/alerts",
                       "--set", "fencing_spike_multiple=5", "--out", str(out)]) == 0
    text = out.read_text()
    by_name = alerts(text)
    spike = by_name["FencewatchFencingSpike"]["expr"]
    assert "* 60 > 30" in spike and "> 5 * sum" in spike and "[10m]" in spike and "offset 10m" in spike
    assert "* 60 > 1000" in by_name["FencewatchBrokerCommitFencing"]["expr"]
    assert 'kafka_network_requestmetrics_errors_total{job="kafka", env="prod",request=' in by_name["FencewatchBrokerMemberFencing"]["expr"]
    assert {r["annotations"]["runbook_url"] for r in by_name.values()} == {
        f"https://wiki.example.com/fw/alerts#{name.lower()}" for name in by_name}
    promtool_check(tmp_path, text)


def test_the_stalled_input_rule_can_be_switched_off():
    assert "FencewatchInputStalled" in alerts(rules.render())
    assert "FencewatchInputStalled" not in alerts(rules.render(rules.load(overrides={"input_stale_after_s": "0"})))


def test_the_reference_settings_file_loads_back_to_the_defaults(tmp_path):
    path = tmp_path / "alerting.yaml"
    path.write_text(rules.defaults_yaml())
    assert rules.load(path) == rules.AlertRulesConfig()


@pytest.mark.parametrize(
    "overrides, message",
    [
        ({"fencing_spike_flor_per_min": "3"}, "unknown setting(s) fencing_spike_flor_per_min"),
        ({"runbook_base_url": "ftp://wiki/alerts.md"}, "runbook_base_url must be an absolute"),
        ({"runbook_base_url": "docs/alerts.md#x"}, "runbook_base_url must be an absolute"),
        ({"fencing_spike_window": "5 minutes"}, "fencing_spike_window must be a Prometheus duration"),
        ({"input_lag_records": "-1"}, "input_lag_records must be a number >= 0"),
        ({"input_lag_records": "many"}, "input_lag_records must be a number >= 0"),
        ({"kafka_selector": "job=kafka"}, "kafka_selector must be label matchers"),
    ],
)
def test_bad_settings_are_refused_with_their_name(overrides, message, caplog):
    with pytest.raises(rules.AlertRulesConfigError, match=message.replace("(", r"\(").replace(")", r"\)")):
        rules.load(overrides=overrides)
    args = [a for k, v in overrides.items() for a in ("--set", f"{k}={v}")]
    assert rules.main(args) == 2
    assert message.split(" must")[0] in caplog.text


def test_the_runbook_base_url_flag_changes_every_runbook_url(tmp_path):
    out = tmp_path / "rules.yml"
    assert rules.main(["--runbook-base-url", "https://git.example.com/fw/docs/alerts.md", "--out", str(out)]) == 0
    by_name = alerts(out.read_text())
    assert {r["annotations"]["runbook_url"] for r in by_name.values()} == {
        f"https://git.example.com/fw/docs/alerts.md#{name.lower()}" for name in by_name}
    assert {r["annotations"]["runbook_url"] for r in alerts(rules.render()).values()} == {
        f"docs/alerts.md#{name.lower()}" for name in by_name}, "the default: the repository path"


def test_the_bridge_rule_can_be_switched_off():
    assert "FencewatchBridgeAbsent" in alerts(rules.render())
    assert "FencewatchBridgeAbsent" not in alerts(rules.render(rules.load(overrides={"bridge_job": ""})))
