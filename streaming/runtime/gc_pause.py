"""The cyclic garbage collector paused around work that allocates many objects and no cycles."""
from __future__ import annotations

import gc
from contextlib import contextmanager


@contextmanager
def no_cyclic_gc(settle: bool = True):
    """Decoding and judging allocate millions of containers and no cycles: pause the cyclic
    collector (reference counting still frees everything) instead of letting it rescan the
    growing list of events and state again and again. In ``replay`` and in the state function its
    rescans were a large share of decoding (docs/decisions.md, "Figures that were in code
    comments").

    ``settle``: move what survives to the oldest generation afterwards (a long-lived result such
    as replay's events). Off for a call whose objects die with it (the state function, the
    router): the check it takes (``gc.get_freeze_count``) walks every frozen object, and the
    Python workers freeze their imports (``worker_daemon``), so that walk is costly there."""
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        # Objects allocated meanwhile still sit in the youngest generation, and the first
        # collection after this would scan them all at once: move them to the oldest one
        # (through the permanent generation, when nobody else uses it).
        if settle and gc.get_freeze_count() == 0:
            gc.freeze()
            gc.unfreeze()
        if was_enabled:
            gc.enable()
