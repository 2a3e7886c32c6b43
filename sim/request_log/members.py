"""What the encoder remembers of each member: the broker's view as the lines showed it, and its client id.

What lives here: :class:`Member` and :class:`Members`, the table both line
builders share (heartbeats update it; commits take their client id from it).
Client ids are the Java default ``consumer-<group>-<n>``, numbered per group
in order of first appearance.
"""

from __future__ import annotations

from collections import Counter


class Member:
    """What the encoder remembers of one KIP-848 member (the broker's view, as the lines showed it)."""

    __slots__ = ("epoch", "assigned", "pending", "owned_sent", "instance_id", "subscribed", "client_id", "joined")

    def __init__(self, client_id: str) -> None:
        self.epoch = 0
        self.assigned: tuple = ()  # ((topic, partition), ...) sorted, as last delivered
        self.pending: tuple = ()
        self.owned_sent: tuple | None = None  # last topicPartitions sent
        self.instance_id: str | None = None
        self.subscribed: list[str] | None = None
        self.client_id = client_id
        self.joined = False


class Members(dict):
    """``(group id, member id) -> Member``: a dict, so membership tests on the commit path stay lookups."""

    def __init__(self) -> None:
        super().__init__()
        self._clients_per_group: Counter = Counter()

    def member(self, group_id: str, member_id: str) -> Member:
        """The member's record, created with the Java default ``client.id`` ``consumer-<group>-<n>``."""
        key = (group_id, member_id)
        member = self.get(key)
        if member is None:
            self._clients_per_group[group_id] += 1
            member = self[key] = Member(f"consumer-{group_id}-{self._clients_per_group[group_id]}")
        return member

    def forget(self, group_id: str, member_id: str | None) -> None:
        member = self.get((group_id, member_id))
        if member is not None:
            # The broker forgot it; the client keeps its id and rejoins with epoch 0.
            member.epoch = 0
            member.assigned = member.pending = ()
            member.owned_sent = None
