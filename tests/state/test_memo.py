"""The bounded memo tables: a value is kept until the table is full, then the table starts over."""
from fencewatch.state.memo import Memo


def test_memo_keeps_values_until_full_then_starts_over():
    m = Memo(3)
    assert [m.put(k, k * 10) for k in (1, 2, 3)] == [10, 20, 30]
    assert m.get(2) == 20 and len(m) == 3
    assert m.put(4, 40) == 40
    assert dict(m) == {4: 40}  # emptied, not grown past its limit
    assert m.get(1) is None
