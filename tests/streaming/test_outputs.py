"""``streaming.outputs``: a row packed by the state function reads back field for field on the
driver. ``OutRows.add`` packs its keywords by position and ``read_rows`` unpacks them into
``OutRow``'s fields: the two orders must stay the same."""
from __future__ import annotations

import inspect

from fencewatch.streaming.outputs import OutRow, OutRows, read_rows


def test_add_packs_in_outrows_field_order():
    params = list(inspect.signature(OutRows.add).parameters)[1:]  # without self
    assert params == list(OutRow._fields)


def test_every_field_reads_back_as_written():
    values = {"seq": 7, "ord": 3, "cluster": "c", "group_id": "g", "json": '{"a":1}', "alert_id": "a-1",
              "raw": b"\x00raw", "reason": "BAD", "stamps": b"\x01\x02"}
    rows = OutRows()
    rows.add("verdicts", 1_700_000_000_000, **values)
    rows.add("status", None)
    got = read_rows(rows.cols["record"], rows.cols["ts"], rows.cols["data"])
    assert got[0] == OutRow("verdicts", 1_700_000_000_000, **values)
    assert got[1] == OutRow("status") and len(rows) == 2
