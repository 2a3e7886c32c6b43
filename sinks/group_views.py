"""The per-member group view as people read it: ``fencewatch groups`` and the job's ``/groups`` page.

What lives here: :class:`GroupViews` (the latest snapshot of each group, from the groups topic's
records or the job's own output rows: a forgotten group's tombstone removes it),
:func:`render_text` (the CLI's tables) and :func:`render_html` (the page: no script, no
external resource, so it opens offline and behind a proxy). The snapshots themselves are
``state.group_view``'s; this module only reads them.
"""
from __future__ import annotations

import html
import json
import threading
import time
from typing import Callable, Iterable, Mapping

from fencewatch.state.group_view import VIEW_FORMAT

GroupKey = tuple[str, str]  # (cluster, group id)


def group_view_key(cluster: str, group_id: str) -> bytes:
    """A group's key on the groups topic: ``[cluster, group]`` as a JSON array, so that neither
    part's characters can run into the other's (group ids may hold ``/``)."""
    return json.dumps([cluster, group_id], separators=(",", ":")).encode()


def parse_group_view_key(key: bytes | None) -> GroupKey | None:
    """:func:`group_view_key`'s (cluster, group id), or None for a key it did not write."""
    try:
        cluster, group_id = json.loads(key)
    except (TypeError, ValueError):
        return None
    return (cluster, group_id) if isinstance(cluster, str) and isinstance(group_id, str) else None


class ViewFormatError(ValueError):
    """A snapshot this version cannot read (a newer ``format``, or not a snapshot at all)."""


def parse_view(value: bytes | str) -> dict:
    """A snapshot record's value as a dict; :class:`ViewFormatError` for one this version refuses."""
    try:
        view = json.loads(value)
    except (ValueError, UnicodeDecodeError) as exc:
        raise ViewFormatError(f"not a group snapshot (invalid JSON: {exc})") from None
    if not isinstance(view, dict) or not isinstance(view.get("format"), int) or "group_id" not in view:
        raise ViewFormatError("not a group snapshot (no format or group_id field)")
    if view["format"] > VIEW_FORMAT:
        raise ViewFormatError(f"group snapshot of format {view['format']}; this version reads format {VIEW_FORMAT} "
                              "(upgrade fencewatch)")
    return view


class GroupViews:
    """The latest snapshot of each group. Thread-safe: the writer adds while the page reads."""

    def __init__(self) -> None:
        self._views: dict[GroupKey, dict] = {}
        self._lock = threading.Lock()
        self.refused = 0  # records that were not a snapshot this version reads

    def apply(self, records: Iterable[tuple[str, str, bytes | str | dict | None]]) -> None:
        """(cluster, group id, snapshot or None): a snapshot replaces the group's, None removes it."""
        with self._lock:
            for cluster, group_id, value in records:
                if value is None:
                    self._views.pop((cluster, group_id), None)
                    continue
                try:
                    self._views[(cluster, group_id)] = value if isinstance(value, dict) else parse_view(value)
                except ViewFormatError:
                    self.refused += 1

    def snapshot(self, cluster: str | None = None, group: str | None = None) -> list[dict]:
        """The views in (cluster, group) order, those of ``cluster`` / ``group`` only when given."""
        with self._lock:
            items = sorted(self._views.items())
        return [v for (c, g), v in items if (cluster is None or c == cluster) and (group is None or g == group)]

    def __len__(self) -> int:
        with self._lock:
            return len(self._views)


def _partitions(parts: list[dict]) -> str:
    """``t-0@5 t-1@5``: topic-partition at its assignment epoch, grouped by topic."""
    return " ".join(f"{p['topic']}-{p['partition']}@{p['assignment_epoch']}" for p in parts) or "-"


def _counts(counts: Mapping[str, int]) -> str:
    return " ".join(f"{k}={n}" for k, n in sorted(counts.items())) or "-"


def _when(ts: int | None) -> str:
    if ts is None:
        return "-"
    return time.strftime("%Y-%m-%d %H:%M:%S", time.gmtime(ts / 1000)) + f".{ts % 1000:03d}Z"


def group_row(v: dict) -> dict[str, str]:
    """A group's summary line: the columns the table and the page share."""
    members = v.get("members", [])
    return {"cluster": v.get("cluster", ""), "group": v["group_id"], "type": v.get("group_type", ""),
            "state": v.get("state", ""), "epoch": str(v.get("group_epoch", "")), "members": str(len(members)),
            "assigned": str(sum(len(m["assigned_partitions"]) for m in members)),
            "pending": str(sum(len(m["partitions_pending_revocation"]) for m in members)),
            "verdicts": _counts(v.get("verdicts", {}).get("by_class", {})),
            "rejected by": _counts(v.get("verdicts", {}).get("rejected_by", {})),
            "changed": _when(v.get("changed_ts"))}


def member_row(m: dict) -> dict[str, str]:
    return {"member": m["member_id"], "instance": m.get("instance_id") or "-", "protocol": m.get("protocol", ""),
            "epoch": str(m["member_epoch"]), "previous": str(m.get("previous_member_epoch", "")),
            "state": m.get("state", ""), "assigned (partition@assignment epoch)": _partitions(m["assigned_partitions"]),
            "pending revocation": _partitions(m["partitions_pending_revocation"])}


def _table(rows: list[dict[str, str]]) -> str:
    if not rows:
        return ""
    cols = list(rows[0])
    widths = {c: max(len(c), *(len(r[c]) for r in rows)) for c in cols}
    lines = ["  ".join(c.upper().ljust(widths[c]) for c in cols).rstrip()]
    lines += ["  ".join(r[c].ljust(widths[c]) for c in cols).rstrip() for r in rows]
    return "\n".join(lines)


def render_text(views: list[dict], members: bool = False) -> str:
    """The groups as a table; ``members``: each group's members below its line."""
    if not views:
        return "no groups"
    if not members:
        return _table([group_row(v) for v in views])
    out = []
    for v in views:
        out.append(_table([group_row(v)]))
        out.append(_table([member_row(m) for m in v.get("members", [])]) or "  (no members)")
        out.append("")
    return "\n".join(out).rstrip()


_STYLE = """body{font:13px system-ui,sans-serif;margin:16px;max-width:1240px}
table{border-collapse:collapse;margin:6px 0 14px;width:100%;table-layout:auto}
th,td{border:1px solid #ccc;padding:3px 6px;text-align:left;vertical-align:top}
th{background:#f3f3f3;white-space:nowrap}td{overflow-wrap:anywhere}
h2{font-size:15px;margin:18px 0 2px}.fenced{color:#b00020;font-weight:600}p.note{color:#555}"""


def _html_table(rows: list[dict[str, str]], cls_of=None) -> str:
    if not rows:
        return "<p class=note>no members</p>"
    cols = list(rows[0])
    head = "".join(f"<th>{html.escape(c)}</th>" for c in cols)
    body = "".join("<tr>" + "".join(
        f"<td{' class=fenced' if cls_of and cls_of(c, r) else ''}>{html.escape(r[c])}</td>" for c in cols) + "</tr>"
        for r in rows)
    return f"<table><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>"


def render_html(views: list[dict], *, title: str = "fencewatch groups", generated_ms: int | None = None) -> bytes:
    """The page: one summary table, then each group's members with their partitions."""
    stamp = _when(generated_ms if generated_ms is not None else int(time.time() * 1000))
    parts = [f"<!doctype html><html><head><meta charset=utf-8><link rel=icon href='data:,'><title>{html.escape(title)}</title>"
             f"<style>{_STYLE}</style></head><body><h1>{html.escape(title)}</h1>",
             f"<p class=note>{len(views)} group(s), as the job last saw them, {stamp}. A group's snapshot is "
             "written when its members, epochs or partitions change, or a commit is fenced; its verdict counts "
             "are those of that step.</p>"]
    if not views:
        parts.append("<p>No group snapshot yet.</p>")
    else:
        def rejected(col: str, row: dict) -> bool:
            return col == "rejected by" and row[col] != "-"

        parts.append(_html_table([group_row(v) for v in views], rejected))
        for v in views:
            anchor = html.escape(f"{v.get('cluster', '')}/{v['group_id']}", quote=True)
            parts.append(f"<h2 id=\"{anchor}\">{html.escape(v.get('cluster', ''))} / {html.escape(v['group_id'])}"
                         f" &middot; {html.escape(str(v.get('state', '')))}, group epoch "
                         f"{html.escape(str(v.get('group_epoch', '')))}</h2>")
            parts.append(_html_table([member_row(m) for m in v.get("members", [])]))
    parts.append("</body></html>")
    return "".join(parts).encode()


def group_pages(views: GroupViews, clock: Callable[[], float]) -> dict[str, Callable]:
    """The metrics port's pages (``sinks.exposition.Page``): ``/groups`` (HTML) and ``/groups.json``,
    each filtered by ``?cluster=`` and ``?group=``."""
    def chosen(query: Mapping[str, str]) -> list[dict]:
        return views.snapshot(query.get("cluster") or None, query.get("group") or None)

    return {"/groups": lambda q: ("text/html; charset=utf-8", render_html(chosen(q), generated_ms=int(clock() * 1000))),
            "/groups.json": lambda q: ("application/json", json.dumps(chosen(q)).encode())}
