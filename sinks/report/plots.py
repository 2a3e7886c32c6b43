"""The report's plots: matplotlib drawing inline SVG (no JavaScript, nothing fetched).

Why matplotlib and SVG (docs/decisions.md): the page must open offline and be small enough to
mail; SVG keeps text as text (``svg.fonttype: none``) and each series a path, a few tens of KB a
plot, and a ``<title>`` on a series gives hover text in any browser. Each figure's ids get their
own prefix: several SVGs live in one HTML document, and matplotlib numbers ids per figure.
"""
from __future__ import annotations

import io
import re
from datetime import datetime, timezone
from xml.sax.saxutils import escape

import matplotlib
from matplotlib import dates as mdates
from matplotlib.figure import Figure  # a Figure, not pyplot: no backend, no global state

_RC = {"svg.fonttype": "none", "svg.hashsalt": "fencewatch", "font.size": 9, "axes.spines.top": False,
       "axes.spines.right": False, "axes.grid": True, "grid.alpha": 0.3, "figure.dpi": 96}
POLICY_COLOURS = {"strict": "#d62728", "member_revocation": "#9467bd", "assignment_epoch": "#ff7f0e",
                  "kip1251": "#2ca02c"}
GROUP_COLOURS = ("#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b", "#e377c2", "#7f7f7f")
_PROLOG = re.compile(r"^.*?(?=<svg)", re.S)


def _times(series: dict) -> list[datetime]:
    start, width, n = series["start_ms"], series["bucket_ms"], series["buckets"]
    return [datetime.fromtimestamp((start + i * width) / 1000, tz=timezone.utc) for i in range(n)]


def _figure(height: float = 2.6) -> Figure:
    return Figure(figsize=(10, height), layout="constrained")


def _axes_time(ax) -> None:
    locator = mdates.AutoDateLocator(tz=timezone.utc)
    ax.xaxis.set_major_locator(locator)
    ax.xaxis.set_major_formatter(mdates.ConciseDateFormatter(locator, tz=timezone.utc))
    ax.set_xlabel("time (UTC)")
    ax.set_ylim(bottom=0)


def _svg(fig: Figure, prefix: str, titles: dict[str, str]) -> str:
    """The figure as an inline ``<svg>``: no XML prolog, ids prefixed, ``<title>`` per series."""
    buf = io.StringIO()
    with matplotlib.rc_context(_RC):
        fig.savefig(buf, format="svg", metadata={"Date": None, "Creator": None})
    text = _PROLOG.sub("", buf.getvalue(), count=1)
    text = text.replace('id="', f'id="{prefix}-').replace("url(#", f"url(#{prefix}-")
    text = text.replace('xlink:href="#', f'xlink:href="#{prefix}-')
    for gid, title in titles.items():
        text = text.replace(f'<g id="{prefix}-{gid}">', f'<g id="{prefix}-{gid}"><title>{escape(title)}</title>', 1)
    return text.replace("<svg ", f'<svg data-plot="{prefix}" role="img" ', 1)


def _empty(ax, text: str) -> None:
    ax.text(0.5, 0.5, text, ha="center", va="center", transform=ax.transAxes, color="#666")
    ax.set_yticks([])
    ax.set_xticks([])


def fences_plot(summary: dict, cluster: dict, prefix: str) -> str:
    """Commit requests fenced per bucket under every policy, in one cluster."""
    series = summary["series"]
    minutes = series["bucket_ms"] // 60_000
    with matplotlib.rc_context(_RC):
        fig = _figure()
        ax = fig.add_subplot()
        titles = {}
        if not series["buckets"]:
            _empty(ax, "no commit requests in the range")
        else:
            t = _times(series)
            for i, p in enumerate(summary["policies"]):
                values = cluster["fenced"][p]
                line, = ax.step(t, values, where="post", color=POLICY_COLOURS.get(p), lw=1.4 if p != "strict" else 2,
                                label=f"{p}{' (brokers)' if p == summary['broker_policy'] else ''}")
                line.set_gid(f"fw-fenced-{i}")
                titles[f"fw-fenced-{i}"] = f"{p}: {sum(values):,} commit requests fenced in the range"
            ax.legend(loc="upper left", fontsize=8, frameon=False, ncols=4)
            _axes_time(ax)
        ax.set_ylabel(f"requests / {minutes} min")
        ax.set_title(f"Commits fenced per {minutes} min under each policy, cluster {cluster['cluster']}",
                     loc="left", fontsize=10)
        return _svg(fig, prefix, titles)


def groups_plot(summary: dict, field: str, policy: str, prefix: str, what: str, title: str) -> str:
    """One line per top group: ``field`` (``avoidable`` or ``unsafe_added``) under ``policy``;
    ``what`` names one count (hover text), ``title`` the plot."""
    series = summary["series"]
    minutes = series["bucket_ms"] // 60_000
    groups = [g for g in series["groups"] if policy in g[field] and sum(g[field][policy])]
    with matplotlib.rc_context(_RC):
        fig = _figure(2.6 if groups else 1.1)
        ax = fig.add_subplot()
        titles = {}
        if not groups:
            _empty(ax, f"no {what} under {policy} in the range")
        else:
            t = _times(series)
            for i, g in enumerate(groups):
                values = g[field][policy]
                label = g["group_id"] if len(summary["clusters"]) < 2 else f"{g['cluster']}/{g['group_id']}"
                line, = ax.step(t, values, where="post", color=GROUP_COLOURS[i % len(GROUP_COLOURS)], lw=1.4,
                                label=label)
                line.set_gid(f"fw-g{i}")
                titles[f"fw-g{i}"] = f"{label}: {sum(values):,} {what} under {policy} in the range"
            ax.legend(loc="upper left", fontsize=8, frameon=False, ncols=4)
            _axes_time(ax)
        ax.set_ylabel(f"per {minutes} min" if groups else "")
        ax.set_title(f"{title} per {minutes} min, the groups with the most avoidable fences", loc="left", fontsize=10)
        return _svg(fig, prefix, titles)
