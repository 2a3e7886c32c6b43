"""A small sticky server-side assignor for the simulated coordinator.

What lives here: :func:`sticky_assign`, a deterministic stand-in for Kafka's
``UniformAssignor`` on homogeneous subscriptions: balanced (every member gets
``floor(n/m)`` or ``ceil(n/m)`` partitions) and sticky (a member keeps as many
of its previous target partitions as its quota allows). The simulator only
needs an assignor whose moves look like Kafka's -- few partitions move per
rebalance, and a moved partition goes to one new member -- not Kafka's exact
choices.

May import: the standard library only.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence

__all__ = ["sticky_assign"]


def sticky_assign(
    member_ids: Sequence[str],
    partitions: Iterable[int],
    previous: Mapping[str, Iterable[int]],
) -> dict[str, set[int]]:
    """Return member -> partitions covering every partition exactly once.

    ``member_ids`` is in join order; ties are broken by that order so the
    result is a pure function of the arguments (the simulator is seeded).
    """
    all_partitions = sorted(set(partitions))
    if not member_ids:
        return {}
    count = len(member_ids)
    base, extra = divmod(len(all_partitions), count)
    valid = set(all_partitions)
    # Members that held more before get the ceil quotas first: fewer moves.
    order = sorted(
        range(count),
        key=lambda i: (-len(set(previous.get(member_ids[i], ())) & valid), i),
    )
    quota = {member_ids[i]: base + (1 if rank < extra else 0) for rank, i in enumerate(order)}
    result: dict[str, set[int]] = {m: set() for m in member_ids}
    taken: set[int] = set()
    for member_id in member_ids:
        kept = sorted(set(previous.get(member_id, ())) & valid)
        for p in kept[: quota[member_id]]:
            if p not in taken:
                result[member_id].add(p)
                taken.add(p)
    free = iter(p for p in all_partitions if p not in taken)
    for member_id in member_ids:
        need = quota[member_id] - len(result[member_id])
        for _ in range(need):
            result[member_id].add(next(free))
    return result
