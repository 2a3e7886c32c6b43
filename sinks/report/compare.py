"""A 4.2 run's prediction against a 4.3 run's answers (issue 35, item 5).

Two report summaries of the same scripted scenario: one played on a broker that runs the strict
check (Kafka 4.2), one on a broker that runs KIP-1251 (4.3). From the first, the model predicts
which fences 4.3 avoids: commits ``strict`` rejects and ``kip1251`` accepts (``kip1251`` accepts
everything ``strict`` does, so that is strict's rejections minus kip1251's). The brokers' own
answers (``broker_error`` on the verdicts, so both runs must carry them) say how many fences each
broker actually gave; 4.2's minus 4.3's is what the upgrade did avoid. Errors a broker gives for
reasons the model cannot see (coordinator moves, timeouts: ``TRANSIENT_ERRORS``) are not fences.
Groups are matched by group id (the scenario names them; clusters may be named differently).
"""
from __future__ import annotations

from collections import Counter

from fencewatch.state.model import TRANSIENT_ERRORS

_TRANSIENT = frozenset(e.value for e in TRANSIENT_ERRORS)
COLUMNS = ("broker_fences_before", "model_strict", "predicted_avoided", "predicted_remaining",
           "broker_fences_after", "observed_avoided", "difference")


def fences(counts: dict) -> int:
    """Requests a broker rejected with an error the model judges (not a transient one)."""
    return sum(n for e, n in counts["broker"]["errors"].items() if e not in _TRANSIENT)


def _row(before: dict | None, after: dict | None) -> dict:
    row: dict = {}
    if before is not None:
        rbp = before["rejected_by_policy"]
        row["broker_fences_before"] = fences(before)
        row["model_strict"] = rbp["strict"]["requests"]
        row["predicted_avoided"] = rbp["strict"]["requests"] - rbp["kip1251"]["requests"]
        row["predicted_remaining"] = rbp["kip1251"]["requests"]
        row["aborted_before"] = before["aborted_transactions"]["requests"]
        row["requests_before"] = before["requests"]
    if after is not None:
        row["broker_fences_after"] = fences(after)
        row["aborted_after"] = after["aborted_transactions"]["requests"]
        row["requests_after"] = after["requests"]
    if before is not None and after is not None:
        row["observed_avoided"] = row["broker_fences_before"] - row["broker_fences_after"]
        row["difference"] = row["observed_avoided"] - row["predicted_avoided"]
    return row


def _by_group(summary: dict) -> dict[str, dict]:
    from .summary import add_into, empty_counts

    out: dict[str, dict] = {}
    for g in summary["groups"]:
        counts = {k: v for k, v in g.items() if k not in ("cluster", "group_id", "first_ts", "last_ts", "alerts")}
        add_into(out.setdefault(g["group_id"], empty_counts(summary["broker_policy"])), counts)
    return out


def compare(before: dict, after: dict) -> dict:
    """``before``: the summary of the run on the strict broker (4.2); ``after``: on the KIP-1251
    broker (4.3). Rows per group id, then the totals; every figure counts commit requests."""
    problems = []
    for name, s in (("before", before), ("after", after)):
        t = s["totals"]
        if t["requests"] and not t["broker"]["answered_requests"]:
            problems.append(f"the {name} run's verdicts carry no broker answers: its broker fences are unknown")
    b_groups, a_groups = _by_group(before), _by_group(after)
    rows = [{"group_id": g, **_row(b_groups.get(g), a_groups.get(g))} for g in sorted(set(b_groups) | set(a_groups))]
    only = Counter("before" if r.get("broker_fences_after") is None else "after" for r in rows
                   if r.get("broker_fences_after") is None or r.get("broker_fences_before") is None)
    for side, n in only.items():
        problems.append(f"{n} group(s) appear only in the {side} run")
    return {"before": {"range": before["range"], "broker_policy": before["broker_policy"]},
            "after": {"range": after["range"], "broker_policy": after["broker_policy"]},
            "groups": rows, "totals": _row(before["totals"], after["totals"]), "problems": problems,
            "model_divergence": {"before": before["totals"]["broker"]["model_agrees"]["false"],
                                 "after": after["totals"]["broker"]["model_agrees"]["false"]}}


def render_text(c: dict) -> str:
    """The comparison as a plain table (the command's output)."""
    heads = ("group",) + COLUMNS
    rows = [(r["group_id"], *(r.get(k, "-") for k in COLUMNS)) for r in c["groups"]]
    rows.append(("all", *(c["totals"].get(k, "-") for k in COLUMNS)))
    widths = [max(len(str(x)) for x in col) for col in zip(heads, *rows)]
    line = lambda cells: "  ".join(str(x).rjust(w) if i else str(x).ljust(w)  # noqa: E731
                                   for i, (x, w) in enumerate(zip(cells, widths)))
    out = [f"before: {c['before']['broker_policy']} model, {c['before']['range']['from']} to "
           f"{c['before']['range']['to']}; after: {c['after']['range']['from']} to {c['after']['range']['to']}",
           "commit requests: broker fences before (4.2) and after (4.3) are the brokers' answers; predicted_avoided "
           "= strict rejects that kip1251 accepts in the before run; observed_avoided = fences before - after",
           line(heads), *map(line, rows)]
    md = c["model_divergence"]
    out.append(f"model divergence (verdicts): before {md['before']}, after {md['after']}")
    out += [f"note: {p}" for p in c["problems"]]
    return "\n".join(out)
