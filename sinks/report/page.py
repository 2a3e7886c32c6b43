"""The report as one self-contained HTML file: inline CSS, inline SVG plots, a few lines of
JavaScript to sort the groups' table; nothing fetched, so it opens offline and can be attached
to a change ticket.

Every number shown comes from the JSON summary and says where: ``data-num`` holds its path in
the summary (``totals.avoidable.kip1251.requests``; list items by index), ``data-policy`` the
policy it is under, and time stamps carry ``data-ms``. Column headers name the policy; each
section names the time range. A test reads the numbers back from the rendered page and compares
them with the summary.
"""
from __future__ import annotations

from html import escape

from . import plots
from .assemble import iso

MAX_GROUP_ROWS = 300  # groups listed on the page (all are in the JSON summary)
MAX_CLUSTER_PLOTS = 4
_CSS = """
body{font:14px/1.45 system-ui,-apple-system,Segoe UI,Roboto,sans-serif;margin:24px auto;max-width:1180px;
 padding:0 16px;color:#1d1d1f}
h1{font-size:22px;margin:0 0 4px}h2{font-size:17px;margin:28px 0 6px;border-bottom:1px solid #ddd;padding-bottom:3px}
h3{font-size:14px;margin:16px 0 4px}.meta{color:#555}.range{color:#555;font-weight:normal;font-size:13px}
.cards{display:flex;flex-wrap:wrap;gap:10px;margin:14px 0}.card{border:1px solid #ddd;border-radius:6px;
 padding:8px 12px;min-width:150px}.card .v{font-size:22px;font-weight:600}.card .l{font-size:12px;color:#555}
table{border-collapse:collapse;font-size:11px;margin:6px 0}th,td{border-bottom:1px solid #eee;padding:3px 4px;
 text-align:left;vertical-align:top}td:not(.n){overflow-wrap:anywhere}td.n,th.n{text-align:right;font-variant-numeric:tabular-nums}
th{background:#f6f6f6;position:sticky;top:0}table.sortable th{cursor:pointer}table.sortable th:after{content:" \\2195";
 color:#aaa}.limits li{margin:3px 0}.limits code{font-size:11px;color:#555}.wrap{overflow-x:auto}
.note{color:#555;font-size:12px}svg{max-width:100%;height:auto;display:block;margin:8px 0}
"""
# Sort the table whose header was clicked by that column: numbers (data-v, else the text without
# thousands separators) numerically, anything else as text; a second click reverses.
_JS = """
document.querySelectorAll("table.sortable").forEach(function (table) {
  table.querySelectorAll("th").forEach(function (th) {
    th.addEventListener("click", function () {
      var col = th.cellIndex, body = table.tBodies[0], asc = th.dataset.asc !== "1";
      var key = function (tr) {
        var td = tr.cells[col], t = td.dataset.v !== undefined ? td.dataset.v : td.textContent.replace(/,/g, "");
        var n = parseFloat(t); return isNaN(n) ? t.toLowerCase() : n;
      };
      var rows = Array.prototype.slice.call(body.rows);
      rows.sort(function (a, b) { var x = key(a), y = key(b); return (x < y ? -1 : x > y ? 1 : 0) * (asc ? 1 : -1); });
      rows.forEach(function (r) { body.appendChild(r); });
      table.querySelectorAll("th").forEach(function (h) { delete h.dataset.asc; });
      th.dataset.asc = asc ? "1" : "0";
    });
  });
});
"""


def _num(path: str, value, policy: str | None = None) -> str:
    attr = f' data-policy="{escape(policy)}"' if policy else ""
    text = f"{value:,}" if isinstance(value, int) else ("" if value is None else escape(str(value)))
    return f'<td class="n" data-num="{escape(path)}"{attr}>{text}</td>'


def _ts(path: str, ms: int | None) -> str:
    if ms is None:
        return "<td>-</td>"
    return f'<td data-num="{escape(path)}" data-ms="{ms}" data-v="{ms}">{escape(_short(ms))}</td>'


def _short(ms: int) -> str:
    return iso(ms).replace("T", " ")


def _text(value) -> str:
    return f"<td>{escape('' if value is None else str(value))}</td>"


def _card(path: str, value: int, label: str, policy: str | None = None) -> str:
    attr = f' data-policy="{escape(policy)}"' if policy else ""
    return (f'<div class="card"><div class="v" data-num="{escape(path)}"{attr}>{value:,}</div>'
            f'<div class="l">{escape(label)}</div></div>')


def _range_text(s: dict) -> str:
    r = s["range"]
    if r["from_ms"] is None:
        return "no records in range"
    return f"{_short(r['from_ms'])} to {_short(r['to_ms'])} UTC"


def _count_headers(s: dict) -> list[tuple[str, str]]:
    """(header, hover text) of the count columns, each naming its policy."""
    b, rng = s["broker_policy"], _range_text(s)
    heads = [("commits", "commit requests judged (event ids)"), ("verdicts", "(commit, partition) verdicts"),
             (f"rejected ({b})", f"commit requests rejected under {b}, the brokers' check")]
    heads += [(f"avoidable ({p})", f"of those, requests {p} would accept") for p in s["relaxed_policies"]]
    heads += [(f"aborted txns ({b})", "rejected txn_commit requests (broker's answer, else the model's under "
               f"{b})")]
    heads += [(f"saved ({p})", f"aborted transactions {p} would save") for p in s["relaxed_policies"]]
    heads += [(f"unsafe added ({p})", f"verdicts {p} accepts unsafely that {b} rejects") for p in s["relaxed_policies"]]
    heads += [("zombie", "verdicts of class zombie (another member holds the partition)"),
              ("stale", "verdicts of class stale"), ("broker rejected", "requests the broker answered with an error"),
              ("model differs", f"verdicts whose broker answer differs from {b}'s prediction")]
    return [(h, f"{t}; {rng}") for h, t in heads]


def _count_cells(path: str, c: dict, s: dict) -> str:
    b = s["broker_policy"]
    cells = [_num(f"{path}.requests", c["requests"]), _num(f"{path}.verdicts", c["verdicts"]),
             _num(f"{path}.rejected.requests", c["rejected"]["requests"], b)]
    cells += [_num(f"{path}.avoidable.{p}.requests", c["avoidable"][p]["requests"], p) for p in s["relaxed_policies"]]
    cells += [_num(f"{path}.aborted_transactions.requests", c["aborted_transactions"]["requests"], b)]
    cells += [_num(f"{path}.aborted_transactions.saved.{p}", c["aborted_transactions"]["saved"][p], p)
              for p in s["relaxed_policies"]]
    cells += [_num(f"{path}.unsafe.{p}.added", c["unsafe"][p]["added"], p) for p in s["relaxed_policies"]]
    cells += [_num(f"{path}.zombie.verdicts", c["zombie"]["verdicts"]), _num(f"{path}.stale.verdicts",
                                                                             c["stale"]["verdicts"]),
              _num(f"{path}.broker.rejected_requests", c["broker"]["rejected_requests"]),
              _num(f"{path}.broker.model_agrees.false", c["broker"]["model_agrees"]["false"], b)]
    return "".join(cells)


def _head(text: str) -> str:
    """A column header: the policy on its own line, breakable after its underscores."""
    name, _, policy = text.partition(" (")
    html = escape(name)
    if policy:
        html += "<br><small>" + escape(policy.rstrip(")")).replace("_", "_<wbr>") + "</small>"
    return html


def _thead(heads: list[tuple[str, str]], lead: list[str]) -> str:
    cols = "".join(f"<th>{escape(h)}</th>" for h in lead)
    cols += "".join(f'<th class="n" title="{escape(t)}">{_head(h)}</th>' for h, t in heads)
    return f"<thead><tr>{cols}</tr></thead>"


def _headline(s: dict) -> str:
    t, b, r = s["totals"], s["broker_policy"], s["rank_policy"]
    cards = [_card("totals.requests", t["requests"], "commit requests judged"),
             _card("totals.rejected.requests", t["rejected"]["requests"], f"rejected under {b} (the brokers' check)",
                   b)]
    if r in t["avoidable"]:
        cards.append(_card(f"totals.avoidable.{r}.requests", t["avoidable"][r]["requests"],
                           f"of those, {r} would accept (avoidable)", r))
    cards.append(_card("totals.aborted_transactions.requests", t["aborted_transactions"]["requests"],
                       f"transactions aborted under {b}", b))
    if r in t["aborted_transactions"]["saved"]:
        cards.append(_card(f"totals.aborted_transactions.saved.{r}", t["aborted_transactions"]["saved"][r],
                           f"aborted transactions {r} would save", r))
        cards.append(_card(f"totals.unsafe.{r}.added", t["unsafe"][r]["added"],
                           f"unsafe accepts {r} would let through that {b} stops (verdicts)", r))
    cards += [_card("totals.zombie.verdicts", t["zombie"]["verdicts"], "zombie commits (verdicts)"),
              _card("totals.stale.verdicts", t["stale"]["verdicts"], "stale commits (verdicts)")]
    return f'<div class="cards">{"".join(cards)}</div>'


def _limits(s: dict) -> str:
    items = "".join(f"<li>{escape(x['text'])} <code>{escape(x['code'])}</code></li>" for x in s["limits"])
    return f'<h2 id="limits">What this input could not show</h2><ul class="limits">{items}</ul>'


def _scopes(s: dict) -> str:
    heads = _count_headers(s)
    rows = "".join(f"<tr>{_text(c['cluster'])}{_count_cells(f'clusters.{i}', c, s)}</tr>"
                   for i, c in enumerate(s["clusters"]))
    total = f"<tr><td><b>all</b></td>{_count_cells('totals', s['totals'], s)}</tr>" if len(s["clusters"]) > 1 else ""
    return (f'<h2 id="clusters">Clusters <span class="range">{escape(_range_text(s))}</span></h2>'
            f'<div class="wrap"><table>{_thead(heads, ["cluster"])}<tbody>{rows}{total}</tbody></table></div>')


def _groups(s: dict) -> str:
    heads = _count_headers(s)
    shown = s["groups"][:MAX_GROUP_ROWS]
    rows = "".join(f"<tr>{_text(g['cluster'])}{_text(g['group_id'])}{_count_cells(f'groups.{i}', g, s)}"
                   f"{_num(f'groups.{i}.alerts_total', sum(g['alerts'].values()))}</tr>" for i, g in enumerate(shown))
    more = (f'<p class="note">{len(s["groups"]) - len(shown):,} more groups are in the JSON summary.</p>'
            if len(s["groups"]) > len(shown) else "")
    head = _thead(heads + [("alerts", "alerts of the group in the range")], ["cluster", "group"])
    return (f'<h2 id="groups">Groups <span class="range">{escape(_range_text(s))}; click a column to sort</span></h2>'
            f'<div class="wrap"><table class="sortable" id="groups-table">{head}<tbody>{rows}</tbody></table></div>'
            f"{more}")


def _plots(s: dict) -> str:
    parts = [f'<h2 id="plots">Over time <span class="range">{escape(_range_text(s))}</span></h2>']
    for i, c in enumerate(s["series"]["clusters"][:MAX_CLUSTER_PLOTS]):
        parts.append(plots.fences_plot(s, c, f"fences{i}"))
    r, b = s["rank_policy"], s["broker_policy"]
    parts.append(plots.groups_plot(s, "avoidable", r, "avoidable", "avoidable fences (commit requests)",
                                   f"Commits {b} fences that {r} would accept"))
    parts.append(plots.groups_plot(s, "unsafe_added", r, "unsafe", "unsafe accepts (verdicts)",
                                   f"Unsafe accepts {r} would let through that {b} stops (verdicts)"))
    return "".join(parts)


def _who(s: dict) -> str:
    r, rng = s["rank_policy"], escape(_range_text(s))
    relaxed = s["relaxed_policies"]
    heads = [(f"avoidable ({p})", f"avoidable commit requests under {p}") for p in relaxed]
    heads += [(f"saved txns ({p})", f"aborted transactions {p} would save") for p in relaxed]

    def cells(path: str, row: dict) -> str:
        return ("".join(_num(f"{path}.avoidable_requests.{p}", row["avoidable_requests"].get(p, 0), p) for p in relaxed)
                + "".join(_num(f"{path}.saved_transactions.{p}", row["saved_transactions"].get(p, 0), p)
                          for p in relaxed))

    m = s["top_members"]
    members = "".join(f"<tr>{_text(x['cluster'])}{_text(x['group_id'])}{_text(x['member_id'])}"
                      f"{_text(x['client_id'] or '')}{cells(f'top_members.rows.{i}', x)}</tr>"
                      for i, x in enumerate(m["rows"]))
    c = s["top_clients"]
    clients = "".join(f"<tr>{_text(x['cluster'])}{_text(x['client_id'])}{_text(', '.join(x['groups']))}"
                      f"{_num(f'top_clients.rows.{i}.members', x['members'])}{cells(f'top_clients.rows.{i}', x)}</tr>"
                      for i, x in enumerate(c["rows"]))
    tids = "".join(f"<tr>{_text(x['cluster'])}{_text(x['group_id'])}{_text(x['transactional_id'])}"
                   f"{_num(f'transactional_ids.{i}.alerts', x['alerts'])}</tr>"
                   for i, x in enumerate(s["transactional_ids"]))
    approx = ' <span class="note">(approximate: the busiest were kept)</span>' if m["approximate"] else ""
    return (f'<h2 id="members">Who is behind the avoidable fences <span class="range">{rng}; ranked by {escape(r)}'
            f"</span></h2><h3>Members{approx}</h3>"
            + _table(_thead(heads, ["cluster", "group", "member", "client (classic id)"]), members,
                     "no avoidable fence")
            + "<h3>Clients (read from classic member ids)</h3>"
            + _table(_thead([("members", "members of this client")] + heads, ["cluster", "client", "groups"]), clients,
                     "no client id could be read from the members' ids")
            + "<h3>Transactional ids named by AVOIDABLE_FENCING alerts</h3>"
            + _table(_thead([("alerts", "AVOIDABLE_FENCING alerts naming it (folded by cool-down)")],
                            ["cluster", "group", "transactional id"]), tids, "none"))


def _streams(s: dict) -> str:
    """Streams groups: what the relaxed check saves them (EOS aborts), or that it already does."""
    st = s.get("streams")
    if not st or not st["groups"]:
        return ""
    head = "<tr><th>cluster</th><th>streams group</th><th>txn commits</th><th>EOS aborts avoided</th>" \
           "<th>verdicts</th><th>aborted</th></tr>"
    rows = "".join(f"<tr><td>{escape(g['cluster'])}</td><td>{escape(g['group_id'])}</td><td>{g['txn_requests']:,}</td>"
                   f"<td>{g['eos_aborts_avoided']['requests']:,}</td><td>{g['eos_aborts_avoided']['verdicts']:,}</td>"
                   f"<td>{g['aborted_transactions']:,}</td></tr>" for g in st["groups"])
    return (f'<h2 id="streams">Streams groups (KIP-1071) <span class="range">{escape(_range_text(s))}; the brokers '
            f'run {escape(st["broker_policy"])} on them</span></h2><p id="streams-statement">{escape(st["statement"])}</p>'
            + _table(head, rows, "none"))


def _table(head: str, rows: str, empty: str) -> str:
    if not rows:
        return f'<p class="note">{escape(empty)}</p>'
    return f'<div class="wrap"><table class="sortable">{head}<tbody>{rows}</tbody></table></div>'


def _expiry(s: dict) -> str:
    e, rng = s["expiry"], escape(_range_text(s))
    f_rows = "".join(
        f"<tr>{_text(f['cluster'])}{_text(f['group_id'])}{_ts(f'expiry.forecasts.{i}.deadline_ms', f['deadline_ms'])}"
        f"{_num(f'expiry.forecasts.{i}.partitions', f['partitions'])}{_text(f['group_type'])}{_text(f['group_state'])}"
        f"{_num(f'expiry.forecasts.{i}.members', f['members'])}"
        f"{_ts(f'expiry.forecasts.{i}.kip211_deadline_ms', f['kip211_deadline_ms'])}"
        f"{_ts(f'expiry.forecasts.{i}.pre21_deadline_ms', f['pre21_deadline_ms'])}"
        f"{_ts(f'expiry.forecasts.{i}.ts', f['ts'])}{_num(f'expiry.forecasts.{i}.forecasts', f['forecasts'])}</tr>"
        for i, f in enumerate(e["forecasts"]))
    x_rows = "".join(
        f"<tr>{_text(x['cluster'])}{_text(x['group_id'])}"
        f"{_num(f'expiry.expired.{i}.expired_offsets', x['expired_offsets'])}"
        f"{_num(f'expiry.expired.{i}.alerts', x['alerts'])}{_ts(f'expiry.expired.{i}.last_ts', x['last_ts'])}"
        f"{_text((x['last'] or {}).get('severity'))}{_text((x['last'] or {}).get('expired_partitions'))}</tr>"
        for i, x in enumerate(e["expired"]))
    f_head = ("<thead><tr><th>cluster</th><th>group</th><th>expires (as shipped)</th><th class=n>partitions</th>"
              "<th>group type</th><th>state</th><th class=n>members</th><th>KIP-211 text</th><th>pre-2.1 rule</th>"
              "<th>forecast at</th><th class=n>forecasts</th></tr></thead>")
    x_head = ("<thead><tr><th>cluster</th><th>group</th><th class=n>offsets expired</th><th class=n>alerts</th>"
              "<th>last at</th><th>severity</th><th>partitions (last)</th></tr></thead>")
    return (f'<h2 id="expiry">Offset expiry (KIP-211, contract §4) <span class="range">{rng}</span></h2>'
            '<h3>Forecasts (OFFSETS_EXPIRING, the latest per group)</h3>'
            + _table(f_head, f_rows, "no OFFSETS_EXPIRING alert in the range")
            + "<h3>Expired (OFFSETS_EXPIRED)</h3>" + _table(x_head, x_rows, "no OFFSETS_EXPIRED alert in the range"))


def _truncation(s: dict) -> str:
    t, rng = s["truncation"], escape(_range_text(s))
    g_rows = "".join(
        f"<tr>{_text(g['cluster'])}{_text(g['group_id'])}"
        f"{_num(f'truncation.by_group.{i}.LOG_TRUNCATION', g['LOG_TRUNCATION'])}"
        f"{_num(f'truncation.by_group.{i}.OFFSET_OUT_OF_RANGE', g['OFFSET_OUT_OF_RANGE'])}"
        f"{_num(f'truncation.by_group.{i}.records', g['records'])}</tr>" for i, g in enumerate(t["by_group"]))
    i_rows = "".join(_incident(i, x) for i, x in enumerate(t["incidents"]))
    g_head = ("<thead><tr><th>cluster</th><th>group</th><th class=n>LOG_TRUNCATION</th><th class=n>OFFSET_OUT_OF_RANGE"
              "</th><th class=n>records gone</th></tr></thead>")
    i_head = ("<thead><tr><th>at</th><th>cluster</th><th>group</th><th>kind</th><th>partition</th>"
              "<th class=n>committed offset</th><th class=n>leader epoch</th><th class=n>divergent offset</th>"
              "<th class=n>records</th></tr></thead>")
    listed = t["counts"]["listed"]
    total = t["counts"]["LOG_TRUNCATION"] + t["counts"]["OFFSET_OUT_OF_RANGE"]
    note = f'<p class="note">the latest {listed:,} of {total:,} incidents</p>' if total > listed else ""
    return (f'<h2 id="truncation">Truncation (KIP-320, contract §5) <span class="range">{rng}</span></h2>'
            + _table(g_head, g_rows, "no LOG_TRUNCATION or OFFSET_OUT_OF_RANGE alert in the range")
            + "<h3>Incidents</h3>" + _table(i_head, i_rows, "none") + note)


def _incident(i: int, x: dict) -> str:
    path = f"truncation.incidents.{i}"
    return (f"<tr>{_ts(f'{path}.ts', x['ts'])}{_text(x['cluster'])}{_text(x['group_id'])}{_text(x['kind'])}"
            f"{_text(str(x['topic']) + '-' + str(x['partition']))}"
            f"{_num(f'{path}.committed_offset', x['committed_offset'])}"
            f"{_num(f'{path}.leader_epoch', x['leader_epoch'])}"
            f"{_num(f'{path}.divergent_offset', x['divergent_offset'])}{_num(f'{path}.records', x['records'])}</tr>")


def _alerts(s: dict) -> str:
    by_cluster = s["alerts"]["by_cluster"]
    kinds = [k for k in dict.fromkeys(k for c in by_cluster for k in c["counts"])
             if any(c["counts"].get(k) for c in by_cluster)]
    head = "<thead><tr><th>cluster</th>" + "".join(f'<th class="n">{escape(k)}</th>' for k in kinds) + "</tr></thead>"
    rows = "".join(f"<tr>{_text(c['cluster'])}"
                   + "".join(_num(f"alerts.by_cluster.{i}.counts.{k}", c["counts"].get(k, 0)) for k in kinds)
                   + "</tr>" for i, c in enumerate(by_cluster))
    folded = s["alerts"]["folded_by_cooldown"]
    note = ("".join(f'<p class="note">{escape(k)}: <span data-num="alerts.folded_by_cooldown.{escape(k)}">{n:,}'
                    "</span> more occurrences folded by the cool-down</p>" for k, n in folded.items()))
    return (f'<h2 id="alerts">Alerts by kind <span class="range">{escape(_range_text(s))}</span></h2>'
            + _table(head, rows if kinds else "", "no alert in the range") + note)


def _inputs(s: dict) -> str:
    rows = "".join(f"<tr>{_text(x['kind'])}{_text(x['name'])}{_num(f'inputs.{i}.records', x['records'])}"
                   f"{_num(f'inputs.{i}.bad', x['bad'])}{_num(f'inputs.{i}.outside_range', x['outside_range'])}</tr>"
                   for i, x in enumerate(s["inputs"]))
    head = ("<thead><tr><th>input</th><th>name</th><th class=n>records</th><th class=n>unreadable</th>"
            "<th class=n>outside the range</th></tr></thead>")
    return '<h2 id="inputs">Inputs</h2>' + _table(head, rows, "none")


_NUMBER_WORDS = {2: "two", 3: "three", 4: "four", 5: "five", 6: "six"}  # how many checks the summary has


def render(summary: dict, *, json_name: str | None = None) -> str:
    """The page for ``summary`` (from :meth:`.summary.ReportAggregator.summary`)."""
    s = summary
    b, r = s["broker_policy"], s["rank_policy"]
    title = f"fencewatch report: {_range_text(s)}"
    json_note = (f' The same numbers are in <code>{escape(json_name)}</code>.' if json_name else "")
    checks = _NUMBER_WORDS.get(len(s["policies"]), str(len(s["policies"])))
    intro = (f'<p class="meta">Every commit in the range was judged under the {checks} checks of contract §3. '
             f"The brokers run <b>{escape(b)}</b>; a fence is <i>avoidable</i> under another check when that check "
             f"would accept the commit. Upgrading to Kafka 4.3 moves consumer groups to <b>kip1251</b>. "
             f"Numbers are commit requests (by event id) unless they say verdicts, i.e. (commit, partition) pairs; "
             f"column headers name the check each number is under; hover a header for its meaning.{json_note}</p>")
    body = (f'<h1>{escape(title)}</h1><p class="meta">{escape(s["generated_by"])} &middot; brokers&rsquo; check '
            f'<b data-policy="{escape(b)}" id="broker-policy">{escape(b)}</b> &middot; headline compared with '
            f'<b id="rank-policy">{escape(r)}</b> &middot; range <span id="range" '
            f'data-from-ms="{s["range"]["from_ms"]}" data-to-ms="{s["range"]["to_ms"]}">'
            f"{escape(_range_text(s))}</span></p>"
            + intro + _headline(s) + _limits(s) + _scopes(s) + _plots(s) + _groups(s) + _streams(s) + _who(s) + _expiry(s)
            + _truncation(s) + _alerts(s) + _inputs(s))
    return (f'<!DOCTYPE html><html lang="en"><head><meta charset="utf-8"><title>{escape(title)}</title>'
            f'<meta name="viewport" content="width=device-width, initial-scale=1"><style>{_CSS}</style></head>'
            f"<body>{body}<script>{_JS}</script></body></html>\n")
