"""Helpers for tests that read topics back from the broker."""
from confluent_kafka import OFFSET_BEGINNING, Consumer, TopicPartition


def read_all(bootstrap, topic):
    """Every record of ``topic``, by partition assignment (no consumer group needed)."""
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": "unused", "enable.auto.commit": False})
    parts = c.list_topics(topic, timeout=10).topics[topic].partitions
    ends = {p: c.get_watermark_offsets(TopicPartition(topic, p), timeout=10)[1] for p in parts}
    c.assign([TopicPartition(topic, p, OFFSET_BEGINNING) for p in parts])
    out, idle = [], 0
    seen = {p: 0 for p in parts}
    # Past the watermarks, 2 s of quiet ends the read (a batch Tansu's watermark did not show yet
    # arrives within that); before them, 10 s.
    while idle < (4 if all(seen[p] >= ends[p] for p in parts) else 20):
        msg = c.poll(0.5)
        if msg is None:
            idle += 1
            continue
        idle = 0
        if msg.error() is None:
            out.append(msg)
            seen[msg.partition()] += 1
    c.close()
    # Tansu's watermark may lag one produce batch; what we read must cover it.
    assert all(sum(1 for m in out if m.partition() == p) >= ends[p] for p in parts)
    return out
