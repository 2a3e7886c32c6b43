"""``streaming.outputs``: a row packed by the state function reads back field for field on the
driver. ``OutRows.add`` packs its keywords by position and ``read_rows`` unpacks them into
``OutRow``'s fields: the two orders must stay the same."""
from __future__ import annotations

import inspect

from fencewatch.streaming.runtime.outputs import OutRow, OutRows, read_rows


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


def test_state_fn_frame_converts_to_the_output_schema_and_reads_back():
    """The state function's frame (one block of object columns) as pyspark hands it to Arrow:
    column by column with the OUTPUT types; nulls stay nulls, ints stay exact, bytes stay bytes."""
    import pyarrow as pa
    from pyspark.sql.pandas.types import to_arrow_schema

    from fencewatch.streaming.runtime.columns import OUTPUT
    from fencewatch.streaming.runtime.state_fn import OUTPUT_COLUMNS, _frame

    rows = OutRows()
    # Trailing NUL bytes (an int64 LE stamp ends in them) must survive: numpy's "S" dtype drops them.
    rows.add("verdicts", 2**62 + 1, seq=5, ord=2, cluster="c", group_id="g", raw=b"\x00lines\x00",
             stamps=(1_795_779_125_104).to_bytes(8, "little"))
    rows.add("status", None, cluster="c", group_id="g", json='{"members":3}')
    rows.add("dlq", None, 9, json="t/0/1", raw=b"\xff", reason="FIELD_TOO_LONG(x)")
    pdf = _frame(rows.cols)
    assert list(pdf.columns) == OUTPUT_COLUMNS and all(str(t) == "object" for t in pdf.dtypes)
    types = {f.name: f.type for f in to_arrow_schema(OUTPUT)}
    arrays = {c: pa.Array.from_pandas(pdf[c], type=types[c]) for c in OUTPUT_COLUMNS}
    assert arrays["ts"].to_pylist() == [2**62 + 1, None, None]  # not through float64
    assert read_rows(*(arrays[c].to_pylist() for c in OUTPUT_COLUMNS)) == read_rows(
        rows.cols["record"], rows.cols["ts"], rows.cols["data"])
    assert pdf["data"].tolist() == rows.cols["data"] and pdf["data"].tolist()[0].endswith(b"\x00")
    assert len(_frame({c: [] for c in OUTPUT_COLUMNS})) == 0
