"""Random sequences of consumer behaviour against the group coordinator, checking its invariants.

Five consumers in two groups join (with and without MEMBER_ID_REQUIRED), sync, heartbeat,
commit, leave, drop their connection mid-request, and go silent while the fake clock jumps.
A few stray requests come from members that do not exist. After every step:

* every completion answers a ticket that was open (never twice, never after a cancel), and the
  coordinator's count of open tickets equals ours;
* a group's generation never goes back;
* a Stable group's members all hold the assignment the leader made for that generation;
* everybody told "you are in generation g" agrees on g's leader and protocol and is in the
  leader's member list for g; no member id is in two groups;
* a parked JoinGroup exists only during a join phase, a parked SyncGroup only while its own
  generation waits for the leader;
* no timer is overdue after a tick;
* while a group's coordinator is gone (unloaded, not yet loaded elsewhere) nothing of it changes.

At the end the clock runs until nothing is scheduled: every ticket has been answered or
cancelled, every member is gone and every group is Empty (nothing leaks).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import (
    RuleBasedStateMachine,
    initialize,
    invariant,
    precondition,
    rule,
)

from minibroker.groups import (
    GroupConfig,
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

GROUPS = ("g1", "g2")
CLIENTS = 5
PROTOCOL_CHOICES: tuple[tuple[str, tuple[tuple[str, bytes], ...]], ...] = (
    ("consumer", (("range", b"r"), ("roundrobin", b"rr"))),
    ("consumer", (("roundrobin", b"rr"),)),
    ("consumer", (("range", b"r2"),)),
    ("connect", (("range", b"x"),)),
)


class FakeClock:
    def __init__(self) -> None:
        self.now_s = 50.0

    def __call__(self) -> float:
        return self.now_s


@dataclass
class Client:
    name: str
    group: str
    session_ms: int
    rebalance_ms: int
    member_id: str = ""
    generation: int = -1
    join: JoinGroupResult | None = None
    assignment: bytes | None = None
    ticket: Ticket | None = None


@dataclass
class GenerationView:
    leader: str
    protocol: str | None
    members: frozenset[str] | None = None
    recipients: set[str] = field(default_factory=set)


def assignment_for(generation: int) -> bytes:
    return f"gen{generation}".encode()


class GroupMachine(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        self.clock = FakeClock()
        self.coord = GroupCoordinator(GroupConfig(min_session_timeout_ms=500), clock=self.clock)
        self.clients: list[Client] = []
        self.open: dict[Ticket, tuple[int, int]] = {}  # ticket -> (client, generation sent)
        self.closed: set[int] = set()
        self.max_generation: dict[str, int] = {}
        self.views: dict[tuple[str, int], GenerationView] = {}

    @initialize(
        delay_ms=st.sampled_from([0, 0, 300]),
        sessions=st.lists(st.integers(2, 30), min_size=CLIENTS, max_size=CLIENTS),
        rebalances=st.lists(st.integers(1, 30), min_size=CLIENTS, max_size=CLIENTS),
    )
    def setup(self, delay_ms: int, sessions: list[int], rebalances: list[int]) -> None:
        self.coord = GroupCoordinator(
            GroupConfig(min_session_timeout_ms=500, initial_rebalance_delay_ms=delay_ms),
            clock=self.clock,
        )
        self.clients = [
            Client(
                name=f"c{i}",
                group=GROUPS[0] if i < 3 else GROUPS[1],
                session_ms=sessions[i] * 1000,
                rebalance_ms=rebalances[i] * 1000,
            )
            for i in range(CLIENTS)
        ]

    # ------------------------------------------------------------------ plumbing

    def issue(self, index: int, ticket: Ticket, generation: int = -1) -> None:
        assert ticket not in self.open
        assert ticket.ticket_id not in self.closed
        self.open[ticket] = (index, generation)
        self.clients[index].ticket = ticket

    def drain(self) -> None:
        for done in self.coord.tick():
            assert done.ticket in self.open, f"completion for a ticket not open: {done.ticket}"
            index, generation = self.open.pop(done.ticket)
            self.closed.add(done.ticket.ticket_id)
            client = self.clients[index]
            assert client.ticket == done.ticket
            client.ticket = None
            if isinstance(done.result, JoinGroupResult):
                assert done.ticket.kind == "join"
                self.on_join(client, done.result)
            else:
                assert done.ticket.kind == "sync"
                self.on_sync(client, done.result, generation)

    def on_join(self, client: Client, result: JoinGroupResult) -> None:
        code = result.error_code
        if code == GroupError.MEMBER_ID_REQUIRED:
            client.member_id = result.member_id
        elif code == GroupError.UNKNOWN_MEMBER_ID:
            present = {m.member_id for m in self.coord.describe_group(client.group).members}
            assert client.member_id not in present or not client.member_id
            client.member_id, client.join = "", None
        elif code == GroupError.NONE:
            client.member_id = result.member_id
            client.generation = result.generation_id
            client.join = result
            client.assignment = None
            self.record_view(client.group, result)
        else:
            assert code in (
                GroupError.REBALANCE_IN_PROGRESS,
                GroupError.INCONSISTENT_GROUP_PROTOCOL,
                GroupError.NOT_COORDINATOR,  # the coordinator moved; join again there
            ), code

    def record_view(self, group: str, result: JoinGroupResult) -> None:
        described = self.coord.describe_group(group)
        assert result.generation_id <= described.generation_id
        key = (group, result.generation_id)
        view = self.views.setdefault(
            key, GenerationView(leader=result.leader, protocol=result.protocol_name)
        )
        assert (view.leader, view.protocol) == (result.leader, result.protocol_name), key
        if result.members:
            assert result.leader == result.member_id, "only the leader sees the members"
            listed = frozenset(m.member_id for m in result.members)
            assert view.members in (None, listed), key
            view.members = listed
        view.recipients.add(result.member_id)
        if view.members is not None:
            assert view.recipients <= view.members, key

    def on_sync(self, client: Client, result: SyncGroupResult, generation: int) -> None:
        if result.error_code == GroupError.NONE:
            assert result.assignment == assignment_for(generation)
            client.assignment = result.assignment
        else:
            assert result.error_code in (
                GroupError.REBALANCE_IN_PROGRESS,
                GroupError.UNKNOWN_MEMBER_ID,
                GroupError.NOT_COORDINATOR,
            ), result.error_code
            client.join = None
            if result.error_code == GroupError.UNKNOWN_MEMBER_ID:
                client.member_id = ""

    # ------------------------------------------------------------------ rules

    @rule(
        index=st.integers(0, CLIENTS - 1),
        require_known=st.booleans(),
        choice=st.sampled_from([0, 0, 0, 0, 0, 0, 1, 2, 3]),
    )
    def join(self, index: int, require_known: bool, choice: int) -> None:
        client = self.clients[index]
        if client.ticket is not None:
            return
        protocol_type, protocols = PROTOCOL_CHOICES[choice]
        out = self.coord.join_group(
            group_id=client.group,
            member_id=client.member_id,
            protocol_type=protocol_type,
            protocols=protocols,
            session_timeout_ms=client.session_ms,
            rebalance_timeout_ms=client.rebalance_ms,
            require_known_member_id=require_known,
            client_id=client.name,
        )
        if isinstance(out, Ticket):
            assert out.kind == "join"
            self.issue(index, out)
        else:
            self.on_join(client, out)
        self.drain()

    @rule(index=st.integers(0, CLIENTS - 1))
    def sync(self, index: int) -> None:
        client = self.clients[index]
        if client.ticket is not None or client.join is None:
            return
        leading = client.join.leader == client.member_id
        assignments = (
            [(m.member_id, assignment_for(client.generation)) for m in client.join.members]
            if leading
            else []
        )
        out = self.coord.sync_group(
            group_id=client.group,
            member_id=client.member_id,
            generation_id=client.generation,
            assignments=assignments,
        )
        if isinstance(out, Ticket):
            assert out.kind == "sync"
            self.issue(index, out, client.generation)
        else:
            if out.error_code == GroupError.ILLEGAL_GENERATION:
                client.join = None
            else:
                self.on_sync(client, out, client.generation)
        self.drain()

    @rule(index=st.integers(0, CLIENTS - 1))
    def heartbeat(self, index: int) -> None:
        client = self.clients[index]
        if not client.member_id:
            return
        code = self.coord.heartbeat(
            group_id=client.group, member_id=client.member_id, generation_id=client.generation
        )
        assert code in (
            GroupError.NONE,
            GroupError.REBALANCE_IN_PROGRESS,
            GroupError.ILLEGAL_GENERATION,
            GroupError.UNKNOWN_MEMBER_ID,
        )
        if code == GroupError.UNKNOWN_MEMBER_ID and client.ticket is None:
            client.member_id, client.join = "", None
        self.drain()

    @rule(index=st.integers(0, CLIENTS - 1))
    def leave(self, index: int) -> None:
        client = self.clients[index]
        if not client.member_id:
            return
        result = self.coord.leave_group(
            group_id=client.group, members=[LeavingMember(member_id=client.member_id)]
        )
        assert result.members[0].error_code in (
            GroupError.NONE,
            GroupError.UNKNOWN_MEMBER_ID,
        )
        present = {m.member_id for m in self.coord.describe_group(client.group).members}
        assert client.member_id not in present
        client.member_id, client.join, client.generation = "", None, -1
        self.drain()

    @rule(index=st.integers(0, CLIENTS - 1), offset=st.integers(0, 1000))
    def commit(self, index: int, offset: int) -> None:
        client = self.clients[index]
        before = self.coord.describe_group(client.group)
        is_member = client.member_id in {m.member_id for m in before.members}
        [result] = self.coord.commit_offsets(
            group_id=client.group,
            member_id=client.member_id,
            generation_id=client.generation,
            offsets=[OffsetToCommit(topic="t", partition=index, offset=offset)],
        )
        # Kafka 4: generation -1 commits to an empty (or unknown) group whoever it names.
        simple = client.generation < 0 and not client.member_id
        if client.generation < 0 and before.state in (GroupState.EMPTY, GroupState.DEAD):
            expected = GroupError.NONE
        elif before.state is GroupState.DEAD:
            expected = GroupError.GROUP_ID_NOT_FOUND  # v9, the default
        elif simple or not is_member:
            expected = GroupError.UNKNOWN_MEMBER_ID
        elif client.generation != before.generation_id:
            expected = GroupError.ILLEGAL_GENERATION
        elif before.state is GroupState.COMPLETING_REBALANCE:
            expected = GroupError.REBALANCE_IN_PROGRESS
        else:
            expected = GroupError.NONE
        assert result.error_code == expected, (before.state, result)
        fetched = self.coord.fetch_offsets(client.group, [("t", index)])[0].offset
        if expected == GroupError.NONE:
            assert fetched == offset
        self.drain()

    @rule(group=st.sampled_from(GROUPS), member=st.sampled_from(["ghost", "c0-x"]))
    def stray_requests(self, group: str, member: str) -> None:
        assert (
            self.coord.heartbeat(group_id=group, member_id=member, generation_id=1)
            == GroupError.UNKNOWN_MEMBER_ID
        )
        out = self.coord.sync_group(group_id=group, member_id=member, generation_id=1)
        assert out == SyncGroupResult(error_code=GroupError.UNKNOWN_MEMBER_ID)
        left = self.coord.leave_group(group_id=group, members=[LeavingMember(member_id=member)])
        assert left.members[0].error_code == GroupError.UNKNOWN_MEMBER_ID
        self.drain()

    @rule(index=st.integers(0, CLIENTS - 1), slow_leader=st.booleans())
    def polls(self, index: int, slow_leader: bool) -> None:
        """What a well-behaved consumer does next: join, sync, or heartbeat (and rejoin). A
        slow leader computes its assignment for a while, so followers park in SyncGroup."""
        client = self.clients[index]
        if client.ticket is not None:
            return
        if not client.member_id or client.join is None:
            self.join(index, require_known=True, choice=0)
            return
        leading = client.join.leader == client.member_id
        if client.assignment is None and not (leading and slow_leader):
            self.sync(index)
            return
        code = self.coord.heartbeat(
            group_id=client.group,
            member_id=client.member_id,
            generation_id=client.generation,
        )
        if code == GroupError.UNKNOWN_MEMBER_ID:
            client.member_id, client.join = "", None
        elif code != GroupError.NONE:
            client.join = None
        self.drain()

    # Consumers poll far more often than anything else happens.
    polls_2 = polls
    polls_3 = polls
    polls_4 = polls
    polls_5 = polls

    @rule(ms=st.sampled_from([0, 10, 100, 500, 1000, 2000, 5000, 15_000, 40_000]))
    def time_passes(self, ms: int) -> None:
        self.clock.now_s += ms / 1000
        self.drain()

    @precondition(lambda self: any(c.ticket is not None for c in self.clients))
    @rule(data=st.data())
    def connection_drops(self, data: st.DataObject) -> None:
        parked = [i for i, c in enumerate(self.clients) if c.ticket is not None]
        index = data.draw(st.sampled_from(parked))
        client = self.clients[index]
        assert client.ticket is not None
        assert self.coord.cancel(client.ticket) is True
        del self.open[client.ticket]
        self.closed.add(client.ticket.ticket_id)
        client.ticket = None
        self.drain()

    @rule(
        group=st.sampled_from(GROUPS),
        gap_ms=st.sampled_from([0, 300, 9_000, 40_000]),
        drop_parked=st.booleans(),
    )
    def coordinator_moves(self, group: str, gap_ms: int, drop_parked: bool) -> None:
        # The group's coordinator crashes; another broker loads the group gap_ms later. Parked
        # requests are answered NOT_COORDINATOR (or their connection drops first), nothing of
        # the group changes while nobody coordinates it, and the load restarts its sessions.
        partition = coordinator_partition(group)
        if drop_parked:
            for client in self.clients:
                if client.group == group and client.ticket is not None:
                    self.coord.cancel(client.ticket)
                    del self.open[client.ticket]
                    self.closed.add(client.ticket.ticket_id)
                    client.ticket = None
        self.coord.unload(partition)
        self.drain()
        assert not any(c.ticket for c in self.clients if c.group == group)
        before = self.coord.describe_group(group)
        self.clock.now_s += gap_ms / 1000
        self.drain()
        assert self.coord.describe_group(group) == before
        self.coord.load(partition)
        self.drain()

    @rule(group=st.sampled_from(GROUPS))
    def delete(self, group: str) -> None:
        state = self.coord.describe_group(group).state
        result = self.coord.delete_groups([group])[group]
        if state is GroupState.DEAD:
            assert result == GroupError.GROUP_ID_NOT_FOUND
        elif state is GroupState.EMPTY:
            assert result == GroupError.NONE
            self.max_generation.pop(group, None)
            self.views = {k: v for k, v in self.views.items() if k[0] != group}
            assert self.coord.fetch_offsets(group) == ()
        else:
            assert result == GroupError.NON_EMPTY_GROUP
        self.drain()

    # ------------------------------------------------------------------ invariants

    @invariant()
    def tickets_are_accounted_for(self) -> None:
        assert self.coord.stats().open_tickets == len(self.open)

    @invariant()
    def parked_requests_wait_for_something(self) -> None:
        # A JoinGroup waits only for a join phase, a SyncGroup only for the leader of its own
        # generation; once that cannot happen any more, the request must have been answered.
        for ticket, (index, generation) in self.open.items():
            d = self.coord.describe_group(self.clients[index].group)
            if ticket.kind == "join":
                assert d.state is GroupState.PREPARING_REBALANCE, (ticket, d.state)
            else:
                assert d.state is GroupState.COMPLETING_REBALANCE, (ticket, d.state)
                assert d.generation_id == generation

    @invariant()
    def nothing_is_overdue(self) -> None:
        deadline = self.coord.next_deadline()
        assert deadline is None or deadline > self.clock.now_s

    @invariant()
    def groups_are_consistent(self) -> None:
        seen: dict[str, str] = {}
        for group in GROUPS:
            d = self.coord.describe_group(group)
            assert d.generation_id >= self.max_generation.get(group, d.generation_id)
            if d.state is not GroupState.DEAD:
                self.max_generation[group] = d.generation_id
            ids = [m.member_id for m in d.members]
            for member_id in ids:
                assert member_id not in seen, f"{member_id} in {seen.get(member_id)} and {group}"
                seen[member_id] = group
            if d.state in (GroupState.EMPTY, GroupState.DEAD):
                assert ids == []
            if ids:
                assert d.leader in ids
            if d.state in (GroupState.STABLE, GroupState.COMPLETING_REBALANCE):
                view = self.views.get((group, d.generation_id))
                if view is not None and view.members is not None:
                    assert set(ids) == view.members
            if d.state is GroupState.STABLE:
                assert d.protocol_name
                for m in d.members:
                    assert m.assignment == assignment_for(d.generation_id), m

    def teardown(self) -> None:
        for _ in range(10_000):
            deadline = self.coord.next_deadline()
            if deadline is None:
                break
            self.clock.now_s = max(self.clock.now_s, deadline)
            self.drain()
        else:
            raise AssertionError("timers keep firing with nobody left to act")
        assert self.open == {}, f"tickets never answered: {list(self.open)}"
        stats = self.coord.stats()
        assert (stats.open_tickets, stats.members, stats.pending_members) == (0, 0, 0)
        for group in GROUPS:
            assert self.coord.describe_group(group).state in (GroupState.EMPTY, GroupState.DEAD)


GroupMachine.TestCase.settings = settings(max_examples=100, stateful_step_count=80, deadline=None)
TestGroupCoordinatorInvariants = GroupMachine.TestCase
