"""The report's page as a person would see it, in Debian's headless Chromium: it renders with no
console error and fetches nothing, its plots are drawn, its table sorts, and every number it
shows is the JSON summary's (read back from ``--dump-dom`` through the ``data-num`` marks)."""
from __future__ import annotations

import json
import re
from html.parser import HTMLParser

import pytest
from headless_chromium import dump_dom, open_page, screenshot

PAGE_FACTS = """JSON.stringify((() => {
  const plots = [...document.querySelectorAll("svg[data-plot]")].map(s => {
    const box = s.getBoundingClientRect();
    const series = [...s.querySelectorAll("g[id*='-fw-']")].map(g => ({
      title: (g.querySelector("title") || {}).textContent || null,
      d: [...g.querySelectorAll("path")].map(p => (p.getAttribute("d") || "").length).reduce((a, b) => a + b, 0)}));
    return {plot: s.dataset.plot, width: box.width, height: box.height, series: series,
            text: s.textContent};
  });
  const table = document.getElementById("groups-table");
  const th = [...table.tHead.rows[0].cells].find(c => c.textContent === "commits");
  const column = () => [...table.tBodies[0].rows].map(
    r => parseInt(r.cells[th.cellIndex].textContent.replace(/,/g, "")));
  th.click(); const up = column(); th.click(); const down = column();
  return {plots: plots, up: up, down: down, marked: document.querySelectorAll("[data-num]").length};
})())"""


@pytest.fixture(scope="module")
def page(mixed_run) -> dict:
    url = mixed_run["html"].as_uri()
    seen = open_page(url, PAGE_FACTS)
    return {"url": url, "problems": seen["problems"], "requests": seen["requests"],
            "facts": json.loads(seen["value"]), "summary": mixed_run["summary"]}


def test_renders_without_console_errors_and_fetches_nothing(page):
    assert page["problems"] == []
    assert page["requests"] == []


def test_the_check_sees_console_errors_exceptions_and_fetches(tmp_path):
    """The same check on a page that does everything wrong: it must catch each of them."""
    bad = tmp_path / "bad.html"
    bad.write_text('<!DOCTYPE html><html><body><img src="http://127.0.0.1:9/x.png">'
                   '<script>console.error("broken"); undefinedFunction();</script></body></html>')
    seen = open_page(bad.as_uri(), "1")
    text = "\n".join(seen["problems"])
    assert "console.error: broken" in text
    assert "undefinedFunction" in text
    assert seen["requests"] == ["http://127.0.0.1:9/x.png"]


def test_plots_are_drawn(page):
    s = page["summary"]
    plots = {p["plot"]: p for p in page["facts"]["plots"]}
    assert set(plots) == {"fences0", "avoidable", "unsafe"}
    for name, p in plots.items():
        assert p["width"] > 300 and p["height"] > (50 if name == "unsafe" else 150)
    fences = plots["fences0"]["series"]
    assert len(fences) == len(s["policies"]) and all(x["d"] > 100 for x in fences)
    cluster = s["series"]["clusters"][0]
    for policy, x in zip(s["policies"], fences):
        assert x["title"] == f"{policy}: {sum(cluster['fenced'][policy]):,} commit requests fenced in the range"
    avoidable = plots["avoidable"]["series"]
    assert avoidable and all(x["d"] > 100 for x in avoidable)
    drawn = {x["title"].split(":")[0] for x in avoidable}
    assert drawn == {g["group_id"] for g in s["series"]["groups"] if sum(g["avoidable"]["kip1251"])}
    # no unsafe accept in this trace: the plot says so rather than drawing nothing
    assert s["totals"]["unsafe"]["kip1251"]["added"] == 0
    assert "no unsafe accepts" in plots["unsafe"]["text"]


def test_the_groups_table_sorts(page):
    up, down = page["facts"]["up"], page["facts"]["down"]
    assert len(up) == len(page["summary"]["groups"]) > 2
    assert up == sorted(up) and down == sorted(up, reverse=True) and up != down


class _Marks(HTMLParser):
    def __init__(self) -> None:
        super().__init__()
        self.marks: list[dict] = []
        self._open: list[dict | None] = []

    def handle_starttag(self, tag, attrs):
        a = dict(attrs)
        mark = {**a, "text": ""} if "data-num" in a else None
        if mark is not None:
            self.marks.append(mark)
        if tag not in ("br", "img", "meta", "input", "wbr"):
            self._open.append(mark)

    def handle_endtag(self, tag):
        if self._open:
            self._open.pop()

    def handle_data(self, data):
        for m in self._open:
            if m is not None:
                m["text"] += data


def _at(doc, path: str):
    for part in path.split("."):
        doc = doc[int(part)] if isinstance(doc, list) else doc[part]
    return doc


def test_every_number_on_the_page_is_the_summarys(page):
    marks = _Marks()
    marks.feed(dump_dom(page["url"]))
    s = page["summary"]
    assert len(marks.marks) == page["facts"]["marked"] > 200
    policies = set(s["policies"])
    for m in marks.marks:
        value = _at(s, m["data-num"]) if not m["data-num"].endswith("alerts_total") else sum(
            _at(s, m["data-num"].rsplit(".", 1)[0] + ".alerts").values())
        if "data-ms" in m:
            assert int(m["data-ms"]) == value, m
        else:
            assert m["text"].replace(",", "").strip() == ("" if value is None else str(value)), m
        named = policies.intersection(m["data-num"].split("."))
        if named and "data-policy" in m:
            assert {m["data-policy"]} == named, m
    shown = {m["data-num"] for m in marks.marks}
    for path in ("totals.requests", "totals.rejected.requests", "totals.avoidable.kip1251.requests",
                 "totals.aborted_transactions.requests", "totals.aborted_transactions.saved.kip1251",
                 "totals.unsafe.kip1251.added", "totals.zombie.verdicts", "totals.stale.verdicts",
                 "expiry.forecasts.0.deadline_ms", "expiry.expired.0.expired_offsets",
                 "truncation.incidents.0.records", "top_members.rows.0.avoidable_requests.kip1251"):
        assert path in shown, path
    # the range every number comes from is on the page, as the summary states it
    assert re.search(r'data-from-ms="%d"' % s["range"]["from_ms"], dump_dom(page["url"]))


def test_screenshot(mixed_run, tmp_path):
    from PIL import Image

    png = screenshot(mixed_run["html"].as_uri(), tmp_path / "report.png")
    with Image.open(png) as im:
        assert im.size == (1280, 2400)
        colours = im.convert("RGB").getcolors(maxcolors=1 << 16)
    assert colours is None or len(colours) > 50  # text, plots and tables, not a blank page


def test_the_page_is_small_enough_to_mail(mixed_run):
    assert mixed_run["html"].stat().st_size < 500_000


TABLE_FIT = """JSON.stringify(Array.from(document.querySelectorAll("table")).map(t => {
  const box = t.parentElement, r = t.getBoundingClientRect();
  return {id: t.id || (t.closest("section,div[id]") || {}).id || t.previousElementSibling?.textContent || "",
          right: Math.round(r.right), box: box.clientWidth, scroll: box.scrollWidth,
          page: document.documentElement.clientWidth};
}))"""


def test_tables_fit_a_1280px_page(mixed_run):
    """Issue 46: at 1280 px the cluster and group tables' right-hand columns were cut. Every table
    fits its box (nothing to scroll to) and the box fits the viewport."""
    tables = json.loads(open_page(mixed_run["html"].as_uri(), TABLE_FIT, width=1280)["value"])
    assert tables, "no table on the page"
    over = [t for t in tables if t["scroll"] > t["box"] or t["right"] > t["page"]]
    assert not over, over
