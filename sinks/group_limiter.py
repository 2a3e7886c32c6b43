"""Which groups keep their own `group` label: the top-N by activity, the rest folded into `other`.

What lives here: :class:`GroupLimiter`, :data:`GroupKey` and :data:`OTHER` (re-exported by
``sinks/metrics.py``, where every metric is defined). Pure: no prometheus_client import.
"""

from __future__ import annotations

from typing import Iterable, Mapping

OTHER = "other"
"""Label value of the overflow bucket of every enum, and of folded groups."""

GroupKey = tuple[str, str]
"""(cluster, group_id)."""


class GroupLimiter:
    """Chooses which groups keep their own `group` label: top-N by activity, plus `other`.

    Scores are an exponentially decayed count of activity per batch. A labelled
    group keeps its label while idle until a clearly busier (swap_margin) or
    urgent group needs the slot, or it is deleted; that stickiness keeps
    counters continuous. A pinned group (a critical finding lasts; the sink decides
    for how long) outranks urgent and busy ones and is never displaced by them.
    Counters must therefore be routed through `label()`
    at increment time: a folded group's increments go to `other`, and a group
    that is demoted simply stops having series (the caller drops them), so no
    series ever goes backwards.
    """

    def __init__(self, max_groups: int, decay: float = 0.8, swap_margin: float = 2.0) -> None:
        self.max_groups = max_groups
        self.decay = decay
        self.swap_margin = swap_margin
        self._scores: dict[GroupKey, float] = {}
        self._labelled: set[GroupKey] = set()

    @property
    def labelled(self) -> frozenset[GroupKey]:
        return frozenset(self._labelled)

    def label(self, key: GroupKey) -> str:
        """The `group` label value for `key` right now."""
        if not key[1]:
            return ""  # partition-scoped events carry no group
        return key[1] if key in self._labelled else OTHER

    def folded(self, key: GroupKey) -> bool:
        """True if `key` was seen before and is counted in `other` now: promoting it moves it *out
        of* `other`, so its own series must be exposed at 0 before they count (see
        ``MetricsSink``'s held increments)."""
        return key in self._scores and key not in self._labelled

    def forget(self, key: GroupKey) -> bool:
        """Drop a deleted group; True if it had its own label (its series must go)."""
        self._scores.pop(key, None)
        if key in self._labelled:
            self._labelled.discard(key)
            return True
        return False

    def observe(
        self,
        activity: Mapping[GroupKey, float],
        urgent: Iterable[GroupKey] = (),
        pinned: Iterable[GroupKey] = (),
    ) -> tuple[set[GroupKey], set[GroupKey]]:
        """Account one batch's activity; returns (promoted, demoted) groups.

        A group present in `activity` with 0 (seen, e.g. a status, but idle) takes a
        free slot but never displaces anybody. Three tiers, each outranking the next
        whatever the scores: `pinned` (a critical finding lasts: an unsafe accept, a log
        truncation... must be read under the group's own name, never `other`), `urgent`
        (offsets expiring, a spike firing), then everybody by score. Within a tier the
        swap margin applies. More pinned groups than slots: the busiest pinned ones win.
        """
        pinned = {k for k in pinned if k[1]}
        urgent = {k for k in urgent if k[1]} | pinned
        scores = self._scores
        for key in list(scores):
            value = scores[key] * self.decay
            if value < 1e-3 and key not in self._labelled and key not in activity:
                del scores[key]
            else:
                scores[key] = value
        for key, n in activity.items():
            if key[1]:
                scores[key] = scores.get(key, 0.0) + n
        for key in urgent:
            scores.setdefault(key, 0.0)

        def tier(key: GroupKey) -> int:
            return 2 if key in pinned else 1 if key in urgent else 0

        def rank(key: GroupKey) -> tuple[int, float]:
            return (tier(key), scores.get(key, 0.0))

        promoted: set[GroupKey] = set()
        demoted: set[GroupKey] = set()
        candidates = sorted(
            (k for k in scores if k not in self._labelled and (scores[k] > 0 or k in urgent or k in activity)),
            key=rank,
            reverse=True,
        )
        if not candidates or self.max_groups == 0:
            return promoted, demoted
        free = self.max_groups - len(self._labelled)
        weakest = sorted(self._labelled, key=rank) if free < len(candidates) else []
        for key in candidates:
            if free > 0:
                free -= 1
            else:
                if not weakest:
                    break
                victim = weakest[0]
                v_tier, v_score = rank(victim)
                c_tier, c_score = rank(key)
                wins = c_tier > v_tier or (
                    c_tier == v_tier and c_score > self.swap_margin * v_score and c_score > v_score
                )
                if not wins:
                    break  # candidates are sorted: nobody after this one wins either
                weakest.pop(0)
                self._labelled.discard(victim)
                demoted.add(victim)
            self._labelled.add(key)
            promoted.add(key)
        return promoted, demoted
