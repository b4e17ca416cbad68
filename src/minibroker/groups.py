"""Consumer-group coordinator: Kafka's classic group protocol as a pure state machine.

This module and its private parts (``_group_*``, see Layout below) decide everything about
consumer groups (membership, generations, leaders, protocol choice, assignments, session
expiry, committed offsets) and nothing about bytes or sockets. It follows Kafka's
``GroupCoordinator.scala`` / ``GroupMetadata.scala`` (the classic protocol, before KIP-848)
closely enough that confluent-kafka, aiokafka and kafka-python behave against it as against a
real broker.

Theory of operation
===================

A group moves through Kafka's states (:class:`GroupState`)::

    Empty --join--> PreparingRebalance --all joined / timeout--> CompletingRebalance
      ^                    ^     |                                       |
      |                    |     +--(no member left)--> Empty            | leader's SyncGroup
      |                    +--- join / leave / expiry -----------+       v
      +------------------------------------------------------ Stable <---+

JoinGroup and a follower's SyncGroup are long polls: Kafka parks them in a purgatory until the
join phase completes or the leader sends the assignment. Here such a call returns a
:class:`Ticket` instead of a result; the result arrives later as a :class:`Completion` that
:meth:`GroupCoordinator.tick` hands out. A completion can be caused by any call (the last member
to rejoin completes everybody's JoinGroup, the leader's SyncGroup completes the followers') or
by time (rebalance timeout, session expiry). Every ticket is completed exactly once, unless the
shell cancels it first (:meth:`GroupCoordinator.cancel`, e.g. when the connection closed).

Time comes only from the injected ``clock`` (monotonic seconds; ``time.monotonic`` by default,
which is also what asyncio's ``loop.time()`` reads). Every public call first fires the timers
that are due, so a member whose session expired cannot heartbeat its way back in even if the
shell ticked late. Timers fire in deadline order, each at its own deadline as "now", so a clock
that jumps far ahead (a test's fake clock) replays what would have happened on the way.

Wiring (one thread; the asyncio shell)
======================================

::

    coord = GroupCoordinator(GroupConfig.from_broker_config(broker_config), clock=loop.time)
    waiting: dict[Ticket, asyncio.Future[JoinGroupResult | SyncGroupResult]] = {}

    def settle() -> None:               # after every call, and when the timer below fires
        for done in coord.tick():
            fut = waiting.pop(done.ticket, None)
            if fut is not None and not fut.done():
                fut.set_result(done.result)
        deadline = coord.next_deadline()  # re-arm one loop.call_at(deadline, settle)

    out = coord.join_group(group_id=..., member_id=req.member_id, ...,
                           require_known_member_id=version >= 4)
    if isinstance(out, Ticket):
        waiting[out] = fut = loop.create_future()
        settle()
        out = await fut                  # on connection loss: coord.cancel(ticket)
    else:
        settle()

Mapping to the wire:

* JoinGroup: ``protocols`` is ``[(p.name, p.metadata) ...]``; ``rebalance_timeout_ms`` is the
  session timeout for v0. A :class:`JoinGroupResult` with ``protocol_name=None`` goes out as
  ``""`` for versions where the field is not nullable (< v7); ``skip_assignment`` is always
  false (KIP-814 is not implemented).
* SyncGroup: ``assignments`` is ``[(a.member_id, a.assignment) ...]`` (only the leader's are
  used); ``protocol_type``/``protocol_name`` are ``None`` below v5.
* Heartbeat returns the error code alone.
* LeaveGroup: v0-2 name one member; their top-level error is that member's error. v3+ pass
  every member; the top-level error is :attr:`LeaveGroupResult.error_code`.
* OffsetCommit / OffsetFetch: per-partition results; topics the cluster does not know should
  be answered UNKNOWN_TOPIC_OR_PARTITION by the shell before calling in. OffsetCommit takes the
  request's ``api_version`` (an unknown group's error changed in v9). OffsetFetch v8+ asks
  for several groups: call :meth:`GroupCoordinator.fetch_offsets` once per group.
* FindCoordinator: :func:`coordinator_partition` is Kafka's ``__consumer_offsets`` partition for
  a group (Java ``String.hashCode``); the shell names that partition's leader. When the leader
  stops or moves, call :meth:`GroupCoordinator.unload` with the partition, and
  :meth:`GroupCoordinator.load` once a running broker leads it again.
* Error codes are Kafka's numbers (:class:`GroupError` is an ``IntEnum``), so
  ``kio.schema.errors.ErrorCode(result.error_code)`` converts them.

Deliberate simplifications: offsets are kept in memory for the life of the coordinator (no
retention, no ``__consumer_offsets`` log); there are no transactional offset commits; static
membership follows KIP-345 without KIP-814's ``skip_assignment``.

Layout
======

:class:`GroupCoordinator` is the API; it owns the groups and hands each step to one part:

* ``_group_values``: the values exchanged with the shell and the settings (re-exported here);
* ``_group_state``: what is kept per group and per member, and what that state alone answers;
* ``_group_purgatory``: parked requests (tickets), their completions, and the timers;
* ``_group_rebalance``: join and sync phases, generations, session expiry, coordinator moves;
* ``_group_join``: JoinGroup, the admission of new, pending, known and static members;
* ``_group_offsets``: OffsetCommit and OffsetFetch.

SyncGroup, Heartbeat, LeaveGroup and the admin views (DescribeGroups, ListGroups, DeleteGroups)
are short enough to stay in :class:`GroupCoordinator`.
"""

from __future__ import annotations

import logging
import time
import uuid
from collections.abc import Callable, Iterable, Sequence

from minibroker._group_join import Joiner, NewJoin
from minibroker._group_offsets import OffsetStore
from minibroker._group_purgatory import Purgatory
from minibroker._group_rebalance import Rebalancer
from minibroker._group_state import Group
from minibroker._group_values import (
    NO_GENERATION,
    CommittedOffset,
    Completion,
    CoordinatorStats,
    GroupConfig,
    GroupConfigError,
    GroupDescription,
    GroupError,
    GroupListing,
    GroupState,
    JoinedMember,
    JoinGroupResult,
    LeaveGroupResult,
    LeavingMember,
    MemberDescription,
    MemberLeaveResult,
    OffsetToCommit,
    PartitionResult,
    SyncGroupResult,
    Ticket,
    coordinator_partition,
)

__all__ = [
    "CommittedOffset",
    "Completion",
    "CoordinatorStats",
    "GroupConfig",
    "GroupConfigError",
    "GroupCoordinator",
    "GroupDescription",
    "GroupError",
    "GroupListing",
    "GroupState",
    "JoinGroupResult",
    "JoinedMember",
    "LeaveGroupResult",
    "LeavingMember",
    "MemberDescription",
    "MemberLeaveResult",
    "OffsetToCommit",
    "PartitionResult",
    "SyncGroupResult",
    "Ticket",
    "coordinator_partition",
]

_log = logging.getLogger(__name__)


class GroupCoordinator:
    """Kafka's classic group coordinator for every group of a cluster; see the module doc.

    Not thread-safe: call it from one thread (the broker's event loop).
    """

    def __init__(
        self,
        config: GroupConfig | None = None,
        *,
        clock: Callable[[], float] = time.monotonic,
        member_id_factory: Callable[[str], str] | None = None,
    ) -> None:
        self._config = config if config is not None else GroupConfig()
        self._groups: dict[str, Group] = {}
        self._purgatory = Purgatory(clock)
        self._rebalance = Rebalancer(self._config, self._groups, self._purgatory)
        self._joiner = Joiner(
            self._config,
            self._groups,
            self._purgatory,
            self._rebalance,
            member_id_factory or _random_member_id,
        )
        self._offsets = OffsetStore(self._config, self._groups, self._rebalance)

    @property
    def config(self) -> GroupConfig:
        return self._config

    # ---------------------------------------------------------------- driving the machine

    def tick(self) -> list[Completion]:
        """Fire due timers and hand out every completion not yet handed out."""
        self._rebalance.advance()
        return self._purgatory.completions()

    def next_deadline(self) -> float | None:
        """When :meth:`tick` next has work (clock seconds), or None if nothing is scheduled."""
        return self._purgatory.next_deadline(self._rebalance.timer_live)

    def cancel(self, ticket: Ticket) -> bool:
        """Forget a parked request (its connection is gone). The member stays in the group as
        Kafka keeps it; its session expires if it does not come back. Returns False if the
        ticket was already completed or cancelled."""
        if not self._purgatory.forget(ticket):
            return False
        group = self._groups.get(ticket.group_id)
        member = group.members.get(ticket.member_id) if group is not None else None
        if member is not None:
            if member.join_ticket == ticket:
                member.join_ticket = None
            if member.sync_ticket == ticket:
                member.sync_ticket = None
        return True

    def shutdown(self) -> list[Completion]:
        """Drop every group and committed offset; parked requests complete with
        NOT_COORDINATOR (clients look for a new coordinator). The coordinator stays usable."""
        for group in self._groups.values():
            for member in group.members.values():
                self._purgatory.refuse(member, GroupError.NOT_COORDINATOR)
        self._groups.clear()
        self._purgatory.clear()
        self._rebalance.forget_unloaded()
        return self._purgatory.completions()

    # ---------------------------------------------------------------- coordinator moves

    def unload(self, offsets_partition: int) -> None:
        """The broker leading ``__consumer_offsets`` partition ``offsets_partition`` is gone
        (stopped, or no longer its leader): nobody coordinates its groups until :meth:`load`.

        As Kafka's ``GroupCoordinator.onGroupUnloaded``: parked JoinGroup and SyncGroup calls
        complete with NOT_COORDINATOR (collect them with :meth:`tick`); members told
        MEMBER_ID_REQUIRED are forgotten (Kafka never writes them down). No timer of these
        groups fires meanwhile: a stopped coordinator expires nobody.
        """
        self._rebalance.advance()
        self._rebalance.unload(offsets_partition)

    def load(self, offsets_partition: int) -> None:
        """A running broker now leads ``__consumer_offsets`` partition ``offsets_partition``
        and serves its groups.

        As Kafka's ``GroupCoordinator.onGroupLoaded``: every member's session restarts now, so
        a member that could not reach a coordinator while none was there is not expired for it.
        A rebalance that was under way resumes with its deadline restarted too (Kafka would
        reload the last Stable generation and let the members rejoin; both end in a rebalance
        the clients complete).
        """
        self._rebalance.advance()
        self._rebalance.load(offsets_partition)

    # ---------------------------------------------------------------- JoinGroup

    def join_group(
        self,
        *,
        group_id: str,
        member_id: str,
        protocol_type: str,
        protocols: Sequence[tuple[str, bytes]],
        session_timeout_ms: int,
        rebalance_timeout_ms: int,
        require_known_member_id: bool,
        group_instance_id: str | None = None,
        client_id: str = "",
        client_host: str = "",
        reason: str | None = None,
    ) -> JoinGroupResult | Ticket:
        """JoinGroup. ``require_known_member_id`` is true for request v4+: a new dynamic member
        then gets MEMBER_ID_REQUIRED with its id and must join again with it."""
        self._rebalance.advance()
        outcome = self._joiner.join(
            group_id=group_id,
            member_id=member_id,
            require_known_member_id=require_known_member_id,
            new=NewJoin(
                group_instance_id=group_instance_id,
                client_id=client_id,
                client_host=client_host,
                protocol_type=protocol_type,
                protocols=tuple((name, bytes(metadata)) for name, metadata in protocols),
                session_timeout_ms=session_timeout_ms,
                rebalance_timeout_ms=rebalance_timeout_ms,
                reason=reason,
            ),
        )
        self._rebalance.advance()
        return self._purgatory.claim(outcome, JoinGroupResult)

    # ---------------------------------------------------------------- SyncGroup

    def sync_group(
        self,
        *,
        group_id: str,
        member_id: str,
        generation_id: int,
        assignments: Iterable[tuple[str, bytes]] = (),
        group_instance_id: str | None = None,
        protocol_type: str | None = None,
        protocol_name: str | None = None,
    ) -> SyncGroupResult | Ticket:
        """SyncGroup. The leader's ``assignments`` (member id, bytes) are stored for every
        member (missing members get empty bytes); a follower's call parks until they arrive."""
        self._rebalance.advance()
        outcome = self._sync(
            group_id,
            member_id,
            generation_id,
            tuple((mid, bytes(data)) for mid, data in assignments),
            group_instance_id,
            protocol_type,
            protocol_name,
        )
        self._rebalance.advance()
        return self._purgatory.claim(outcome, SyncGroupResult)

    def _sync(
        self,
        group_id: str,
        member_id: str,
        generation_id: int,
        assignments: tuple[tuple[str, bytes], ...],
        group_instance_id: str | None,
        protocol_type: str | None,
        protocol_name: str | None,
    ) -> SyncGroupResult | Ticket:
        group = self._groups.get(group_id)
        if group is None:
            return SyncGroupResult(error_code=GroupError.UNKNOWN_MEMBER_ID)
        member = group.current_member(member_id, generation_id, group_instance_id)
        if isinstance(member, GroupError):
            return SyncGroupResult(error_code=member)
        if (protocol_type is not None and protocol_type != group.protocol_type) or (
            protocol_name is not None and protocol_name != group.protocol_name
        ):
            return SyncGroupResult(error_code=GroupError.INCONSISTENT_GROUP_PROTOCOL)
        if group.state is GroupState.PREPARING_REBALANCE:
            return SyncGroupResult(error_code=GroupError.REBALANCE_IN_PROGRESS)
        if group.state is GroupState.STABLE:
            group.sync_received(member_id)
            self._rebalance.touch(member)
            return group.sync_result(member)
        # CompletingRebalance: park until the leader's assignment arrives.
        self._purgatory.finish_sync(
            member, SyncGroupResult(error_code=GroupError.REBALANCE_IN_PROGRESS)
        )
        member.awaiting_sync = True
        member.sync_ticket = ticket = self._purgatory.issue("sync", group_id, member_id)
        member.session_deadline_s = None
        group.sync_received(member_id)
        if member_id == group.leader_id:
            self._rebalance.complete_sync(group, assignments)
        return ticket

    # ---------------------------------------------------------------- Heartbeat, LeaveGroup

    def heartbeat(
        self,
        *,
        group_id: str,
        member_id: str,
        generation_id: int,
        group_instance_id: str | None = None,
    ) -> int:
        """Heartbeat; returns the error code (REBALANCE_IN_PROGRESS tells the member to rejoin)."""
        self._rebalance.advance()
        group = self._groups.get(group_id)
        if group is None:
            return GroupError.UNKNOWN_MEMBER_ID
        member = group.current_member(member_id, generation_id, group_instance_id)
        if isinstance(member, GroupError):
            return member
        self._rebalance.touch(member)
        if group.state is GroupState.PREPARING_REBALANCE:
            return GroupError.REBALANCE_IN_PROGRESS
        return GroupError.NONE

    def leave_group(self, *, group_id: str, members: Sequence[LeavingMember]) -> LeaveGroupResult:
        """LeaveGroup for one (v0-2) or several (v3+) members. A static member may be named by
        ``group_instance_id`` alone (the admin client's removal)."""
        self._rebalance.advance()
        group = self._groups.get(group_id)
        results: list[MemberLeaveResult] = []
        for leaving in members:
            code = (
                self._leave_one(group, leaving)
                if group is not None
                else GroupError.UNKNOWN_MEMBER_ID
            )
            results.append(
                MemberLeaveResult(
                    member_id=leaving.member_id,
                    group_instance_id=leaving.group_instance_id,
                    error_code=code,
                )
            )
        self._rebalance.advance()
        return LeaveGroupResult(error_code=GroupError.NONE, members=tuple(results))

    def _leave_one(self, group: Group, leaving: LeavingMember) -> GroupError:
        reason = leaving.reason or "left the group"
        if leaving.group_instance_id is not None:
            current = group.static_members.get(leaving.group_instance_id)
            if current is None:
                return GroupError.UNKNOWN_MEMBER_ID
            if leaving.member_id and leaving.member_id != current:
                return GroupError.FENCED_INSTANCE_ID
            self._rebalance.remove_member_and_update(group, group.members[current], reason)
            return GroupError.NONE
        if leaving.member_id in group.pending_members:
            del group.pending_members[leaving.member_id]
            self._rebalance.maybe_complete_join(group)
            return GroupError.NONE
        member = group.members.get(leaving.member_id)
        if member is None:
            return GroupError.UNKNOWN_MEMBER_ID
        self._rebalance.remove_member_and_update(group, member, reason)
        return GroupError.NONE

    # ---------------------------------------------------------------- offsets

    def commit_offsets(
        self,
        *,
        group_id: str,
        member_id: str,
        generation_id: int,
        offsets: Sequence[OffsetToCommit],
        group_instance_id: str | None = None,
        api_version: int = 9,
    ) -> tuple[PartitionResult, ...]:
        """OffsetCommit (request version ``api_version``). Generation -1 is a "simple" commit
        from the admin client or a consumer that manages its own partitions; it is accepted
        while the group has no members (an unknown group is created). Otherwise the member
        and generation must be current (a group the coordinator does not know answers
        GROUP_ID_NOT_FOUND from v9, ILLEGAL_GENERATION before), and a group still waiting for
        its assignment answers REBALANCE_IN_PROGRESS."""
        self._rebalance.advance()
        return self._offsets.commit(
            group_id=group_id,
            member_id=member_id,
            generation_id=generation_id,
            offsets=offsets,
            group_instance_id=group_instance_id,
            api_version=api_version,
        )

    def fetch_offsets(
        self, group_id: str, partitions: Iterable[tuple[str, int]] | None = None
    ) -> tuple[CommittedOffset, ...]:
        """OffsetFetch: the committed offsets of ``partitions`` (offset -1 where none), or
        every committed offset of the group (sorted) when ``partitions`` is None."""
        return self._offsets.fetch(group_id, partitions)

    def remove_topic_offsets(self, topic: str) -> int:
        """Forget every group's committed offsets for a deleted topic; returns how many."""
        return self._offsets.remove_topic(topic)

    # ---------------------------------------------------------------- admin

    def describe_group(self, group_id: str) -> GroupDescription:
        self._rebalance.advance()
        group = self._groups.get(group_id)
        if group is None:
            return GroupDescription(
                group_id=group_id,
                error_code=GroupError.NONE,
                state=GroupState.DEAD,
                protocol_type="",
                protocol_name="",
                generation_id=NO_GENERATION,
                leader="",
                members=(),
            )
        stable = group.state is GroupState.STABLE
        members = tuple(
            MemberDescription(
                member_id=m.member_id,
                group_instance_id=m.group_instance_id,
                client_id=m.client_id,
                client_host=m.client_host,
                metadata=m.metadata_for(group.protocol_name) if stable else b"",
                assignment=(m.assignment or b"") if stable else b"",
            )
            for m in group.members.values()
        )
        return GroupDescription(
            group_id=group_id,
            error_code=GroupError.NONE,
            state=group.state,
            protocol_type=group.protocol_type or "",
            protocol_name=(group.protocol_name or "") if stable else "",
            generation_id=group.generation_id,
            leader=group.leader_id or "",
            members=members,
        )

    def list_groups(self) -> tuple[GroupListing, ...]:
        self._rebalance.advance()
        return tuple(
            GroupListing(group_id=g.group_id, protocol_type=g.protocol_type or "", state=g.state)
            for _, g in sorted(self._groups.items())
        )

    def delete_groups(self, group_ids: Iterable[str]) -> dict[str, int]:
        """DeleteGroups: only groups without members can go (NON_EMPTY_GROUP otherwise);
        their committed offsets go with them."""
        self._rebalance.advance()
        results: dict[str, int] = {}
        for group_id in group_ids:
            group = self._groups.get(group_id)
            if group is None:
                results[group_id] = GroupError.GROUP_ID_NOT_FOUND
            elif group.state is not GroupState.EMPTY:
                results[group_id] = GroupError.NON_EMPTY_GROUP
            else:
                del self._groups[group_id]
                _log.info("Group %s deleted", group_id)
                results[group_id] = GroupError.NONE
        return results

    def stats(self) -> CoordinatorStats:
        return CoordinatorStats(
            groups=len(self._groups),
            members=sum(len(g.members) for g in self._groups.values()),
            pending_members=sum(len(g.pending_members) for g in self._groups.values()),
            open_tickets=self._purgatory.open_tickets,
            committed_offsets=sum(len(g.offsets) for g in self._groups.values()),
        )


def _random_member_id(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4()}"
