"""The report's aggregation against small inputs checked by hand (contract §3, §6, §8).

Each verdict below is written out as ``sinks/jsonl.py`` writes it; the expected numbers are
counted by hand from the table in each test's docstring.
"""
from __future__ import annotations

import pytest
from report_helpers import T0, I, N, S, U, verdict

from fencewatch.sinks.report.assemble import summarize as summary_of
from fencewatch.sinks.report.summary import ReportAggregator, classic_client_id
from fencewatch.sinks.report.timeline import MAX_BUCKETS, MINUTE_MS

def sample() -> list[dict]:
    """| request | group | kind | partition: strict / member_revocation / assignment_epoch / kip1251 -> class |
    | e1 | g1 | commit     | p0, p1: S / N / N / N -> avoidable                                              |
    | e2 | g1 | txn_commit | p0: I / N / N / N avoidable; p1: I / N / I / I zombie, unsafe                   |
    | e3 | g2 | commit     | p0: N / N / N / N accepted, broker NONE (agrees)                                |
    | e4 | g2 | commit     | p0: U / U / U / U unknown_member, broker UNKNOWN_MEMBER_ID (agrees)             |
    | e5 | g2 | txn_commit | p0: N / N / N / N accepted, broker ILLEGAL_GENERATION (model differs)           |
    | e6 | g2 | commit     | p0: U / U / U / U other, warming up                                             |
    | e7 | g1 | commit     | p0: S / S / S / S stale                                                         |"""
    return [
        verdict("e1", T0 + 1_000, "g1", "m1", "commit", 0, (S, N, N, N), "avoidable"),
        verdict("e1", T0 + 1_000, "g1", "m1", "commit", 1, (S, N, N, N), "avoidable"),
        verdict("e2", T0 + 61_000, "g1", "consumer-app-1-0123456789ab", "txn_commit", 0, (I, N, N, N), "avoidable"),
        verdict("e2", T0 + 61_000, "g1", "consumer-app-1-0123456789ab", "txn_commit", 1, (I, N, I, I), "zombie",
                unsafe=True),
        verdict("e3", T0 + 62_000, "g2", "m3", "commit", 0, (N, N, N, N), "accepted", broker_error=N, agrees=True),
        verdict("e4", T0 + 63_000, "g2", "m4", "commit", 0, (U, U, U, U), "unknown_member", broker_error=U,
                agrees=True),
        verdict("e5", T0 + 125_000, "g2", "m5", "txn_commit", 0, (N, N, N, N), "accepted", broker_error=I,
                agrees=False),
        verdict("e6", T0 + 126_000, "g2", "m6", "commit", 0, (U, U, U, U), "other", warming=True),
        verdict("e7", T0 + 127_000, "g1", "m1", "commit", 0, (S, S, S, S), "stale"),
    ]


def summarize(records, **kw) -> dict:
    agg = ReportAggregator(**kw)
    agg.add_verdicts(records)
    return summary_of(agg, alerts_read=False)


def group(s: dict, name: str) -> dict:
    return next(g for g in s["groups"] if g["group_id"] == name)


def test_totals_by_hand():
    t = summarize(sample())["totals"]
    assert (t["requests"], t["verdicts"]) == (7, 9)
    assert t["requests_by_kind"] == {"commit": 5, "txn_commit": 2}
    assert t["classes"] == {"accepted": 2, "avoidable": 3, "zombie": 1, "stale": 1, "unknown_member": 1,
                            "future_epoch": 0, "other": 1}
    # strict rejects e1, e2, e4, e6, e7 (5 requests; 7 verdicts)
    assert t["rejected"] == {"policy": "strict", "requests": 5, "verdicts": 7}
    assert t["rejected_by_policy"] == {"strict": {"requests": 5, "verdicts": 7},
                                       "member_revocation": {"requests": 3, "verdicts": 3},
                                       "assignment_epoch": {"requests": 4, "verdicts": 4},
                                       "kip1251": {"requests": 4, "verdicts": 4}}
    # kip1251 accepts e1 whole (1 request), e2 only on p0: the request stays rejected, so the
    # class follows it and e2's p0 is saved by nothing (contract §3.3, issue 44): e1's 2 lines
    assert t["avoidable"] == {"member_revocation": {"requests": 2, "verdicts": 4},
                              "assignment_epoch": {"requests": 1, "verdicts": 2},
                              "kip1251": {"requests": 1, "verdicts": 2}}
    # e2 aborted (no broker answer: strict's prediction), e5 aborted (the broker said so)
    assert t["aborted_transactions"] == {"policy": "strict", "requests": 2,
                                         "saved": {"member_revocation": 2, "assignment_epoch": 1, "kip1251": 1}}
    assert t["unsafe"]["member_revocation"] == {"verdicts": 1, "added": 1}
    assert t["unsafe"]["kip1251"] == {"verdicts": 0, "added": 0}
    assert t["zombie"] == {"verdicts": 1, "rejected_by_every_policy": 0}  # member_revocation accepts it
    assert t["stale"] == {"verdicts": 1, "rejected_by_every_policy": 1}
    assert t["broker"] == {"answered_requests": 3, "answered_verdicts": 3, "rejected_requests": 2,
                           "errors": {U: 1, I: 1}, "model_agrees": {"true": 2, "false": 1, "unknown": 6}}
    assert t["warming_up_verdicts"] == 1


def test_groups_sum_to_totals_and_rank_by_avoidable():
    s = summarize(sample())
    assert [g["group_id"] for g in s["groups"]] == ["g1", "g2"]  # g1 has the avoidable fence
    g1, g2 = group(s, "g1"), group(s, "g2")
    assert (g1["requests"], g2["requests"]) == (3, 4)
    assert (g1["rejected"]["requests"], g2["rejected"]["requests"]) == (3, 2)
    assert (g1["first_ts"], g1["last_ts"]) == (T0 + 1_000, T0 + 127_000)
    assert s["clusters"][0]["requests"] == 7


def test_kip1251_brokers_make_strict_the_other_policy():
    t = summarize(sample(), broker_policy="kip1251")["totals"]
    assert t["rejected"] == {"policy": "kip1251", "requests": 4, "verdicts": 4}
    assert set(t["avoidable"]) == {"strict", "member_revocation", "assignment_epoch"}
    assert t["avoidable"]["strict"] == {"requests": 0, "verdicts": 0}  # strict accepts a subset of kip1251's
    assert t["avoidable"]["member_revocation"] == {"requests": 1, "verdicts": 1}  # e2's zombie partition
    assert t["unsafe"]["member_revocation"]["added"] == 1


def test_series_count_fences_per_minute_under_each_policy():
    s = summarize(sample())
    series = s["series"]
    assert (series["bucket_ms"], series["start_ms"], series["buckets"]) == (MINUTE_MS, T0, 3)
    c = series["clusters"][0]
    assert c["requests"] == [1, 3, 3]
    assert c["fenced"]["strict"] == [1, 2, 2]
    assert c["fenced"]["kip1251"] == [0, 2, 2]
    assert c["aborted"] == [0, 1, 1] and c["saved"]["kip1251"] == [0, 0, 1]
    g1 = next(g for g in series["groups"] if g["group_id"] == "g1")
    assert g1["avoidable"]["kip1251"] == [1, 0, 0]
    assert g1["avoidable"]["member_revocation"] == [1, 1, 0]
    assert g1["unsafe_added"]["member_revocation"] == [0, 1, 0]


def test_members_and_clients_behind_avoidable_fences():
    s = summarize(sample())
    rows = {r["member_id"]: r for r in s["top_members"]["rows"]}
    assert set(rows) == {"m1", "consumer-app-1-0123456789ab", "m5"}
    assert rows["m1"]["avoidable_requests"] == {"member_revocation": 1, "assignment_epoch": 1, "kip1251": 1}
    assert rows["consumer-app-1-0123456789ab"]["saved_transactions"]["member_revocation"] == 1
    assert s["top_members"]["rows"][0]["member_id"] == "m1"  # ranked by kip1251
    assert [c["client_id"] for c in s["top_clients"]["rows"]] == ["consumer-app-1"]
    assert s["top_clients"]["members_without_client_id"] == 2


def test_lines_of_a_request_apart_count_once_and_range_filters():
    records = sample()
    interleaved = [records[0], records[2], records[4], records[1], records[3]]  # e1, e2, e3, e1, e2
    t = summarize(interleaved)["totals"]
    assert (t["requests"], t["verdicts"]) == (3, 5)
    s = summarize(sample(), from_ms=T0 + 60_000, to_ms=T0 + 125_000)
    assert (s["totals"]["requests"], s["range"]["from_ms"], s["range"]["to_ms"]) == (4, T0 + 60_000, T0 + 125_000)
    assert s["inputs"][0]["outside_range"] == 4
    assert "OUTSIDE_RANGE" in [x["code"] for x in s["limits"]]


def test_bad_records_are_counted_and_skipped():
    records = sample()
    bad = [{**records[0], "kind": "heartbeat"}, {k: v for k, v in records[0].items() if k != "strict"},
           {**records[0], "ts": "soon"}]
    agg = ReportAggregator()
    agg.add_verdicts(bad + records)
    s = summary_of(agg)
    assert s["totals"]["verdicts"] == 9 and s["inputs"][0]["bad"] == 3 and s["inputs"][0]["records"] == 12
    assert "BAD_RECORDS" in [x["code"] for x in s["limits"]]


def test_limits_say_what_the_input_could_not_show():
    codes = [x["code"] for x in summarize(sample())["limits"]]
    for code in ("NO_ALERTS_INPUT", "SOME_BROKER_ANSWERS", "MODEL_DIVERGENCE", "WARMING_UP", "UNKNOWN_MEMBERS",
                 "EPOCH_SOURCE_UNKNOWN", "NO_CLIENT_IDS", "NO_HEARTBEATS"):
        assert code in codes
    plain = [verdict("x", T0, "g", "m", "commit", 0, (N, N, N, N), "accepted")]
    codes = [x["code"] for x in summarize(plain)["limits"]]
    assert "NO_BROKER_ANSWERS" in codes and "WARMING_UP" not in codes and "MODEL_DIVERGENCE" not in codes
    agg = ReportAggregator()
    agg.add_verdicts(plain)
    events = {"types": {"member_assignment": 4, "offset_commit": 1}, "assignments_with_epochs": 0}
    codes = [x["code"] for x in summary_of(agg, alerts_read=True, events=events)["limits"]]
    assert "EPOCHS_DERIVED" in codes and "NO_HEARTBEATS" in codes and "EPOCH_SOURCE_UNKNOWN" not in codes
    assert "NO_ALERTS_INPUT" not in codes


def test_a_long_range_widens_the_buckets_and_keeps_every_count():
    records = [verdict(f"e{i}", T0 + i * 3_600_000, "g", "m", "commit", 0, (S, N, N, N), "avoidable")
               for i in range(72)]  # three days, one an hour
    s = summarize(records)
    series = s["series"]
    assert series["bucket_ms"] == 5 * MINUTE_MS and series["buckets"] <= MAX_BUCKETS
    assert sum(series["clusters"][0]["fenced"]["strict"]) == 72
    assert sum(series["groups"][0]["avoidable"]["kip1251"]) == 72
    assert "WIDE_BUCKETS" in [x["code"] for x in s["limits"]]


def alert(alert_id, ts, group, kind, **details):
    return {"alert_id": alert_id, "ts": ts, "cluster": "default", "group_id": group, "kind": kind,
            "severity": "warning", "summary": "", "details": {k: str(v) for k, v in details.items()}}


def test_expiry_truncation_and_alert_sections():
    agg = ReportAggregator()
    agg.add_alerts([
        alert("a1", T0, "g1", "OFFSETS_EXPIRING", deadline_ms=T0 + 3_600_000, partitions=4, group_type="consumer",
              group_state="Empty", members=0, kip211_deadline_ms=T0 + 7_200_000, pre21_deadline_ms=""),
        alert("a2", T0 + 10, "g1", "OFFSETS_EXPIRING", deadline_ms=T0 + 3_700_000, partitions=5, members=0),
        alert("a3", T0 + 3_700_000, "g1", "OFFSETS_EXPIRED", expired_count=5, expired_partitions="t-0,t-1"),
        alert("a4", T0 + 20, "g2", "LOG_TRUNCATION", topic="t", partition=1, committed_offset=900, leader_epoch=0,
              divergent_offset=871, records=29),
        alert("a5", T0 + 30, "g2", "OFFSET_OUT_OF_RANGE", topic="t", partition=2, committed_offset=5, records=95),
        alert("a5", T0 + 30, "g2", "OFFSET_OUT_OF_RANGE", topic="t", partition=2, committed_offset=5, records=95),
        alert("a6", T0 + 40, "g2", "AVOIDABLE_FENCING", transactional_id="tx-1", suppressed_before=7),
    ])
    s = summary_of(agg, alerts_read=True)
    f = s["expiry"]["forecasts"]
    assert len(f) == 1 and f[0]["deadline_ms"] == T0 + 3_700_000 and f[0]["partitions"] == 5 and f[0]["forecasts"] == 2
    assert s["expiry"]["counts"]["expired_offsets"] == 5
    assert s["expiry"]["expired"][0]["last"]["expired_partitions"] == "t-0,t-1"
    tr = s["truncation"]
    assert tr["counts"] == {"LOG_TRUNCATION": 1, "OFFSET_OUT_OF_RANGE": 1, "records": 124, "listed": 2}
    assert tr["incidents"][0]["kind"] == "OFFSET_OUT_OF_RANGE"  # latest first
    assert s["alerts"]["duplicates_dropped"] == 1
    assert s["alerts"]["folded_by_cooldown"] == {"AVOIDABLE_FENCING": 7}
    assert s["transactional_ids"] == [{"cluster": "default", "group_id": "g2", "transactional_id": "tx-1", "alerts": 1}]
    assert {g["group_id"] for g in s["groups"]} == {"g1", "g2"}  # groups known from alerts only
    assert "ALERTS_FOLDED" in [x["code"] for x in s["limits"]]


@pytest.mark.parametrize("member_id, client", [
    ("consumer-group-00005-1-b3b237e28bfd", "consumer-group-00005-1"),
    ("app-7-2f1c6a9e-0d5b-4c1e-9a7b-3c2d1e0f9a8b", "app-7"),
    ("2xDHiY9cFIgrIgmpSG9D2Q", None),  # KIP-848: a base64url UUID
    ("_cncsknAZtg5-ZeJA9wlyQ", None),
    ("", None), (None, None), ("plain", None),
])
def test_classic_client_id(member_id, client):
    assert classic_client_id(member_id) == client
