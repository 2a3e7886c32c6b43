"""Fixtures for the deploy/ tests.

- ``rsyslog_shipper`` (function): ``rsyslog_shipper(bootstrap, topic, request_log, **kw)`` starts
  Debian's rsyslogd on the shipped ``deploy/request-log/rsyslog-fencewatch.conf`` (see
  ``rsyslog_shipper.py``) in a per-test directory (``name=``, default ``rsyslog``; starting the
  same name again is a restart on the saved state) and stops every one after the test. Fails, not skips,
  when rsyslog-kafka is missing: ``make system-deps`` installs it.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from fencewatch.streaming.brokers.rsyslog import RsyslogShipper, start_rsyslog_shipper


@pytest.fixture
def rsyslog_shipper(tmp_path: Path) -> Iterator[Callable[..., RsyslogShipper]]:
    started: list[RsyslogShipper] = []

    def start(bootstrap: str, topic: str, request_log: Path, *, name: str = "rsyslog", **kw) -> RsyslogShipper:
        # the same name reuses the state directory: a restart resumes at the saved file position
        shipper = start_rsyslog_shipper(bootstrap, topic, request_log, tmp_path / name, **kw)
        started.append(shipper)
        return shipper

    yield start
    for shipper in started:
        shipper.stop()
