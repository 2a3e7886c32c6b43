"""Streams groups' tasks -> partitions in the rules (``state.streams``, KIP-1071), one edge at a
time: through the topology (Kafka's ``StreamsGroup.createAssignmentEpochValidator`` looks a
committed partition up through ``sourceTopicMap`` among the member's active tasks), a task without
an epoch at the member epoch (``TasksTupleWithEpochs.fromCurrentAssignmentRecord``), an assignment
held until the group's first topology, a topology change re-resolving the members, and the
member's tasks forgotten with the member."""
from __future__ import annotations

from fencewatch.state import group as grp
from fencewatch.state.config import RulesConfig
from fencewatch.state.events import MemberAssignment, MemberLeft, OffsetCommit, StreamsTask, StreamsTopology, Subtopology
from fencewatch.state.events import CommitOffsets, CommitOffset, GroupStateChange
from fencewatch.state.model import KafkaError, Protocol
from fencewatch.state.streams import Topology, resolve, task_partitions

IN, REP = "in", "rep"
CFG = RulesConfig()
TWO = Topology(0, (Subtopology("0", (IN,)), Subtopology("1", (), (REP,))))


def topology_event(ts=1, *subs):
    return StreamsTopology(ts, "c", "app", f"t{ts}", ts, 0, subs or TWO.subtopologies)


def tasks_event(member_id="m", epoch=3, ts=2, active=(("0", (0, 1), (2, 3)),), pending=(), instance_id=None):
    return MemberAssignment(ts, "c", "app", f"a{ts}", ts, member_id, Protocol.STREAMS, epoch, (), (),
                            instance_id=instance_id, active_tasks=tuple(StreamsTask(*t) for t in active),
                            active_tasks_pending_revocation=tuple(StreamsTask(*t) for t in pending))


def run(*events):
    g, out = grp.new_group("c", "app"), grp.Outputs()
    for ev in events:
        g = grp.process(g, ev, CFG, out)
    return g, out


def test_a_task_owns_its_partition_of_each_input_topic_at_its_epoch():
    tps, epochs = task_partitions(TWO, [StreamsTask("0", (1, 0), (5, 3)), StreamsTask("1", (1,))], 7)
    assert dict(zip(tps, epochs)) == {(IN, 0): 3, (IN, 1): 5, (REP, 1): 7}
    assert task_partitions(TWO, [StreamsTask("9", (0,))], 7) == ((), ())  # a subtopology it lacks: nothing known


def test_a_task_of_an_unknown_subtopology_hides_none_of_the_others():
    """A task the topology does not name (an older topology, say) owns nothing known, and the
    tasks after it still own theirs (a mutant that stopped at it survived the tests before)."""
    tps, epochs = task_partitions(TWO, [StreamsTask("9", (0,)), StreamsTask("0", (1,), (4,))], 7)
    assert dict(zip(tps, epochs)) == {(IN, 1): 4}


def test_partitions_the_event_lists_with_their_epochs_keep_them():
    """Partitions the event lists itself with one epoch each keep those epochs (a list of epochs
    of another length is not theirs: the member epoch); a task's epoch wins where both name one."""
    listed = tasks_event(epoch=6)._replace(assigned=((IN, 0), (IN, 9)), assigned_epochs=(1, 4))
    ev = resolve(listed, TWO)
    assert dict(zip(ev.assigned, ev.assigned_epochs)) == {(IN, 0): 2, (IN, 1): 3, (IN, 9): 4}
    uneven = tasks_event(epoch=6)._replace(assigned=((IN, 9),), assigned_epochs=(1, 4))
    assert dict(zip(*(lambda e: (e.assigned, e.assigned_epochs))(resolve(uneven, TWO))))[(IN, 9)] == 6


def test_resolve_gives_partitions_pending_revocation_and_the_subscription():
    ev = resolve(tasks_event(active=(("1", (2,), (3,)),), pending=(("0", (1,), (2,)),)), TWO)
    assert (ev.assigned, ev.assigned_epochs, ev.pending_revocation, ev.pending_epochs) == (
        ((REP, 2),), (3,), ((IN, 1),), (2,))
    assert ev.subscribed_topics == (IN, REP)


def test_partitions_the_event_lists_besides_its_tasks_are_kept():
    listed = tasks_event()._replace(assigned=((IN, 9),), assigned_epochs=None)
    ev = resolve(listed, TWO)
    assert dict(zip(ev.assigned, ev.assigned_epochs)) == {(IN, 0): 2, (IN, 1): 3, (IN, 9): 3}


def test_the_member_owns_its_tasks_partitions_and_a_commit_of_them_is_judged_by_them():
    g, out = run(topology_event(), tasks_event(),
                 OffsetCommit(5, "c", "app", "x", 5, False, "m", 2, CommitOffsets.of([CommitOffset(IN, 0, 9)])))
    assert dict(g.members["m"].assigned_partitions) == {(IN, 0): 2, (IN, 1): 3}
    assert g.group_type == "streams" and g.subscribed == {IN, REP}
    (cv,) = out.commits
    assert cv.parts[0].kip1251 == KafkaError.NONE.value  # epoch 2 >= the task's assignment epoch 2


def test_an_assignment_before_any_topology_is_held_then_applied_when_it_arrives():
    g, _ = run(tasks_event(epoch=2, ts=2, active=(("0", (0,)),)), tasks_event(epoch=3, ts=3))
    assert g.members == {} and g.exists and g.group_type == "streams"
    assert [e.member_epoch for e in g.member_tasks.values()] == [3]  # the latest one
    g, _ = run(tasks_event(epoch=2, ts=2, active=(("0", (0,)),)), tasks_event(epoch=3, ts=3), topology_event(ts=4))
    m = g.members["m"]
    assert (m.member_epoch, dict(m.assigned_partitions)) == (3, {(IN, 0): 2, (IN, 1): 3})
    assert g.group_epoch == 3 and g.state_ts == 4


def test_a_topology_change_re_resolves_every_member():
    g, _ = run(topology_event(1, Subtopology("0", (IN,))), tasks_event(), tasks_event("n", active=(("1", (0,), (3,)),)))
    assert dict(g.members["n"].assigned_partitions) == {}  # subtopology 1 unknown yet
    before = g.members["m"]
    changed = (Subtopology("0", (IN, "in2")), Subtopology("1", (), (REP,)))
    g = grp.process(g, topology_event(5, *changed), CFG, grp.Outputs())
    assert dict(g.members["n"].assigned_partitions) == {(REP, 0): 3}
    assert dict(g.members["m"].assigned_partitions) == {(IN, 0): 2, (IN, 1): 3, ("in2", 0): 2, ("in2", 1): 3}
    assert g.members["m"].member_epoch == before.member_epoch == 3
    assert (g.owners[(REP, 0)], g.owners[("in2", 1)]) == (("n",), ("m",)) and g.subscribed == {IN, "in2", REP}
    members = dict(g.members)
    same = grp.process(g, topology_event(6, *changed), CFG, grp.Outputs())
    assert all(same.members[k] is v for k, v in members.items())  # the same topology again changes nothing


def test_the_members_tasks_go_with_the_member():
    g, _ = run(tasks_event(), MemberLeft(3, "c", "app", "l", 3, "m", "leave"), topology_event(4))
    assert g.members == {} and g.member_tasks == {}
    g, _ = run(topology_event(), tasks_event(instance_id="i"), MemberLeft(3, "c", "app", "l", 3, "m", "static_leave"))
    assert g.member_tasks == {} and g.members["m"].member_epoch == -2  # kept for a takeover, not re-resolved
    g, _ = run(topology_event(), tasks_event(instance_id="i"), MemberLeft(3, "c", "app", "l", 3, "m", "static_leave"),
               tasks_event("m2", epoch=4, ts=4, instance_id="i"))
    assert set(g.members) == set(g.member_tasks) == {"m2"}  # the static member's takeover
    g, _ = run(tasks_event(), GroupStateChange(3, "c", "app", "e", 3, "Empty", "streams"))
    assert g.member_tasks == {}
