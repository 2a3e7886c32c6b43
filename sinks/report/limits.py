"""What the input could not show: plain statements the report puts next to its numbers.

Each is ``{"code", "text"}``, decided from the counts (a verdict says whether it carries the
broker's answer, whether it was judged in warm-up, its class) and from what the caller knows of
its inputs (``facts``: ``alerts_read``, ``verdicts_read``, ``topics`` read up to their end
offsets, ``events``: a trace's event types when the report ran it through replay). A number
that is 0 because its input was not read is said to be unknown, never left to look like "none".
"""
from __future__ import annotations

MEMBERSHIP_TYPES = ("member_assignment", "classic_join", "classic_sync")


def limits(doc: dict, agg, facts: dict) -> list[dict]:
    out: list[dict] = []
    t = doc["totals"]
    b = doc["broker_policy"]

    def say(code: str, text: str) -> None:
        out.append({"code": code, "text": text})

    if not t["verdicts"]:
        say("NO_VERDICTS", "No verdict in the range read: the commit counts are 0 because nothing was judged "
            "here, not because nothing was fenced." if facts.get("verdicts_read", True) else
            "No verdict input was read: the commit counts are unknown, not 0.")
    if not facts.get("alerts_read", False):
        say("NO_ALERTS_INPUT", "No alert input was read: the expiry and truncation sections are unknown, not empty "
            "(give --alerts, or --alerts-topic).")
    _broker_answers(t, b, say)
    if t["warming_up_verdicts"]:
        say("WARMING_UP", f"{t['warming_up_verdicts']} verdict(s) were judged during warm-up (a member the monitor "
            "had not seen yet, class other): no policy's answer for them is known.")
    unknown = t["classes"].get("unknown_member", 0)
    if unknown:
        say("UNKNOWN_MEMBERS", f"{unknown} verdict(s) come from members the monitor never saw (unknown_member). "
            "If the monitor started reading mid-stream without warm-up, some may be members that joined before; "
            "they count as rejected under every policy.")
    _membership(facts.get("events"), say)
    without = doc["top_clients"]["members_without_client_id"]
    say("NO_CLIENT_IDS", "Verdicts name members, not clients: client ids are read from classic member ids "
        f"(clientId-UUID) only ({without} member(s) with avoidable fences have none, e.g. KIP-848 members); "
        "transactional ids only from AVOIDABLE_FENCING alerts, which the cool-down folds.")
    folded = sum(doc["alerts"]["folded_by_cooldown"].values())
    if folded:
        say("ALERTS_FOLDED", f"{folded} per-commit alert occurrence(s) were folded into later alerts by the "
            "cool-down (suppressed_before): alert counts are lower than occurrences; the commit counts come "
            "from verdicts and are complete.")
    for i in doc["inputs"]:
        if i["bad"]:
            say("BAD_RECORDS", f"{i['bad']} of {i['records']} record(s) of {i['kind']} {i['name']} could not be "
                "read and were skipped" + (f" (first: {agg.bad_examples[0]})" if agg.bad_examples else "") + ".")
        if i["outside_range"]:
            say("OUTSIDE_RANGE", f"{i['outside_range']} record(s) of {i['kind']} {i['name']} fell outside the "
                "requested range and were left out.")
    for topic in facts.get("topics", ()):
        say("TOPIC_SNAPSHOT", f"Topic {topic} was read from its beginning to the end offsets seen at start: "
            "records written after that (or already deleted by retention) are not in this report.")
    if doc["top_members"]["approximate"]:
        say("MEMBERS_APPROXIMATE", f"More than {agg.max_members} members had avoidable fences: the member and "
            "client tables kept the busiest; their counts may be low for members pruned early.")
    width = doc["series"]["bucket_ms"]
    if width > 60_000:
        say("WIDE_BUCKETS", f"The range spans more than a day of minutes: the series are per {width // 60_000} "
            "minutes.")
    if b == "kip1251":
        say("BROKERS_RUN_KIP1251", "The brokers run kip1251 already: nothing is avoidable under it; 'avoidable' "
            "shows what KAFKA-19779's other designs would change.")
    if facts.get("events") is None:
        say("NO_HEARTBEATS", "Heartbeat answers (FENCED_MEMBER_EPOCH, UNKNOWN_MEMBER_ID) are not verdicts: they "
            "are not counted here (see fencewatch_broker_errors_total).")
    if doc["expiry"]["forecasts"]:
        say("FORECASTS_AS_OF", "Expiry forecasts are as of each group's last OFFSETS_EXPIRING alert in the range; "
            "a group that committed or was subscribed again since may no longer expire then.")
    return out


def _broker_answers(t: dict, b: str, say) -> None:
    verdicts, answered = t["verdicts"], t["broker"]["answered_verdicts"]
    if verdicts and not answered:
        say("NO_BROKER_ANSWERS", f"No verdict carries the broker's answer (broker_error): every rejection here is "
            f"what the {b} check predicts, model_agrees is unknown, and nothing here confirms that the brokers "
            f"run {b}.")
    elif answered < verdicts:
        say("SOME_BROKER_ANSWERS", f"{answered} of {verdicts} verdicts carry the broker's answer; for the others "
            f"rejections are what the {b} check predicts.")
    diverged = t["broker"]["model_agrees"]["false"]
    if diverged:
        say("MODEL_DIVERGENCE", f"For {diverged} verdict(s) the broker answered otherwise than the {b} check "
            "predicts (MODEL_DIVERGENCE): if the brokers run another check (4.3 runs kip1251), judge again with "
            "--broker-policy; else the membership seen was incomplete.")


def _membership(events: dict | None, say) -> None:
    if events is None:
        say("EPOCH_SOURCE_UNKNOWN", "Verdicts do not say whether assignment epochs came from the brokers "
            "(KIP-1251 AssignmentEpochs, __consumer_offsets) or were derived from member epochs (contract §2, e.g. "
            "from heartbeats in a request log): the counts under member_revocation, assignment_epoch and kip1251 "
            "are only as exact as those epochs.")
        return
    types = events.get("types", {})
    assignments = types.get("member_assignment", 0)
    with_epochs = events.get("assignments_with_epochs", 0)
    if not any(types.get(t) for t in MEMBERSHIP_TYPES):
        say("NO_MEMBERSHIP", "The trace has no membership events (member_assignment, classic_join, "
            "classic_sync): every commit of a member is judged unknown_member.")
    elif assignments and not with_epochs:
        say("EPOCHS_DERIVED", f"None of the {assignments} member_assignment events carried assignment_epochs: "
            "assignment epochs were derived from member epochs (contract §2).")
    elif with_epochs < assignments:
        say("EPOCHS_PARTLY_DERIVED", f"{with_epochs} of {assignments} member_assignment events carried "
            "assignment_epochs; for the others they were derived (contract §2).")
    if not types.get("heartbeat"):
        say("NO_HEARTBEATS", "The trace has no heartbeat events: heartbeat answers (FENCED_MEMBER_EPOCH, "
            "UNKNOWN_MEMBER_ID) are not in this report.")
