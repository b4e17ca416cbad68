"""The consumer-group coordinator, driven the way the wire handlers drive it, on a fake clock."""

from __future__ import annotations

import itertools
import logging

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from minibroker.errors import MinibrokerError
from minibroker.groups import (
    Completion,
    GroupConfig,
    GroupConfigError,
    GroupCoordinator,
    GroupError,
    GroupState,
    JoinGroupResult,
    LeavingMember,
    OffsetToCommit,
    SyncGroupResult,
    Ticket,
    coordinator_partition,
)

GROUP = "orders-readers"
SESSION_MS = 10_000
REBALANCE_MS = 30_000
PARTITIONS = tuple(range(6))


class FakeClock:
    def __init__(self) -> None:
        self.now_s = 1000.0

    def __call__(self) -> float:
        return self.now_s

    def advance_ms(self, ms: float) -> None:
        self.now_s += ms / 1000


def make(
    *, delay_ms: int = 0, min_session_ms: int = 1000, **kwargs: int
) -> tuple[GroupCoordinator, FakeClock]:
    clock = FakeClock()
    counter = itertools.count(1)
    coord = GroupCoordinator(
        GroupConfig(
            initial_rebalance_delay_ms=delay_ms, min_session_timeout_ms=min_session_ms, **kwargs
        ),
        clock=clock,
        member_id_factory=lambda prefix: f"{prefix}-{next(counter)}",
    )
    return coord, clock


def range_assign(members: tuple[str, ...]) -> list[tuple[str, bytes]]:
    """A tiny range assignor: the leader's job in the consumer, here to check what reaches whom."""
    ordered = sorted(members)
    share: dict[str, list[int]] = {m: [] for m in ordered}
    for p in PARTITIONS:
        share[ordered[p * len(ordered) // len(PARTITIONS)]].append(p)
    return [(m, ",".join(map(str, ps)).encode()) for m, ps in share.items()]


def partitions_of(assignment: bytes) -> set[int]:
    return {int(p) for p in assignment.decode().split(",") if p}


class Consumer:
    """Plays one consumer's side of the protocol (what librdkafka and aiokafka do)."""

    def __init__(
        self,
        coord: GroupCoordinator,
        name: str,
        *,
        protocols: tuple[tuple[str, bytes], ...] = (("range", b"sub:orders"),),
        session_ms: int = SESSION_MS,
        rebalance_ms: int = REBALANCE_MS,
        instance_id: str | None = None,
        group: str = GROUP,
    ) -> None:
        self.coord = coord
        self.name = name
        self.group = group
        self.protocols = protocols
        self.session_ms = session_ms
        self.rebalance_ms = rebalance_ms
        self.instance_id = instance_id
        self.member_id = ""
        self.generation = -1
        self.join: JoinGroupResult | None = None
        self.assignment: bytes | None = None
        self.ticket: Ticket | None = None

    def parked(self) -> bool:
        return self.ticket is not None

    def send_join(self) -> JoinGroupResult | Ticket:
        out = self.coord.join_group(
            group_id=self.group,
            member_id=self.member_id,
            group_instance_id=self.instance_id,
            protocol_type="consumer",
            protocols=self.protocols,
            session_timeout_ms=self.session_ms,
            rebalance_timeout_ms=self.rebalance_ms,
            require_known_member_id=True,
            client_id=self.name,
            client_host="/127.0.0.1",
        )
        if isinstance(out, Ticket):
            self.ticket = out
        else:
            self.on_join(out)
        return out

    def join_until_parked_or_done(self) -> None:
        """Join, and join again with the assigned id on MEMBER_ID_REQUIRED, as clients do."""
        out = self.send_join()
        if isinstance(out, JoinGroupResult) and out.error_code == GroupError.MEMBER_ID_REQUIRED:
            self.send_join()

    def on_join(self, result: JoinGroupResult) -> None:
        if result.error_code == GroupError.MEMBER_ID_REQUIRED:
            self.member_id = result.member_id
        elif result.error_code == GroupError.UNKNOWN_MEMBER_ID:
            self.member_id = ""
        elif result.error_code == GroupError.NONE:
            self.member_id = result.member_id
            self.generation = result.generation_id
            self.join = result
            self.assignment = None

    def send_sync(self) -> SyncGroupResult | Ticket:
        assert self.join is not None
        leading = self.join.leader == self.member_id
        out = self.coord.sync_group(
            group_id=self.group,
            member_id=self.member_id,
            generation_id=self.generation,
            group_instance_id=self.instance_id,
            protocol_type="consumer",
            protocol_name=self.join.protocol_name,
            assignments=range_assign(tuple(m.member_id for m in self.join.members))
            if leading
            else (),
        )
        if isinstance(out, Ticket):
            self.ticket = out
        else:
            self.on_sync(out)
        return out

    def on_sync(self, result: SyncGroupResult) -> None:
        if result.error_code == GroupError.NONE:
            self.assignment = result.assignment
        else:  # the generation is gone; the next heartbeat says so and the consumer rejoins
            self.join = None

    def heartbeat(self) -> int:
        return self.coord.heartbeat(
            group_id=self.group,
            member_id=self.member_id,
            generation_id=self.generation,
            group_instance_id=self.instance_id,
        )

    def commit(self, offsets: dict[int, int], metadata: str = "") -> list[int]:
        results = self.coord.commit_offsets(
            group_id=self.group,
            member_id=self.member_id,
            generation_id=self.generation,
            group_instance_id=self.instance_id,
            offsets=[
                OffsetToCommit(topic="orders", partition=p, offset=o, metadata=metadata)
                for p, o in offsets.items()
            ],
        )
        return [r.error_code for r in results]

    def leave(self) -> int:
        result = self.coord.leave_group(
            group_id=self.group,
            members=[LeavingMember(member_id=self.member_id, group_instance_id=self.instance_id)],
        )
        return result.members[0].error_code


def deliver(completions: list[Completion], consumers: list[Consumer]) -> None:
    by_ticket = {c.ticket: c for c in consumers if c.ticket is not None}
    for done in completions:
        consumer = by_ticket.pop(done.ticket)
        consumer.ticket = None
        if isinstance(done.result, JoinGroupResult):
            consumer.on_join(done.result)
        else:
            consumer.on_sync(done.result)


def settle(coord: GroupCoordinator, consumers: list[Consumer]) -> None:
    deliver(coord.tick(), consumers)


def form_group(coord: GroupCoordinator, consumers: list[Consumer]) -> None:
    """All consumers join and sync; the group ends Stable."""
    for c in consumers:
        c.join_until_parked_or_done()
        settle(coord, consumers)
    for c in consumers:  # late joiners made earlier ones rejoin
        if c.ticket is None and c.heartbeat() == GroupError.REBALANCE_IN_PROGRESS:
            c.send_join()
            settle(coord, consumers)
    leader = [c for c in consumers if c.join and c.join.leader == c.member_id]
    followers = [c for c in consumers if c not in leader]
    for c in followers + leader:
        c.send_sync()
        settle(coord, consumers)
    assert coord.describe_group(GROUP).state is GroupState.STABLE


# ----------------------------------------------------------------------------- scenarios


def test_two_consumers_share_partitions_and_the_survivor_takes_all_when_one_leaves() -> None:
    coord, _ = make()
    a, b = Consumer(coord, "a"), Consumer(coord, "b")
    form_group(coord, [a, b])
    assert a.generation == b.generation
    assert a.assignment is not None
    assert b.assignment is not None
    assert partitions_of(a.assignment) | partitions_of(b.assignment) == set(PARTITIONS)
    assert partitions_of(a.assignment).isdisjoint(partitions_of(b.assignment))
    first_generation = a.generation

    assert b.leave() == GroupError.NONE
    assert a.heartbeat() == GroupError.REBALANCE_IN_PROGRESS
    out = a.send_join()
    assert isinstance(out, JoinGroupResult), "the only member rejoined: no reason to wait"
    assert out.generation_id == first_generation + 1
    assert out.leader == a.member_id
    assert [m.member_id for m in out.members] == [a.member_id]
    a.send_sync()
    assert a.assignment is not None
    assert partitions_of(a.assignment) == set(PARTITIONS)
    assert coord.describe_group(GROUP).state is GroupState.STABLE


def test_member_id_required_round_trip() -> None:
    coord, _ = make()
    first = coord.join_group(
        group_id=GROUP,
        member_id="",
        protocol_type="consumer",
        protocols=[("range", b"m")],
        session_timeout_ms=SESSION_MS,
        rebalance_timeout_ms=REBALANCE_MS,
        require_known_member_id=True,
        client_id="rdkafka",
    )
    assert isinstance(first, JoinGroupResult)
    assert first.error_code == GroupError.MEMBER_ID_REQUIRED
    assert first.error_code == 79
    assert first.member_id.startswith("rdkafka-")
    assert first.generation_id == -1
    assert coord.describe_group(GROUP).members == (), "not a member until it comes back"

    second = coord.join_group(
        group_id=GROUP,
        member_id=first.member_id,
        protocol_type="consumer",
        protocols=[("range", b"m")],
        session_timeout_ms=SESSION_MS,
        rebalance_timeout_ms=REBALANCE_MS,
        require_known_member_id=True,
        client_id="rdkafka",
    )
    assert isinstance(second, JoinGroupResult)
    assert second.error_code == GroupError.NONE
    assert second.member_id == first.member_id
    assert second.generation_id == 1
    assert second.leader == first.member_id
    assert second.protocol_type == "consumer"
    assert second.protocol_name == "range"
    assert [(m.member_id, m.metadata) for m in second.members] == [(first.member_id, b"m")]


def test_a_join_whose_member_id_would_not_fit_a_kafka_string_is_invalid_request() -> None:
    # `<instance or client id>-<UUID>` must fit 32,767 UTF-8 bytes; 37 go to "-<UUID>".
    coord, _ = make()

    def join(instance: str | None, client_id: str = "c") -> int:
        out = coord.join_group(
            group_id=GROUP,
            member_id="",
            protocol_type="consumer",
            protocols=[("range", b"")],
            session_timeout_ms=SESSION_MS,
            rebalance_timeout_ms=REBALANCE_MS,
            require_known_member_id=True,
            group_instance_id=instance,
            client_id=client_id,
        )
        assert isinstance(out, JoinGroupResult)
        return out.error_code

    assert join("i" * 32_731) == GroupError.INVALID_REQUEST
    assert join("é" * 16_366) == GroupError.INVALID_REQUEST  # bytes, not characters
    assert join(None, client_id="c" * 32_731) == GroupError.INVALID_REQUEST
    assert coord.describe_group(GROUP).state is GroupState.DEAD, "no group was made"
    assert join(None, client_id="c" * 32_730) == GroupError.MEMBER_ID_REQUIRED
    coord.tick()
    assert join("i" * 32_730) == GroupError.NONE


def test_old_join_versions_get_a_member_id_at_once() -> None:
    coord, _ = make()
    out = coord.join_group(
        group_id=GROUP,
        member_id="",
        protocol_type="consumer",
        protocols=[("range", b"")],
        session_timeout_ms=SESSION_MS,
        rebalance_timeout_ms=REBALANCE_MS,
        require_known_member_id=False,
        client_id="old",
    )
    assert isinstance(out, JoinGroupResult)
    assert out.error_code == GroupError.NONE
    assert out.member_id.startswith("old-")


def test_a_pending_member_that_never_returns_expires_and_does_not_block_the_rebalance() -> None:
    coord, clock = make()
    a = Consumer(coord, "a", session_ms=20_000)
    form_group(coord, [a])
    ghost = Consumer(coord, "ghost", session_ms=5_000)
    required = ghost.send_join()
    assert isinstance(required, JoinGroupResult)
    assert required.error_code == GroupError.MEMBER_ID_REQUIRED
    # A real newcomer triggers a rebalance; the ghost is still pending, so the phase waits.
    c = Consumer(coord, "c", session_ms=20_000)
    c.join_until_parked_or_done()
    assert c.parked()
    assert a.heartbeat() == GroupError.REBALANCE_IN_PROGRESS
    a.send_join()
    assert a.parked()
    assert c.parked()
    deadline = coord.next_deadline()
    assert deadline is not None
    assert deadline == pytest.approx(clock.now_s + 5.0)
    clock.advance_ms(5_000)
    settle(coord, [a, c])
    assert not a.parked()
    assert not c.parked()
    assert a.join is not None
    assert {m.member_id for m in a.join.members} == {
        a.member_id,
        c.member_id,
    }
    again = ghost.send_join()
    assert isinstance(again, JoinGroupResult)
    assert again.error_code == GroupError.UNKNOWN_MEMBER_ID


def test_a_silent_member_times_out_and_the_other_gets_everything() -> None:
    coord, clock = make()
    a = Consumer(coord, "a", session_ms=10_000)
    b = Consumer(coord, "b", session_ms=8_000)
    form_group(coord, [a, b])
    generation = a.generation
    for _ in range(3):  # a heartbeats every 2.5 s, b is silent
        clock.advance_ms(2_500)
        assert a.heartbeat() == GroupError.NONE
    assert b.member_id in {m.member_id for m in coord.describe_group(GROUP).members}
    clock.advance_ms(2_500)  # 10 s since b's last sign of life; its session is 8 s
    assert a.heartbeat() == GroupError.REBALANCE_IN_PROGRESS
    assert b.member_id not in {m.member_id for m in coord.describe_group(GROUP).members}
    out = a.send_join()
    assert isinstance(out, JoinGroupResult)
    assert out.generation_id == generation + 1
    a.send_sync()
    assert a.assignment is not None
    assert partitions_of(a.assignment) == set(PARTITIONS)
    assert b.heartbeat() == GroupError.UNKNOWN_MEMBER_ID


def test_a_member_parked_in_join_does_not_expire() -> None:
    # Kafka keeps a member alive while its JoinGroup waits (shouldKeepAlive): its consumer
    # cannot heartbeat before it gets an answer.
    coord, clock = make()
    a = Consumer(coord, "a", session_ms=3_000, rebalance_ms=20_000)
    b = Consumer(coord, "b", session_ms=60_000, rebalance_ms=20_000)
    form_group(coord, [a, b])
    a.protocols = (("range", b"more topics"),)
    assert isinstance(a.send_join(), Ticket)  # waits for b, which never rejoins
    clock.advance_ms(10_000)
    settle(coord, [a, b])
    assert a.parked()
    assert a.member_id in {m.member_id for m in coord.describe_group(GROUP).members}
    clock.advance_ms(10_000)  # the rebalance timeout drops b; the phase completes for a
    settle(coord, [a, b])
    assert not a.parked()
    assert a.join is not None
    assert a.join.error_code == GroupError.NONE
    assert [m.member_id for m in a.join.members] == [a.member_id]


def test_a_follower_parked_in_sync_does_not_expire() -> None:
    coord, clock = make()
    a = Consumer(coord, "a", session_ms=60_000, rebalance_ms=20_000)
    b = Consumer(coord, "b", session_ms=3_000, rebalance_ms=20_000)
    a.join_until_parked_or_done()
    b.join_until_parked_or_done()
    a.heartbeat()
    a.send_join()
    settle(coord, [a, b])
    assert a.join is not None
    assert a.join.leader == a.member_id
    assert isinstance(b.send_sync(), Ticket)
    clock.advance_ms(10_000)  # a slow assignor, well past b's 3 s session
    settle(coord, [a, b])
    a.send_sync()
    settle(coord, [a, b])
    assert b.assignment is not None
    assert partitions_of(b.assignment)
    assert b.heartbeat() == GroupError.NONE


def test_session_expiry_is_timed_from_the_last_heartbeat_even_when_ticked_late() -> None:
    coord, clock = make()
    a = Consumer(coord, "a", session_ms=5_000)
    form_group(coord, [a])
    clock.advance_ms(4_999)
    assert a.heartbeat() == GroupError.NONE
    clock.advance_ms(4_999)
    assert a.heartbeat() == GroupError.NONE
    clock.advance_ms(60_000)  # nobody ticked meanwhile
    assert a.heartbeat() == GroupError.UNKNOWN_MEMBER_ID
    description = coord.describe_group(GROUP)
    assert description.state is GroupState.EMPTY
    assert description.generation_id == 2


def test_a_restarted_consumer_resumes_from_the_committed_offsets() -> None:
    coord, _ = make()
    first = Consumer(coord, "app")
    form_group(coord, [first])
    assert first.commit({0: 120, 3: 7}, metadata="checkpoint") == [0, 0]
    assert first.leave() == GroupError.NONE
    assert coord.describe_group(GROUP).state is GroupState.EMPTY

    restarted = Consumer(coord, "app")
    form_group(coord, [restarted])
    assert restarted.member_id != first.member_id
    fetched = coord.fetch_offsets(GROUP, [("orders", p) for p in PARTITIONS])
    assert [(o.partition, o.offset) for o in fetched] == [
        (0, 120),
        (1, -1),
        (2, -1),
        (3, 7),
        (4, -1),
        (5, -1),
    ]
    assert fetched[0].metadata == "checkpoint"
    assert fetched[1].metadata == ""
    assert fetched[1].leader_epoch == -1
    everything = coord.fetch_offsets(GROUP)
    assert [(o.topic, o.partition, o.offset) for o in everything] == [
        ("orders", 0, 120),
        ("orders", 3, 7),
    ]


def test_offset_fetch_of_an_unknown_group_gives_minus_one() -> None:
    coord, _ = make()
    fetched = coord.fetch_offsets("nobody", [("t", 0)])
    assert [(o.offset, o.metadata) for o in fetched] == [(-1, "")]
    assert coord.fetch_offsets("nobody") == ()


def test_commits_from_the_wrong_generation_or_member_are_refused() -> None:
    coord, _ = make()
    a, b = Consumer(coord, "a"), Consumer(coord, "b")
    form_group(coord, [a, b])
    stale = a.generation - 1
    assert (
        coord.commit_offsets(
            group_id=GROUP,
            member_id=a.member_id,
            generation_id=stale,
            offsets=[OffsetToCommit(topic="orders", partition=0, offset=5)],
        )[0].error_code
        == GroupError.ILLEGAL_GENERATION
    )
    assert (
        coord.commit_offsets(
            group_id=GROUP,
            member_id="stranger",
            generation_id=a.generation,
            offsets=[OffsetToCommit(topic="orders", partition=0, offset=5)],
        )[0].error_code
        == GroupError.UNKNOWN_MEMBER_ID
    )
    # A standalone consumer may not write into a group that has members.
    assert (
        coord.commit_offsets(
            group_id=GROUP,
            member_id="",
            generation_id=-1,
            offsets=[OffsetToCommit(topic="orders", partition=0, offset=5)],
        )[0].error_code
        == GroupError.UNKNOWN_MEMBER_ID
    )
    # A group the coordinator has never seen: GROUP_ID_NOT_FOUND from v9, ILLEGAL_GENERATION
    # before (Kafka 4's OffsetMetadataManager.validateOffsetCommit).
    for api_version, error in [
        (9, GroupError.GROUP_ID_NOT_FOUND),
        (8, GroupError.ILLEGAL_GENERATION),
    ]:
        results = coord.commit_offsets(
            group_id="other",
            member_id="m",
            generation_id=3,
            offsets=[OffsetToCommit(topic="orders", partition=0, offset=5)],
            api_version=api_version,
        )
        assert results[0].error_code == error
    assert coord.fetch_offsets(GROUP, [("orders", 0)])[0].offset == -1
    assert coord.fetch_offsets("other") == ()


def test_standalone_consumers_commit_with_generation_minus_one() -> None:
    coord, _ = make()
    results = coord.commit_offsets(
        group_id="manual",
        member_id="",
        generation_id=-1,
        offsets=[
            OffsetToCommit(topic="t", partition=0, offset=10, leader_epoch=4, metadata=None),
            OffsetToCommit(topic="t", partition=1, offset=20),
        ],
    )
    assert [(r.topic, r.partition, r.error_code) for r in results] == [("t", 0, 0), ("t", 1, 0)]
    fetched = coord.fetch_offsets("manual", [("t", 0), ("t", 1)])
    assert [(o.offset, o.leader_epoch, o.metadata) for o in fetched] == [(10, 4, ""), (20, -1, "")]
    assert coord.describe_group("manual").state is GroupState.EMPTY


def test_generation_minus_one_commits_to_an_empty_group_whatever_member_it_names() -> None:
    # Kafka 4's ClassicGroup.validateOffsetCommit: the admin client and self-assigning
    # consumers commit with generation -1, named or not, while nobody is in the group.
    coord, _ = make()

    def commit(group_id: str, member_id: str, instance: str | None = None) -> int:
        [result] = coord.commit_offsets(
            group_id=group_id,
            member_id=member_id,
            generation_id=-1,
            offsets=[OffsetToCommit(topic="t", partition=0, offset=7)],
            group_instance_id=instance,
        )
        return result.error_code

    assert commit("unknown", "x") == GroupError.NONE
    assert coord.describe_group("unknown").state is GroupState.EMPTY
    assert commit("unknown", "x", instance="i") == GroupError.NONE
    assert coord.fetch_offsets("unknown", [("t", 0)])[0].offset == 7
    a = Consumer(coord, "a")
    form_group(coord, [a])
    assert commit(GROUP, "x") == GroupError.UNKNOWN_MEMBER_ID
    assert commit(GROUP, a.member_id) == GroupError.ILLEGAL_GENERATION


def test_commit_during_completing_rebalance_asks_to_wait_and_during_preparing_is_kept() -> None:
    coord, _ = make()
    a, b = Consumer(coord, "a"), Consumer(coord, "b")
    form_group(coord, [a, b])
    c = Consumer(coord, "c")
    c.join_until_parked_or_done()
    assert coord.describe_group(GROUP).state is GroupState.PREPARING_REBALANCE
    # onPartitionsRevoked: commit what was processed, with the old generation.
    assert a.commit({0: 11}) == [GroupError.NONE]
    assert a.heartbeat() == GroupError.REBALANCE_IN_PROGRESS
    a.send_join()
    assert b.heartbeat() == GroupError.REBALANCE_IN_PROGRESS
    b.send_join()
    settle(coord, [a, b, c])
    assert coord.describe_group(GROUP).state is GroupState.COMPLETING_REBALANCE
    assert a.commit({0: 12}) == [GroupError.REBALANCE_IN_PROGRESS]
    assert coord.fetch_offsets(GROUP, [("orders", 0)])[0].offset == 11


def test_offset_metadata_over_the_limit_is_refused_per_partition() -> None:
    coord, _ = make(offset_metadata_max_bytes=8)
    results = coord.commit_offsets(
        group_id="g",
        member_id="",
        generation_id=-1,
        offsets=[
            OffsetToCommit(topic="t", partition=0, offset=1, metadata="x" * 9),
            OffsetToCommit(topic="t", partition=1, offset=1, metadata="x" * 8),
        ],
    )
    assert [r.error_code for r in results] == [GroupError.OFFSET_METADATA_TOO_LARGE, 0]
    assert [o.offset for o in coord.fetch_offsets("g", [("t", 0), ("t", 1)])] == [-1, 1]


def test_follower_sync_waits_for_the_leader() -> None:
    coord, _ = make()
    a, b = Consumer(coord, "a"), Consumer(coord, "b")
    a.join_until_parked_or_done()
    b.join_until_parked_or_done()
    assert a.heartbeat() == GroupError.REBALANCE_IN_PROGRESS
    a.send_join()
    settle(coord, [a, b])
    assert a.join is not None
    assert b.join is not None
    leader, follower = (a, b) if a.join.leader == a.member_id else (b, a)
    assert follower.join is not None
    assert follower.join.members == ()
    assert leader.join is not None
    assert len(leader.join.members) == 2

    parked = follower.send_sync()
    assert isinstance(parked, Ticket)
    assert parked.kind == "sync"
    assert coord.tick() == []
    done = leader.send_sync()
    assert isinstance(done, SyncGroupResult)
    assert done.error_code == GroupError.NONE
    completions = coord.tick()
    assert [c.ticket for c in completions] == [parked]
    deliver(completions, [follower])
    assert follower.assignment is not None
    assert leader.assignment is not None
    assert partitions_of(follower.assignment) | partitions_of(leader.assignment) == set(PARTITIONS)
    assert coord.describe_group(GROUP).state is GroupState.STABLE


def test_members_the_leader_forgot_get_an_empty_assignment() -> None:
    coord, _ = make()
    a, b = Consumer(coord, "a"), Consumer(coord, "b")
    a.join_until_parked_or_done()
    b.join_until_parked_or_done()
    a.heartbeat()
    a.send_join()
    settle(coord, [a, b])
    assert a.join is not None
    assert b.join is not None
    leader, follower = (a, b) if a.join.leader == a.member_id else (b, a)
    follower.send_sync()
    out = coord.sync_group(
        group_id=GROUP,
        member_id=leader.member_id,
        generation_id=leader.generation,
        assignments=[(leader.member_id, b"all"), ("no-such-member", b"x")],
    )
    assert isinstance(out, SyncGroupResult)
    assert out.assignment == b"all"
    settle(coord, [follower])
    assert follower.assignment == b""
    description = coord.describe_group(GROUP)
    assert {m.member_id: m.assignment for m in description.members} == {
        leader.member_id: b"all",
        follower.member_id: b"",
    }


def test_sync_errors_match_kafka() -> None:
    coord, _ = make()
    a = Consumer(coord, "a")
    a.join_until_parked_or_done()
    assert a.join is not None

    def sync(
        member_id: str,
        generation: int,
        protocol_type: str | None = None,
        protocol_name: str | None = None,
    ) -> int:
        out = coord.sync_group(
            group_id=GROUP,
            member_id=member_id,
            generation_id=generation,
            protocol_type=protocol_type,
            protocol_name=protocol_name,
        )
        assert isinstance(out, SyncGroupResult)
        return out.error_code

    assert sync(a.member_id, a.generation + 1) == GroupError.ILLEGAL_GENERATION
    assert sync("who", a.generation) == GroupError.UNKNOWN_MEMBER_ID
    assert coord.sync_group(group_id="nope", member_id="x", generation_id=1) == SyncGroupResult(
        error_code=GroupError.UNKNOWN_MEMBER_ID
    )
    assert (
        sync(a.member_id, a.generation, protocol_name="roundrobin")
        == GroupError.INCONSISTENT_GROUP_PROTOCOL
    )
    assert (
        sync(a.member_id, a.generation, protocol_type="connect")
        == GroupError.INCONSISTENT_GROUP_PROTOCOL
    )
    b = Consumer(coord, "b")
    b.join_until_parked_or_done()  # a's generation is now being replaced
    assert sync(a.member_id, a.generation) == GroupError.REBALANCE_IN_PROGRESS


def test_a_rebalance_answers_followers_waiting_for_a_sync_with_rebalance_in_progress() -> None:
    coord, _ = make()
    a, b = Consumer(coord, "a"), Consumer(coord, "b")
    a.join_until_parked_or_done()
    b.join_until_parked_or_done()
    a.heartbeat()
    a.send_join()
    settle(coord, [a, b])
    assert a.join is not None
    leader, follower = (a, b) if a.join.leader == a.member_id else (b, a)
    parked = follower.send_sync()
    assert isinstance(parked, Ticket)
    assert leader.leave() == GroupError.NONE
    completions = coord.tick()
    assert [(c.ticket, c.result.error_code) for c in completions] == [
        (parked, GroupError.REBALANCE_IN_PROGRESS)
    ]
    deliver(completions, [follower])
    out = follower.send_join()
    assert isinstance(out, JoinGroupResult)
    assert out.leader == follower.member_id


def test_a_leader_that_never_syncs_is_removed_after_the_rebalance_timeout() -> None:
    coord, clock = make()
    a = Consumer(coord, "a", rebalance_ms=4_000, session_ms=60_000)
    b = Consumer(coord, "b", rebalance_ms=4_000, session_ms=60_000)
    a.join_until_parked_or_done()
    b.join_until_parked_or_done()
    a.heartbeat()
    a.send_join()
    settle(coord, [a, b])
    assert a.join is not None
    leader, follower = (a, b) if a.join.leader == a.member_id else (b, a)
    parked = follower.send_sync()
    assert isinstance(parked, Ticket)
    clock.advance_ms(4_000)
    completions = coord.tick()
    assert [(c.ticket, c.result.error_code) for c in completions] == [
        (parked, GroupError.REBALANCE_IN_PROGRESS)
    ]
    members = {m.member_id for m in coord.describe_group(GROUP).members}
    assert members == {follower.member_id}
    assert leader.heartbeat() == GroupError.UNKNOWN_MEMBER_ID


def test_members_that_do_not_rejoin_are_dropped_at_the_rebalance_timeout() -> None:
    coord, clock = make()
    a = Consumer(coord, "a", rebalance_ms=5_000, session_ms=60_000)
    b = Consumer(coord, "b", rebalance_ms=5_000, session_ms=60_000)
    form_group(coord, [a, b])
    generation = a.generation
    c = Consumer(coord, "c", rebalance_ms=5_000)
    c.join_until_parked_or_done()
    a.heartbeat()
    a.send_join()  # b keeps quiet: its consumer is stuck in a long poll loop
    assert coord.next_deadline() == pytest.approx(clock.now_s + 5.0)
    clock.advance_ms(4_999)
    assert coord.tick() == []
    clock.advance_ms(1)
    settle(coord, [a, c])
    assert a.generation == c.generation == generation + 1
    assert a.join is not None
    assert c.join is not None
    assert a.join.leader == a.member_id, "the old leader rejoined and stays leader"
    assert {m.member_id for m in a.join.members} == {a.member_id, c.member_id}
    assert b.heartbeat() == GroupError.UNKNOWN_MEMBER_ID


def test_leadership_moves_when_the_leader_does_not_rejoin() -> None:
    coord, clock = make()
    a = Consumer(coord, "a", rebalance_ms=5_000, session_ms=60_000)
    b = Consumer(coord, "b", rebalance_ms=5_000, session_ms=60_000)
    form_group(coord, [a, b])
    assert a.join is not None
    assert a.join.leader == a.member_id
    b.protocols = (("range", b"sub:orders,payments"),)  # b's subscription changed
    b.send_join()
    clock.advance_ms(5_000)
    settle(coord, [a, b])
    assert b.join is not None
    assert b.join.leader == b.member_id
    assert [m.metadata for m in b.join.members] == [b"sub:orders,payments"]


def test_a_stable_follower_rejoining_with_the_same_metadata_gets_the_current_generation() -> None:
    coord, _ = make()
    a, b = Consumer(coord, "a"), Consumer(coord, "b")
    form_group(coord, [a, b])
    assert a.join is not None
    follower = b if a.join.leader == a.member_id else a
    generation = follower.generation
    out = follower.send_join()
    assert isinstance(out, JoinGroupResult)
    assert out.generation_id == generation
    assert out.members == ()
    assert coord.describe_group(GROUP).state is GroupState.STABLE


def test_initial_rebalance_delay_gathers_members_into_one_generation() -> None:
    coord, clock = make(delay_ms=3_000)
    consumers = [Consumer(coord, name, rebalance_ms=10_000) for name in "abc"]
    consumers[0].join_until_parked_or_done()
    clock.advance_ms(2_000)
    consumers[1].join_until_parked_or_done()
    clock.advance_ms(1_000)  # first delay over; a member came meanwhile, so wait another 3 s
    settle(coord, consumers)
    assert all(c.ticket is not None for c in consumers[:2])
    clock.advance_ms(1_000)
    consumers[2].join_until_parked_or_done()
    clock.advance_ms(2_000)
    settle(coord, consumers)
    clock.advance_ms(3_000)
    settle(coord, consumers)
    assert {c.generation for c in consumers} == {1}
    leader = consumers[0].join
    assert leader is not None
    assert len(leader.members) == 3


def test_initial_delay_never_exceeds_the_rebalance_timeout() -> None:
    coord, clock = make(delay_ms=3_000)
    consumers = [Consumer(coord, f"c{i}", rebalance_ms=7_000) for i in range(5)]
    start = clock.now_s
    for c in consumers:
        c.join_until_parked_or_done()
        clock.advance_ms(1_500)
        settle(coord, consumers)
    while any(c.ticket is not None for c in consumers):
        deadline = coord.next_deadline()
        assert deadline is not None
        clock.now_s = deadline
        settle(coord, consumers)
    assert clock.now_s - start <= 7.0 + 1.5
    assert {c.generation for c in consumers} == {1}


def test_protocol_selection_uses_the_members_votes() -> None:
    coord, _ = make()
    a = Consumer(coord, "a", protocols=(("range", b"a-r"), ("roundrobin", b"a-rr")))
    b = Consumer(coord, "b", protocols=(("roundrobin", b"b-rr"), ("range", b"b-r")))
    c = Consumer(coord, "c", protocols=(("roundrobin", b"c-rr"), ("range", b"c-r")))
    form_group(coord, [a, b, c])
    assert a.join is not None
    assert a.join.protocol_name == "roundrobin"
    assert {m.metadata for m in a.join.members} == {b"a-rr", b"b-rr", b"c-rr"}
    description = coord.describe_group(GROUP)
    assert description.protocol_name == "roundrobin"
    assert {m.metadata for m in description.members} == {b"a-rr", b"b-rr", b"c-rr"}


def test_protocol_ties_follow_the_leader() -> None:
    coord, _ = make()
    a = Consumer(coord, "a", protocols=(("cooperative-sticky", b""), ("range", b"")))
    b = Consumer(coord, "b", protocols=(("range", b""), ("cooperative-sticky", b"")))
    form_group(coord, [a, b])
    assert a.join is not None
    assert a.join.leader == a.member_id
    assert a.join.protocol_name == "cooperative-sticky"


def test_members_that_cannot_agree_are_refused() -> None:
    coord, _ = make()
    a = Consumer(coord, "a", protocols=(("range", b""),))
    form_group(coord, [a])
    b = Consumer(coord, "b", protocols=(("roundrobin", b""),))
    out = b.send_join()
    assert isinstance(out, JoinGroupResult)
    assert out.error_code == GroupError.INCONSISTENT_GROUP_PROTOCOL
    connect = coord.join_group(
        group_id=GROUP,
        member_id="",
        protocol_type="connect",
        protocols=[("range", b"")],
        session_timeout_ms=SESSION_MS,
        rebalance_timeout_ms=REBALANCE_MS,
        require_known_member_id=False,
    )
    assert isinstance(connect, JoinGroupResult)
    assert connect.error_code == GroupError.INCONSISTENT_GROUP_PROTOCOL
    empty = coord.join_group(
        group_id="fresh",
        member_id="",
        protocol_type="consumer",
        protocols=[],
        session_timeout_ms=SESSION_MS,
        rebalance_timeout_ms=REBALANCE_MS,
        require_known_member_id=False,
    )
    assert isinstance(empty, JoinGroupResult)
    assert empty.error_code == GroupError.INCONSISTENT_GROUP_PROTOCOL
    assert coord.describe_group("fresh").state is GroupState.DEAD
    assert coord.describe_group(GROUP).state is GroupState.STABLE


@pytest.mark.parametrize(
    ("session_ms", "expected"),
    [(999, GroupError.INVALID_SESSION_TIMEOUT), (1000, GroupError.NONE), (60_000, 0), (60_001, 26)],
)
def test_session_timeout_bounds(session_ms: int, expected: int) -> None:
    coord, _ = make(min_session_ms=1000, max_session_timeout_ms=60_000)
    out = coord.join_group(
        group_id=GROUP,
        member_id="",
        protocol_type="consumer",
        protocols=[("range", b"")],
        session_timeout_ms=session_ms,
        rebalance_timeout_ms=REBALANCE_MS,
        require_known_member_id=False,
    )
    assert isinstance(out, JoinGroupResult)
    assert out.error_code == expected


def test_invalid_group_id_and_unknown_members() -> None:
    coord, _ = make()
    out = coord.join_group(
        group_id="",
        member_id="",
        protocol_type="consumer",
        protocols=[("range", b"")],
        session_timeout_ms=SESSION_MS,
        rebalance_timeout_ms=REBALANCE_MS,
        require_known_member_id=True,
    )
    assert isinstance(out, JoinGroupResult)
    assert out.error_code == GroupError.INVALID_GROUP_ID
    out = coord.join_group(
        group_id="unknown",
        member_id="someone",
        protocol_type="consumer",
        protocols=[("range", b"")],
        session_timeout_ms=SESSION_MS,
        rebalance_timeout_ms=REBALANCE_MS,
        require_known_member_id=True,
    )
    assert isinstance(out, JoinGroupResult)
    assert (out.error_code, out.member_id) == (GroupError.UNKNOWN_MEMBER_ID, "someone")
    assert coord.heartbeat(group_id="unknown", member_id="someone", generation_id=1) == 25


def test_heartbeat_errors() -> None:
    coord, _ = make()
    a, b = Consumer(coord, "a"), Consumer(coord, "b")
    form_group(coord, [a, b])
    assert a.heartbeat() == GroupError.NONE
    assert (
        coord.heartbeat(group_id=GROUP, member_id=a.member_id, generation_id=a.generation - 1)
        == GroupError.ILLEGAL_GENERATION
    )
    assert coord.heartbeat(group_id=GROUP, member_id="x", generation_id=a.generation) == 25


def test_group_max_size() -> None:
    coord, _ = make(max_size=2)
    a, b = Consumer(coord, "a"), Consumer(coord, "b")
    form_group(coord, [a, b])
    c = Consumer(coord, "c")
    out = c.send_join()
    assert isinstance(out, JoinGroupResult)
    assert out.error_code == GroupError.GROUP_MAX_SIZE_REACHED


def test_leave_group_in_a_batch() -> None:
    coord, _ = make()
    consumers = [Consumer(coord, n) for n in "abc"]
    form_group(coord, consumers)
    a, b, c = consumers
    result = coord.leave_group(
        group_id=GROUP,
        members=[
            LeavingMember(member_id=a.member_id, reason="shutting down"),
            LeavingMember(member_id="ghost"),
            LeavingMember(member_id=b.member_id),
        ],
    )
    assert result.error_code == GroupError.NONE
    assert [m.error_code for m in result.members] == [0, GroupError.UNKNOWN_MEMBER_ID, 0]
    assert c.heartbeat() == GroupError.REBALANCE_IN_PROGRESS
    out = c.send_join()
    assert isinstance(out, JoinGroupResult)
    assert [m.member_id for m in out.members] == [c.member_id]
    unknown = coord.leave_group(group_id="none", members=[LeavingMember(member_id="x")])
    assert [m.error_code for m in unknown.members] == [GroupError.UNKNOWN_MEMBER_ID]


def test_leaving_while_parked_in_join_answers_the_parked_request() -> None:
    coord, _ = make()
    a, b = Consumer(coord, "a"), Consumer(coord, "b")
    form_group(coord, [a, b])
    a.heartbeat()
    parked = a.send_join()
    assert isinstance(parked, Ticket)
    assert a.leave() == GroupError.NONE
    completions = coord.tick()
    assert [(c.ticket, c.result.error_code) for c in completions] == [
        (parked, GroupError.UNKNOWN_MEMBER_ID)
    ]


def test_a_second_join_supersedes_the_parked_one() -> None:
    coord, _ = make()
    a, b = Consumer(coord, "a"), Consumer(coord, "b")
    form_group(coord, [a, b])
    first = a.send_join()
    assert isinstance(first, Ticket)
    second = a.send_join()
    assert isinstance(second, Ticket)
    completions = coord.tick()
    assert [(c.ticket, c.result.error_code) for c in completions] == [
        (first, GroupError.REBALANCE_IN_PROGRESS)
    ]


def test_a_leaving_pending_member_lets_the_join_phase_complete() -> None:
    coord, _ = make()
    a = Consumer(coord, "a")
    form_group(coord, [a])
    ghost = Consumer(coord, "ghost")
    required = ghost.send_join()
    assert isinstance(required, JoinGroupResult)
    ghost.member_id = required.member_id
    a.protocols = (("range", b"new-subscription"),)
    parked = a.send_join()  # a leader rejoining Stable with new metadata starts a rebalance
    assert isinstance(parked, Ticket), "waits for the pending member"
    assert ghost.leave() == GroupError.NONE
    completions = coord.tick()
    assert [c.ticket for c in completions] == [parked]


def test_cancelled_tickets_are_never_completed_and_their_member_expires() -> None:
    coord, clock = make()
    a = Consumer(coord, "a", session_ms=5_000, rebalance_ms=5_000)
    b = Consumer(coord, "b", session_ms=5_000, rebalance_ms=5_000)
    form_group(coord, [a, b])
    a.heartbeat()
    parked = a.send_join()
    assert isinstance(parked, Ticket)
    assert coord.cancel(parked) is True
    assert coord.cancel(parked) is False
    assert coord.stats().open_tickets == 0
    b.heartbeat()
    out = b.send_join()  # everybody has rejoined: the phase completes within this call
    assert isinstance(out, JoinGroupResult)
    assert out.error_code == GroupError.NONE
    assert coord.tick() == [], "the cancelled ticket is not answered"
    # a counted as joined and stays leader (Kafka keeps it) but never syncs: b waits for an
    # assignment until the rebalance timeout drops a.
    assert out.leader == a.member_id
    b.on_join(out)
    parked_sync = b.send_sync()
    assert isinstance(parked_sync, Ticket)
    clock.advance_ms(5_000)
    completions = coord.tick()
    assert [(c.ticket, c.result.error_code) for c in completions] == [
        (parked_sync, GroupError.REBALANCE_IN_PROGRESS)
    ]
    assert a.member_id not in {m.member_id for m in coord.describe_group(GROUP).members}
    assert b.heartbeat() == GroupError.REBALANCE_IN_PROGRESS


def test_shutdown_answers_every_parked_request_with_not_coordinator() -> None:
    coord, _ = make()
    a, b = Consumer(coord, "a"), Consumer(coord, "b")
    form_group(coord, [a, b])
    a.heartbeat()
    a.send_join()
    other = Consumer(coord, "x", group="other")
    other.join_until_parked_or_done()
    assert not other.parked()
    completions = coord.shutdown()
    assert [(c.ticket, c.result.error_code) for c in completions] == [
        (a.ticket, GroupError.NOT_COORDINATOR)
    ]
    assert coord.stats().groups == 0
    assert coord.stats().open_tickets == 0
    assert coord.next_deadline() is None
    assert coord.list_groups() == ()
    # Still usable afterwards (a cluster that restarts).
    fresh = Consumer(coord, "fresh")
    form_group(coord, [fresh])


# ----------------------------------------------------------------------------- coordinator moves


def test_loading_a_group_restarts_every_members_session() -> None:
    # Kafka's GroupCoordinator.onGroupLoaded: a member that could not reach a coordinator while
    # none was there is timed from the load, not from its last heartbeat.
    coord, clock = make()
    a, b = Consumer(coord, "a", session_ms=10_000), Consumer(coord, "b", session_ms=10_000)
    form_group(coord, [a, b])
    generation = a.generation
    partition = coordinator_partition(GROUP)
    clock.advance_ms(2_000)
    coord.unload(partition)  # the coordinator broker stops
    clock.advance_ms(9_000)  # fenced after Kafka's broker.session.timeout.ms, 9 s
    settle(coord, [a, b])
    coord.load(partition)  # another replica leads the partition now
    clock.advance_ms(5_000)  # 16 s after the last heartbeat, 5 s after the load
    settle(coord, [a, b])
    assert a.heartbeat() == GroupError.NONE
    description = coord.describe_group(GROUP)
    assert description.state is GroupState.STABLE
    assert description.generation_id == generation
    assert len(description.members) == 2
    clock.advance_ms(5_000)  # b stays silent: its session ends 10 s after the load
    assert a.heartbeat() == GroupError.REBALANCE_IN_PROGRESS
    assert b.heartbeat() == GroupError.UNKNOWN_MEMBER_ID


def test_unloading_answers_parked_requests_and_freezes_only_that_partitions_groups() -> None:
    coord, clock = make()
    a, b = Consumer(coord, "a"), Consumer(coord, "b")
    form_group(coord, [a, b])
    other_group = next(
        f"g{i}"
        for i in itertools.count()
        if coordinator_partition(f"g{i}") != coordinator_partition(GROUP)
    )
    other = Consumer(coord, "x", group=other_group, session_ms=5_000)
    other.join_until_parked_or_done()
    clock.advance_ms(200)
    settle(coord, [other])
    other.send_sync()
    a.heartbeat()
    assert isinstance(a.send_join(), Ticket)  # parked: b has not rejoined
    coord.unload(coordinator_partition(GROUP))
    completions = coord.tick()
    assert [(c.ticket, c.result.error_code) for c in completions] == [
        (a.ticket, GroupError.NOT_COORDINATOR)
    ]
    clock.advance_ms(60_000)  # past every deadline of the unloaded group
    settle(coord, [a, b, other])
    assert coord.describe_group(GROUP).members  # nobody expired while unloaded
    assert coord.describe_group(other_group).state is GroupState.EMPTY  # its timers ran
    coord.load(coordinator_partition(GROUP))
    clock.advance_ms(REBALANCE_MS)  # the resumed rebalance ends at its restarted deadline
    settle(coord, [a, b])
    assert coord.describe_group(GROUP).state is not GroupState.PREPARING_REBALANCE


# ----------------------------------------------------------------------------- static membership


def test_a_restarted_static_member_takes_over_without_a_rebalance() -> None:
    coord, _ = make()
    a = Consumer(coord, "a", instance_id="host-a")
    b = Consumer(coord, "b", instance_id="host-b")
    form_group(coord, [a, b])
    generation = a.generation
    assert a.join is not None
    follower = b if a.join.leader == a.member_id else a
    kept = follower.assignment
    old_id = follower.member_id

    restarted = Consumer(coord, "b2", instance_id=follower.instance_id)
    out = restarted.send_join()
    assert isinstance(out, JoinGroupResult)
    assert out.error_code == GroupError.NONE
    assert out.member_id != old_id
    assert out.generation_id == generation
    restarted.send_sync()
    assert restarted.assignment == kept
    assert coord.describe_group(GROUP).state is GroupState.STABLE
    assert follower.heartbeat() == GroupError.FENCED_INSTANCE_ID
    assert restarted.heartbeat() == GroupError.NONE


def test_a_restarted_static_leader_resumes_as_a_follower_with_its_assignment() -> None:
    coord, _ = make()
    a = Consumer(coord, "a", instance_id="host-a")
    b = Consumer(coord, "b", instance_id="host-b")
    form_group(coord, [a, b])
    assert a.join is not None
    assert a.join.leader == a.member_id
    kept = a.assignment
    restarted = Consumer(coord, "a2", instance_id="host-a")
    out = restarted.send_join()
    assert isinstance(out, JoinGroupResult)
    assert out.leader == a.member_id != out.member_id
    restarted.send_sync()
    assert restarted.assignment == kept
    assert coord.describe_group(GROUP).leader == restarted.member_id


def test_static_members_survive_a_rebalance_they_miss_and_can_be_removed_by_instance_id() -> None:
    coord, clock = make()
    a = Consumer(coord, "a", instance_id="host-a", rebalance_ms=5_000, session_ms=60_000)
    b = Consumer(coord, "b", instance_id="host-b", rebalance_ms=5_000, session_ms=60_000)
    form_group(coord, [a, b])
    c = Consumer(coord, "c", rebalance_ms=5_000)
    c.join_until_parked_or_done()
    a.heartbeat()
    a.send_join()
    clock.advance_ms(5_000)
    settle(coord, [a, b, c])
    members = {m.member_id for m in coord.describe_group(GROUP).members}
    assert b.member_id in members, "a static member that misses a rebalance keeps its place"
    wrong = coord.leave_group(
        group_id=GROUP, members=[LeavingMember(member_id="stale", group_instance_id="host-b")]
    )
    assert [m.error_code for m in wrong.members] == [GroupError.FENCED_INSTANCE_ID]
    removed = coord.leave_group(group_id=GROUP, members=[LeavingMember(group_instance_id="host-b")])
    assert [m.error_code for m in removed.members] == [GroupError.NONE]
    assert b.member_id not in {m.member_id for m in coord.describe_group(GROUP).members}


def test_static_member_with_changed_protocols_triggers_a_rebalance() -> None:
    coord, _ = make()
    a = Consumer(coord, "a", instance_id="host-a", protocols=(("range", b""), ("rr", b"")))
    b = Consumer(coord, "b", instance_id="host-b", protocols=(("range", b""), ("rr", b"")))
    form_group(coord, [a, b])
    generation = a.generation
    # Votes now tie 1-1; the leader prefers range, so the selected protocol stays: no rebalance.
    b2 = Consumer(coord, "b2", instance_id="host-b", protocols=(("rr", b""), ("range", b"")))
    out = b2.send_join()
    assert isinstance(out, JoinGroupResult)
    assert out.generation_id == generation
    assert coord.describe_group(GROUP).state is GroupState.STABLE
    # Now only rr is common: the group must rebalance to switch protocol.
    a2 = Consumer(coord, "a2", instance_id="host-a", protocols=(("rr", b""),))
    assert isinstance(a2.send_join(), Ticket)
    assert coord.describe_group(GROUP).state is GroupState.PREPARING_REBALANCE
    assert b2.heartbeat() == GroupError.REBALANCE_IN_PROGRESS
    joined = b2.send_join()
    assert isinstance(joined, JoinGroupResult)
    assert joined.protocol_name == "rr"
    assert joined.generation_id == generation + 1


# ----------------------------------------------------------------------------- admin


def test_describe_list_and_delete() -> None:
    coord, _ = make()
    a = Consumer(coord, "a")
    form_group(coord, [a])
    a.commit({0: 1})
    desc = coord.describe_group(GROUP)
    assert desc.state is GroupState.STABLE
    assert desc.state.value == "Stable"
    assert desc.protocol_type == "consumer"
    assert desc.protocol_name == "range"
    [member] = desc.members
    assert (member.client_id, member.client_host) == ("a", "/127.0.0.1")
    assert member.metadata == b"sub:orders"
    assert member.assignment == a.assignment
    coord.commit_offsets(
        group_id="standalone",
        member_id="",
        generation_id=-1,
        offsets=[OffsetToCommit(topic="t", partition=0, offset=3)],
    )
    assert [(g.group_id, g.state, g.protocol_type) for g in coord.list_groups()] == [
        (GROUP, GroupState.STABLE, "consumer"),
        ("standalone", GroupState.EMPTY, ""),
    ]
    assert coord.delete_groups([GROUP, "standalone", "missing"]) == {
        GROUP: GroupError.NON_EMPTY_GROUP,
        "standalone": GroupError.NONE,
        "missing": GroupError.GROUP_ID_NOT_FOUND,
    }
    assert coord.fetch_offsets("standalone", [("t", 0)])[0].offset == -1
    a.leave()
    assert coord.delete_groups([GROUP]) == {GROUP: GroupError.NONE}
    assert coord.describe_group(GROUP).state is GroupState.DEAD
    assert coord.stats().committed_offsets == 0


def test_describe_outside_stable_hides_metadata() -> None:
    coord, _ = make()
    a = Consumer(coord, "a")
    a.join_until_parked_or_done()
    desc = coord.describe_group(GROUP)
    assert desc.state is GroupState.COMPLETING_REBALANCE
    assert desc.protocol_name == ""
    assert [(m.metadata, m.assignment) for m in desc.members] == [(b"", b"")]


def test_remove_topic_offsets() -> None:
    coord, _ = make()
    for group in ("g1", "g2"):
        coord.commit_offsets(
            group_id=group,
            member_id="",
            generation_id=-1,
            offsets=[
                OffsetToCommit(topic="gone", partition=0, offset=1),
                OffsetToCommit(topic="kept", partition=0, offset=2),
            ],
        )
    assert coord.remove_topic_offsets("gone") == 2
    assert [o.topic for o in coord.fetch_offsets("g1")] == ["kept"]


def test_coordinator_partition_matches_kafka() -> None:
    # Golden values from Java 17: s.hashCode(), then Kafka's Utils.abs(h) % 50.
    assert coordinator_partition("hello") == 22  # 99162322
    assert coordinator_partition("Hello World") == 26  # -862545276
    assert coordinator_partition("zzzzzzzz") == 12  # -1910022912
    assert coordinator_partition("polygenelubricants") == 0  # Integer.MIN_VALUE
    assert coordinator_partition("€uro") == 6  # 249288006, a non-ASCII char
    assert coordinator_partition("connect-cluster") == 13
    assert coordinator_partition("") == 0
    assert coordinator_partition("hello", 7) == 99162322 % 7
    with pytest.raises(GroupConfigError, match="partitions=0"):
        coordinator_partition("g", 0)


def test_error_codes_are_kafkas() -> None:
    kio_errors = pytest.importorskip("kio.schema.errors")
    for error in GroupError:
        assert kio_errors.ErrorCode(error.value).name == error.name.lower()


# ----------------------------------------------------------------------------- config


def test_config_from_broker_settings_without_touching_them() -> None:
    broker = {
        "group.initial.rebalance.delay.ms": "250",
        "group.min.session.timeout.ms": 100,
        "group.max.session.timeout.ms": "60000",
        "group.max.size": "10",
        "offset.metadata.max.bytes": "128",
        "min.insync.replicas": "2",
    }
    before = dict(broker)
    config = GroupConfig.from_broker_config(broker)
    assert broker == before
    assert config == GroupConfig(
        initial_rebalance_delay_ms=250,
        min_session_timeout_ms=100,
        max_session_timeout_ms=60_000,
        max_size=10,
        offset_metadata_max_bytes=128,
    )
    assert GroupConfig.from_broker_config({}) == GroupConfig()
    assert GroupConfig().initial_rebalance_delay_ms == 0


@pytest.mark.parametrize(
    ("settings_", "message"),
    [
        ({"group.max.size": "ten"}, "group.max.size='ten' is not an integer"),
        ({"group.initial.rebalance.delay.ms": "-1"}, "initial_rebalance_delay_ms=-1 is negative"),
        (
            {"group.min.session.timeout.ms": "9000", "group.max.session.timeout.ms": "8000"},
            "min_session_timeout_ms=9000 is above max_session_timeout_ms=8000",
        ),
        ({"group.max.size": "0"}, "max_size=0"),
    ],
)
def test_bad_config_is_named(settings_: dict[str, str], message: str) -> None:
    with pytest.raises(GroupConfigError, match=message):
        GroupConfig.from_broker_config(settings_)


def test_config_errors_share_the_package_root() -> None:
    with pytest.raises(MinibrokerError):
        GroupConfig(max_size=0)
    with pytest.raises(ValueError, match="max_size=0"):
        GroupConfig(max_size=0)


def test_config_refuses_non_integers() -> None:
    with pytest.raises(GroupConfigError, match="max_size=True is not an integer"):
        GroupConfig(max_size=True)
    with pytest.raises(GroupConfigError, match="is not an integer"):
        GroupConfig(min_session_timeout_ms=1.5)  # type: ignore[arg-type]  # wrong on purpose


def test_rebalances_are_logged(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO, logger="minibroker.groups")
    coord, _ = make()
    form_group(coord, [Consumer(coord, "a")])
    text = caplog.text
    assert "Preparing to rebalance group orders-readers" in text
    assert "Stabilized group orders-readers generation 1" in text


# ----------------------------------------------------------------------------- session expiry


@settings(max_examples=60, deadline=None)
@given(
    sessions=st.lists(st.integers(1_000, 6_000), min_size=2, max_size=6),
    silent_mask=st.lists(st.booleans(), min_size=6, max_size=6),
    rebalance_ms=st.integers(1_000, 8_000),
    step_ms=st.integers(50, 400),
)
def test_session_expiry_removes_exactly_the_silent_members(
    sessions: list[int], silent_mask: list[bool], rebalance_ms: int, step_ms: int
) -> None:
    coord, clock = make(min_session_ms=500)
    consumers = [
        Consumer(coord, f"c{i}", session_ms=s, rebalance_ms=rebalance_ms)
        for i, s in enumerate(sessions)
    ]
    form_group(coord, consumers)
    stable_at = clock.now_s
    silent = [c for c, quiet in zip(consumers, silent_mask, strict=False) if quiet]
    live = [c for c in consumers if c not in silent]
    expiry = {c.name: stable_at + c.session_ms / 1000 for c in silent}
    first_expiry = min(expiry.values(), default=float("inf"))
    removed_at: dict[str, float] = {}
    end = stable_at + max(sessions) / 1000 + 2 * rebalance_ms / 1000 + 1
    while clock.now_s < end:
        clock.advance_ms(step_ms)
        settle(coord, consumers)
        for c in live:  # what a polling consumer does each step
            if c.ticket is not None:
                continue
            if c.join is not None and c.assignment is None:
                c.send_sync()
                settle(coord, consumers)
                continue
            code = c.heartbeat()
            assert code != GroupError.UNKNOWN_MEMBER_ID, f"live member {c.name} was dropped"
            if code != GroupError.NONE:
                c.send_join()
                settle(coord, consumers)
        present = {m.member_id for m in coord.describe_group(GROUP).members}
        for c in silent:
            if c.name not in removed_at and c.member_id not in present:
                removed_at[c.name] = clock.now_s
    final = {m.member_id for m in coord.describe_group(GROUP).members}
    assert final == {c.member_id for c in live}
    assert coord.describe_group(GROUP).state is (GroupState.STABLE if live else GroupState.EMPTY)
    for c in silent:
        # Gone no later than its own session expiry (seen at the next step), and no earlier
        # than that or than a rebalance started by the first expiry giving up on it.
        assert removed_at[c.name] < expiry[c.name] + step_ms / 1000 + 1e-6
        assert removed_at[c.name] >= min(expiry[c.name], first_expiry + rebalance_ms / 1000) - 1e-6
        assert c.heartbeat() == GroupError.UNKNOWN_MEMBER_ID
