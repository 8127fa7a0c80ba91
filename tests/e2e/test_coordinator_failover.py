"""Group coordinator failover: the agent coordinating a group is killed with SIGKILL while the
group consumes with manual commits.

Three agents (`skiff metadata` on PostgreSQL, a moto S3 bucket); the consumers are bootstrapped
with all three. The group's coordinator is found with a raw FindCoordinator (all agents agree)
and killed mid-consumption. Until its TTL runs out the survivors still name it (it is
unreachable); then rendezvous hashing moves the group to a survivor, which takes the group's
lease once the dead agent's has lapsed and loads its last stored generation, with the leader's
assignment (agent.groups.fencing; as Kafka's coordinator loads a group on failover): the members
get NOT_COORDINATOR (or cannot connect), find the new coordinator and go on in their generation,
with their partitions, without a rebalance (a client may still rejoin on its own, e.g. when its
own session check gave up on the dead coordinator). Then a third member joins: the taken-over
group rebalances on the new coordinator and every partition resumes from the offsets committed
in metadata.

The consumers are driven from one thread (poll a member, commit what it consumed, next
member), so no commit is ever in flight when the agent is killed: the committed offsets at the
kill are exactly the last successful commits. What is checked:

- after every assignment (the first one, any rebalance after the kill, the third member's),
  each partition's first delivered record is at exactly the offset committed when the
  assignment happened (0 without a commit), or, for a member given back a partition it had,
  its own position: nothing committed is re-delivered, nothing is skipped; a member that keeps
  its partitions across the failover goes on without a gap or a repeat;
- after the failover, records produced then are consumed and committed through the new
  coordinator in every partition (both members go on there), and again once the third member
  shares them; a commit of the old generation never succeeds for a partition already given
  out again in a new generation;
- every record (produced before and after the failover) is consumed at least once, with the
  right contents; re-deliveries are only of records consumed but not committed before a
  partition moved;
- the commits after the failover land on the new coordinator: a raw OffsetFetch to it returns
  them; the other survivor answers NOT_COORDINATOR.
"""

from __future__ import annotations

import signal
import time
from collections import defaultdict
from collections.abc import Callable
from dataclasses import dataclass, field

import pytest
from kio.schema.errors import ErrorCode
from kio.schema.find_coordinator.v4.request import FindCoordinatorRequest
from kio.schema.offset_fetch.v8.request import (
    OffsetFetchRequest,
    OffsetFetchRequestGroup,
    OffsetFetchRequestTopics,
)
from kio.schema.types import GroupId, TopicName
from kio.static.primitive import i8, i32

from tests.e2e.test_cluster import start_cluster, wait_for_brokers
from tests.e2e.test_group_clients import (  # noqa: F401 - member_factory is a fixture
    CommitFailed,
    Member,
    MemberFactory,
    Rebalance,
    Rec,
    _name,
    create_topic,
    member_factory,
    produce,
    stop,
    tagged,
)
from tests.support.agents import SkiffProcess
from tests.support.kafka_wire import send_request
from tests.support.s3servers import S3Bucket

PARTITIONS = 6
BEFORE = 100  # records per partition produced before the kill
AFTER = 20  # records per partition produced once the group has moved
POLL_RECORDS = 10  # at most this many records per poll, so that the kill comes mid-consumption
WAIT_S = 120.0


def find_coordinator(bootstrap: str, group: str) -> tuple[ErrorCode, int]:
    """(error, port of the coordinator) as the agent at `bootstrap` answers FindCoordinator v4."""
    resp = send_request(bootstrap, FindCoordinatorRequest(key_type=i8(0), coordinator_keys=(group,))).parse()
    (c,) = resp.coordinators
    return c.error_code, int(c.port)


def offset_fetch(bootstrap: str, group: str, topic: str) -> tuple[ErrorCode, dict[int, int]]:
    """A raw OffsetFetch v8 of every partition: (group error, partition -> committed offset)."""
    req = OffsetFetchRequest(
        groups=(
            OffsetFetchRequestGroup(
                group_id=GroupId(group),
                topics=(
                    OffsetFetchRequestTopics(
                        name=TopicName(topic), partition_indexes=tuple(i32(p) for p in range(PARTITIONS))
                    ),
                ),
            ),
        ),
        require_stable=False,
    )
    (g,) = send_request(bootstrap, req).parse().groups
    offsets = {int(p.partition_index): int(p.committed_offset) for t in g.topics for p in t.partitions}
    return g.error_code, offsets


@dataclass
class Tracker:
    """Consumes with each member in turn, committing every other poll, and checks as it goes:

    - after an assignment, a member's first record of each partition is at the offset committed
      when the assignment happened (0 without a commit): nothing committed is re-delivered and
      nothing is skipped. One exception, a client's choice: a member that had the partition in
      its previous assignment too (revoked, not lost, and given back to it) may instead go on from
      its own position (kafka-python keeps positions of partitions that stay assigned) - nothing is
      lost or re-delivered either way;
    - then its records of that partition follow contiguously, without a gap or a repeat;
    - a commit of the old generation never succeeds after the kill for a partition already
      given out again in a new one.
    """

    members: list[Member]
    expected: dict[int, list[bytes]]  # partition -> value of each offset
    committed: dict[int, int] = field(default_factory=dict)  # last successful commit per partition
    consumed: dict[int, list[int]] = field(default_factory=lambda: defaultdict(list))
    # (member, partition, first offset after an assignment, offset committed then, after the kill?,
    #  whether the member went on from its own position instead of the commit)
    firsts: list[tuple[int, int, int, int, bool, bool]] = field(default_factory=list)
    commits_ok: list[tuple[int, dict[int, int], bool]] = field(default_factory=list)
    commits_failed: list[tuple[int, dict[int, int], str]] = field(default_factory=list)
    rejoined: set[int] = field(default_factory=set)  # members with an assignment after the kill
    assigned_after_kill: set[int] = field(default_factory=set)
    problems: list[str] = field(default_factory=list)
    killed: bool = False
    timeline: list[str] = field(default_factory=list)  # for failure messages

    def __post_init__(self) -> None:
        members, self.members = self.members, []
        # per member: partition -> the offset its next record must have (None: first since the assignment)
        self.next: list[dict[int, int | None]] = []
        # per member and partition, first record since the assignment: (committed then, own position or None)
        self.first_ok: list[dict[int, tuple[int, int | None]]] = []
        # per member: partitions revoked (not lost) from it since its last assignment -> its position
        self.held: list[dict[int, int]] = []
        self.seen: list[int] = []
        self.polls: list[int] = []
        self.uncommitted: list[dict[int, int]] = []
        for m in members:
            self.add(m)

    def add(self, member: Member) -> None:
        """One more member, driven with the others from now on."""
        self.members.append(member)
        self.next.append({})
        self.first_ok.append({})
        self.held.append({})
        self.seen.append(0)
        self.polls.append(0)
        self.uncommitted.append({})

    def lagging(self) -> bool:
        """Whether some partition has records consumed but not committed."""
        return any(o > self.committed.get(p, 0) for u in self.uncommitted for p, o in u.items())

    def step(self, i: int) -> None:
        """Poll member i (at most POLL_RECORDS records); commit what it consumed every other poll."""
        m = self.members[i]
        m.poll(0.2)
        self.polls[i] += 1
        new, self.seen[i] = m.log[self.seen[i] :], len(m.log)
        to_commit = self.uncommitted[i]
        for e in new:
            if isinstance(e, Rebalance):
                self.note(f"member {i} {e.kind} {sorted(e.partitions)}; committed {self.committed}")
                if e.kind == "assigned":
                    self.first_ok[i] = {
                        p: (self.committed.get(p, 0), self.held[i].get(p)) for p in e.partitions
                    }
                    self.next[i] = dict.fromkeys(e.partitions)
                    self.held[i] = {}
                    if self.killed and e.partitions:
                        self.rejoined.add(i)
                        self.assigned_after_kill |= e.partitions
                else:
                    for p in e.partitions:
                        position = self.next[i].pop(p, None)
                        self.first_ok[i].pop(p, None)
                        if e.kind == "revoked" and position is not None:
                            self.held[i][p] = position
                        else:
                            self.held[i].pop(p, None)
                for p in list(to_commit):
                    if p not in self.next[i]:
                        del to_commit[p]  # not ours any more: never commit it
                continue
            assert isinstance(e, Rec)
            p = e.partition
            if e.offset >= len(self.expected[p]) or self.expected[p][e.offset] != e.value:
                self.problems.append(f"member {i}: unexpected record {e}")
            if p not in self.next[i]:
                self.problems.append(f"member {i}: record {e} of a partition it is not assigned")
                continue
            want = self.next[i][p]
            if want is None:
                committed_then, own = self.first_ok[i].pop(p)
                continued = e.offset == own and own != committed_then
                self.firsts.append((i, p, e.offset, committed_then, self.killed, continued))
                self.note(
                    f"member {i} first record of partition {p} at {e.offset}"
                    f" (committed {committed_then}, own position {own})"
                )
                if e.offset != committed_then and not continued:
                    self.problems.append(
                        f"member {i}: first record of partition {p} after an assignment at {e.offset},"
                        f" but {committed_then} was committed (its own position: {own})"
                    )
            elif e.offset != want:
                self.problems.append(f"member {i}: record of partition {p} at {e.offset}, expected {want}")
            self.next[i][p] = e.offset + 1
            self.consumed[p].append(e.offset)
            to_commit[p] = e.offset + 1
        if to_commit and self.polls[i] % 2 == 0:
            offsets = dict(to_commit)
            to_commit.clear()
            try:
                m.commit(offsets)
            except CommitFailed as exc:
                self.commits_failed.append((i, offsets, str(exc)))
                self.note(f"member {i} commit {offsets} failed: {exc}")
            else:
                self.note(f"member {i} commit {offsets} ok")
                self.commits_ok.append((i, offsets, self.killed))
                if self.killed and i not in self.rejoined and set(offsets) & self.assigned_after_kill:
                    self.problems.append(
                        f"member {i}: commit {offsets} of the old generation succeeded after the kill,"
                        f" for partitions already given out again ({sorted(self.assigned_after_kill)})"
                    )
                self.committed.update(offsets)

    def note(self, what: str) -> None:
        self.timeline.append(f"{time.monotonic():.3f} {'after' if self.killed else 'before'} kill: {what}")

    def run_until(self, done: Callable[[], bool], what: str, timeout_s: float = WAIT_S) -> None:
        deadline = time.monotonic() + timeout_s
        while not done():
            assert not self.problems, "\n".join(self.problems[:5]) + "\n" + self.state()
            if time.monotonic() > deadline:
                pytest.fail(f"timed out after {timeout_s:.0f} s waiting for {what}:\n  {self.state()}")
            for i in range(len(self.members)):
                self.step(i)
        assert not self.problems, "\n".join(self.problems[:5]) + "\n" + self.state()

    def state(self) -> str:
        lines = [m.describe() for m in self.members]
        lines.append(f"committed {dict(sorted(self.committed.items()))}")
        lines.append(f"failed commits: {len(self.commits_failed)}, last: {self.commits_failed[-3:]}")
        lines.append("timeline (last 40):")
        lines.extend(self.timeline[-40:])
        return "\n  ".join(lines)


@pytest.mark.parametrize("client", ["confluent", "kafka-python", "aiokafka", "java"])
def test_group_moves_to_a_new_coordinator_when_its_agent_is_killed(
    spawn_skiff: Callable[..., SkiffProcess],
    moto_s3: S3Bucket,
    pg_url: str,
    member_factory: MemberFactory,  # noqa: F811 - the fixture imported above
    client: str,
    request: pytest.FixtureRequest,
) -> None:
    # no initial rebalance delay: a member rejoining the (empty) group on the new coordinator is
    # assigned at once, and the other one's rejoin makes it rebalance again (more reassignments to check)
    cluster = start_cluster(
        spawn_skiff, moto_s3, pg_url, n_agents=3, extra_env={"SKIFF_GROUP_INITIAL_REBALANCE_DELAY_MS": "0"}
    )

    def stop_cluster() -> None:  # before spawn_skiff's teardown, and faster (see `stop`)
        for p in [*cluster.agents, cluster.metadata]:
            stop(p)

    request.addfinalizer(stop_cluster)
    agents = cluster.agents
    for a in agents:
        wait_for_brokers(a.bootstrap, 3, timeout_s=60)
    bootstrap = ",".join(a.bootstrap for a in agents)
    topic = create_topic(bootstrap, partitions=PARTITIONS, prefix="fo")
    before = tagged("a", BEFORE, partitions=PARTITIONS)
    produce(bootstrap, topic, before)
    group = _name("fo")

    answers = {find_coordinator(a.bootstrap, group) for a in agents}
    assert len(answers) == 1, f"agents disagree on the coordinator: {answers}"
    ((code, coordinator_port),) = answers
    assert code == ErrorCode.none
    (doomed,) = [a for a in agents if a.port == coordinator_port]
    survivors = [a for a in agents if a is not doomed]

    expected = {p: list(before[p]) for p in range(PARTITIONS)}
    t = Tracker(
        [member_factory(client, bootstrap, topic, group, max_poll_records=POLL_RECORDS) for _ in range(2)],
        expected,
    )

    # consume about a third with both members in the group; kill the coordinator at a moment when
    # some records are consumed but not committed yet (they must be delivered again)
    def third_committed() -> bool:
        return (
            sum(t.committed.values()) >= PARTITIONS * BEFORE // 3
            and t.lagging()
            and all(m.assignment() for m in t.members)
        )

    t.run_until(third_committed, "a third of the records committed by a group of two")
    at_kill = dict(t.committed)
    consumed_at_kill = {p: max(offs, default=-1) + 1 for p, offs in t.consumed.items()}
    doomed.kill(signal.SIGKILL)
    t.killed = True
    killed_at = time.monotonic()

    # the survivors move the group once the dead agent's TTL has run out
    deadline = time.monotonic() + WAIT_S
    while True:
        answers = {find_coordinator(a.bootstrap, group) for a in survivors}
        if len(answers) == 1 and next(iter(answers))[1] != doomed.port:
            break
        assert time.monotonic() < deadline, f"the group never moved off the dead agent: {answers}"
        for i in range(len(t.members)):
            t.step(i)
    ((code, new_port),) = answers
    assert code == ErrorCode.none
    (new_coordinator,) = [a for a in survivors if a.port == new_port]
    (other,) = [a for a in survivors if a is not new_coordinator]
    t.note(f"the group moved to {new_port}")

    # both members go on at the new coordinator (in their generation, or rejoined): more data,
    # produced through the survivors, is consumed and committed there, in every partition
    survivors_bootstrap = ",".join(a.bootstrap for a in survivors)
    end = BEFORE

    def more(tag: str) -> None:
        nonlocal end
        values = tagged(tag, AFTER, start=end, partitions=PARTITIONS)
        produce(survivors_bootstrap, topic, values)
        for p in range(PARTITIONS):
            expected[p] += values[p]
        end += AFTER

    def all_consumed_and_committed() -> bool:
        return all(
            set(t.consumed[p]) >= set(range(end)) and t.committed.get(p) == end for p in range(PARTITIONS)
        )

    more("b")
    t.run_until(all_consumed_and_committed, "every record consumed and committed at the new coordinator")
    rebalanced_at_failover = sorted(t.rejoined)
    resumed_after_s = time.monotonic() - killed_at

    # a third member joins: the taken-over group rebalances on the new coordinator, each old member
    # rejoins, and every partition is handed out again; then more data, all consumed and committed
    t.add(member_factory(client, bootstrap, topic, group, max_poll_records=POLL_RECORDS))
    t.run_until(
        lambda: (
            t.rejoined == {0, 1, 2}
            and t.assigned_after_kill == set(range(PARTITIONS))
            and all(m.assignment() for m in t.members)
        ),
        "the three members to share the partitions",
    )
    more("c")
    t.run_until(all_consumed_and_committed, "every record consumed and committed by the three members")
    for _ in range(5):  # nothing more arrives
        for i in range(len(t.members)):
            t.step(i)
    assert not t.problems, t.problems[:5]

    # (the tracker checked that after every assignment each partition resumed at the offset
    # committed then, or went on from the member's own position, and then had no gap or repeat)
    # after the failover in particular: each partition's first post-kill assignment resumed at
    # the offset committed then: the one committed at the kill, or a later one its member
    # committed in its generation since (never an older one), unless its member kept it
    first_after: dict[int, tuple[int, int, bool]] = {}
    for _, p, first, committed_then, after_kill, continued in t.firsts:
        if after_kill and p not in first_after:
            first_after[p] = (first, committed_then, continued)
    assert set(first_after) == set(range(PARTITIONS)), first_after
    for p, (first, committed_then, continued) in first_after.items():
        assert committed_then >= at_kill.get(p, 0), (p, first_after, at_kill)
        assert continued or first == committed_then, (
            f"first offsets after the failover {first_after}, committed at the kill {at_kill}"
        )
    kept = sorted(p for p, (_, _, continued) in first_after.items() if continued)
    # at least once; re-delivered only what was consumed but not committed before a rebalance
    for p in range(PARTITIONS):
        missing = sorted(set(range(end)) - set(t.consumed[p]))
        assert not missing, f"partition {p}: never consumed {missing[:10]}"
    redelivered = sum(len(t.consumed[p]) - end for p in range(PARTITIONS))
    uncommitted_at_kill = sum(  # consumed by the kill, not committed when the partition moved
        max(0, consumed_at_kill.get(p, 0) - first_after[p][1]) for p in range(PARTITIONS) if p not in kept
    )
    assert redelivered >= uncommitted_at_kill, (redelivered, uncommitted_at_kill)
    assert any(after_kill for *_, after_kill in t.commits_ok), "no commit succeeded after the failover"

    # the commits made after the failover are on the new coordinator
    code, offsets = offset_fetch(new_coordinator.bootstrap, group, topic)
    assert code == ErrorCode.none
    assert offsets == dict.fromkeys(range(PARTITIONS), end)
    code, _ = offset_fetch(other.bootstrap, group, topic)
    assert code == ErrorCode.not_coordinator
    print(
        f"{client}: coordinator {doomed.port} killed; group on {new_port}, every partition committed there"
        f" {resumed_after_s:.1f} s after the kill (members that rejoined meanwhile: {rebalanced_at_failover});"
        f" {len(t.commits_failed)} commits failed meanwhile;"
        f" committed at the kill {at_kill}, consumed {consumed_at_kill}; {redelivered} records re-delivered;"
        f" partitions kept by their member across the failover: {kept}"
    )
