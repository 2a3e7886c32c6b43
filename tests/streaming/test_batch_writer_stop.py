"""A stop falls between micro-batches: the batch writer's gate (no Spark; the batch body is a
stand-in that blocks, to hold a batch "running" while the stop is asked)."""
from __future__ import annotations

import threading

import pytest

from fencewatch.streaming.config.settings import Config
from fencewatch.streaming.runtime.writer import BatchWriter, StopRequested


class SlowWriter(BatchWriter):
    """Each batch writes until ``release`` is set, then records itself as written."""

    def __init__(self):
        super().__init__(Config())
        self.started, self.release, self.written = threading.Event(), threading.Event(), []

    def _write_batch(self, df, batch_id):
        self.started.set()
        self.release.wait(10)
        self.written.append(batch_id)


def test_close_waits_for_the_running_batch_then_refuses_the_next():
    w = SlowWriter()
    t = threading.Thread(target=w, args=(None, 7))
    t.start()
    assert w.started.wait(5)
    closer = threading.Thread(target=lambda: setattr(w, "ended", w.close(5)))
    closer.start()
    closer.join(0.3)
    assert closer.is_alive(), "close returned while batch 7 was still writing"
    w.release.set()
    closer.join(5)
    t.join(5)
    assert w.ended is True and w.written == [7]
    with pytest.raises(StopRequested, match="micro-batch 8 not written"):
        w(None, 8)
    assert w.written == [7]


def test_close_gives_up_after_its_timeout_and_still_refuses_later_batches():
    w = SlowWriter()
    t = threading.Thread(target=w, args=(None, 1))
    t.start()
    assert w.started.wait(5)
    assert w.close(0.2) is False
    w.release.set()
    t.join(5)
    with pytest.raises(StopRequested):
        w(None, 2)
    assert w.written == [1]


def test_an_open_writer_writes_every_batch():
    w = SlowWriter()
    w.release.set()
    for b in range(3):
        w(None, b)
    assert w.written == [0, 1, 2]
