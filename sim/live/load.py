"""The load: many groups and members committing by hand, with members leaving and joining.

Every fourth group is a classic group (cooperative-sticky), the others KIP-848 consumer
groups; a load of two or three groups has its last one classic, so every load of more than one
group has both protocols. Each member commits after every other message, one commit in five synchronously;
every ``churn_s`` one member of a random group leaves and a new one joins, so epochs and
generations move under the commits and some commits race them (the answers the model is
compared with). It runs until the members' commits were answered ``commits`` times and
the scenarios beside it ended. ``rate`` spreads the commits over time (commits per second
over all members, roughly; 0: as fast as the clients go).
"""

from __future__ import annotations

import logging
import time
from typing import Callable

from .context import Context, Worker

__all__ = ["Load"]

log = logging.getLogger(__name__)

COMMIT_EVERY = 2
SYNC_SHARE = 0.2


class Load:
    def __init__(self, ctx: Context, *, groups: int, members: int, commits: int, rate: float = 400.0,
                 churn_s: float = 1.0, partitions_per_member: int = 2) -> None:
        self.ctx, self.groups, self.members, self.commits = ctx, groups, max(1, members), commits
        # each member waits this long after a commit: the commits spread over time, so that
        # members come and go (churn) while they are being made
        self.pace_s = groups * self.members / rate if rate > 0 else 0.0
        self.churn_s, self.partitions = churn_s, max(1, members * partitions_per_member)
        self.rng = ctx.rng("load")
        self.workers: dict[str, list[Worker]] = {}
        self.retired: list[Worker] = []
        self.topics: dict[str, str] = {}
        self.joins = 0

    @property
    def committed(self) -> int:
        return sum(w.answered for ws in self.workers.values() for w in ws) + sum(w.answered for w in self.retired)

    def _protocol(self, g: int) -> str:
        return "classic" if g % 4 == 3 or 1 < self.groups < 4 and g == self.groups - 1 else "consumer"

    def _start(self, group: str, g: int) -> Worker:
        self.joins += 1
        protocol = self._protocol(g)
        conf = {"assignor": "cooperative-sticky"} if protocol == "classic" else {}
        w = Worker(self.ctx, group, f"{group}-m{self.joins}", [self.topics[group]], protocol=protocol,
                   commit_every=COMMIT_EVERY, sync_share=SYNC_SHARE, rng=self.rng, record_seen=False,
                   pace_s=self.pace_s, **conf)
        w.start()
        return w

    def setup(self) -> None:
        per_group = max(200, self.commits * COMMIT_EVERY * 3 // max(1, self.groups))
        for g in range(self.groups):
            group = self.ctx.name("load", f"g{g}")
            self.topics[group] = self.ctx.topic("load", f"in{g}", self.partitions, messages=per_group)
            self.workers[group] = [self._start(group, g) for _ in range(self.members)]
        log.info("load: %d groups x %d members, %d partitions and %d messages each", self.groups, self.members,
                 self.partitions, per_group)

    def top_up(self, messages_per_group: int) -> None:
        """More messages on every group's topic, so its members commit again (a step that comes
        after the scenarios, when the first supply may be used up: the harness's coordinator move)."""
        for topic in self.topics.values():
            self.ctx.clients.produce(topic, messages_per_group, self.partitions)

    def run_until_done(self, others_done: Callable[[], bool]) -> None:
        self.setup()
        next_churn = next_report = time.monotonic() + self.churn_s
        t0 = time.monotonic()
        try:
            while not (self.committed >= self.commits and others_done()):
                time.sleep(0.1)
                now = time.monotonic()
                if now >= next_churn and self.committed < self.commits:
                    self._churn()
                    next_churn = now + self.churn_s
                if now >= next_report:
                    log.info("load: %d of %d commits answered (%.0f/s), %d joins", self.committed, self.commits,
                             self.committed / (now - t0), self.joins)
                    next_report = now + 5.0
        finally:
            for ws in self.workers.values():
                for w in ws:
                    w._leave.set()
            for ws in self.workers.values():
                for w in ws:
                    w.join(30)
        log.info("load: %d commits answered in %.1f s, %d joins", self.committed, time.monotonic() - t0, self.joins)

    def _churn(self) -> None:
        """One member of a random group leaves; a new one joins (members joining and leaving under load)."""
        g = self.rng.randrange(self.groups)
        group = self.ctx.name("load", f"g{g}")
        ws = self.workers[group]
        if len(ws) > 1:
            w = ws.pop(self.rng.randrange(len(ws)))
            w._leave.set()  # it closes (leaves) in its own thread
            self.retired.append(w)
        ws.append(self._start(group, g))
