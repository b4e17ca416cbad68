"""Consumer-group coordinator: Kafka's classic group protocol as a pure state machine.

This module decides everything about consumer groups (membership, generations, leaders,
protocol choice, assignments, session expiry, committed offsets) and nothing about bytes or
sockets. It follows Kafka's ``GroupCoordinator.scala`` / ``GroupMetadata.scala`` (the classic
protocol, before KIP-848) closely enough that confluent-kafka, aiokafka and kafka-python behave
against it as against a real broker.

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
  be answered UNKNOWN_TOPIC_OR_PARTITION by the shell before calling in. OffsetFetch v8+ asks
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
"""

from __future__ import annotations

import enum
import heapq
import itertools
import logging
import time
import uuid
from collections import Counter
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Literal, TypeVar

from minibroker.errors import ConfigError

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

NO_GENERATION = -1
NO_OFFSET = -1
NO_LEADER_EPOCH = -1


class GroupError(enum.IntEnum):
    """Kafka error codes the coordinator answers with (values are the wire numbers)."""

    NONE = 0
    OFFSET_METADATA_TOO_LARGE = 12
    COORDINATOR_NOT_AVAILABLE = 15
    NOT_COORDINATOR = 16
    ILLEGAL_GENERATION = 22
    INCONSISTENT_GROUP_PROTOCOL = 23
    INVALID_GROUP_ID = 24
    UNKNOWN_MEMBER_ID = 25
    INVALID_SESSION_TIMEOUT = 26
    REBALANCE_IN_PROGRESS = 27
    NON_EMPTY_GROUP = 68
    GROUP_ID_NOT_FOUND = 69
    MEMBER_ID_REQUIRED = 79
    GROUP_MAX_SIZE_REACHED = 81
    FENCED_INSTANCE_ID = 82


class GroupState(enum.Enum):
    """Kafka's group states; the value is the name DescribeGroups and ListGroups report."""

    EMPTY = "Empty"
    PREPARING_REBALANCE = "PreparingRebalance"
    COMPLETING_REBALANCE = "CompletingRebalance"
    STABLE = "Stable"
    DEAD = "Dead"


class GroupConfigError(ConfigError):
    """A group coordinator setting is out of range or not a number."""


# --------------------------------------------------------------------------------------------
# Configuration


_BROKER_KEYS = {
    "group.initial.rebalance.delay.ms": "initial_rebalance_delay_ms",
    "group.min.session.timeout.ms": "min_session_timeout_ms",
    "group.max.session.timeout.ms": "max_session_timeout_ms",
    "group.max.size": "max_size",
    "offset.metadata.max.bytes": "offset_metadata_max_bytes",
    "offsets.topic.num.partitions": "offsets_partitions",
}


@dataclass(frozen=True, slots=True, kw_only=True)
class GroupConfig:
    """Coordinator settings, named after Kafka's broker settings (see :meth:`from_broker_config`).

    Kafka's defaults except ``initial_rebalance_delay_ms``: 0 rather than 3000, so a test's
    first consumer is assigned at once. Clients default to a 45 s session timeout, inside the
    default bounds.
    """

    initial_rebalance_delay_ms: int = 0
    min_session_timeout_ms: int = 6_000
    max_session_timeout_ms: int = 1_800_000
    max_size: int = 2**31 - 1
    offset_metadata_max_bytes: int = 4096
    offsets_partitions: int = 50

    def __post_init__(self) -> None:
        for name in _BROKER_KEYS.values():
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int):
                raise GroupConfigError(
                    f"{name}={value!r} is not an integer; pass a whole number of the unit its "
                    "name ends in"
                )
            if value < 0:
                raise GroupConfigError(f"{name}={value} is negative; use 0 or more")
        if self.min_session_timeout_ms > self.max_session_timeout_ms:
            raise GroupConfigError(
                f"min_session_timeout_ms={self.min_session_timeout_ms} is above "
                f"max_session_timeout_ms={self.max_session_timeout_ms}; no session timeout "
                "could be accepted"
            )
        if self.max_size < 1:
            raise GroupConfigError("max_size=0 would refuse every member; use 1 or more")
        if self.offsets_partitions < 1:
            raise GroupConfigError("offsets_partitions=0: __consumer_offsets needs a partition")

    @classmethod
    def from_broker_config(cls, config: Mapping[str, object]) -> GroupConfig:
        """Read Kafka's broker keys (``group.initial.rebalance.delay.ms``,
        ``group.min.session.timeout.ms``, ``group.max.session.timeout.ms``, ``group.max.size``,
        ``offset.metadata.max.bytes``, ``offsets.topic.num.partitions``) from a broker config;
        other keys are ignored and the mapping is not modified. Values may be ints or decimal
        strings."""
        kwargs: dict[str, int] = {}
        for key, name in _BROKER_KEYS.items():
            if key not in config:
                continue
            raw = config[key]
            if isinstance(raw, int) and not isinstance(raw, bool):
                kwargs[name] = raw
                continue
            try:
                kwargs[name] = int(str(raw).strip())
            except ValueError:
                raise GroupConfigError(
                    f"{key}={raw!r} is not an integer; Kafka expects a whole number here"
                ) from None
        return cls(**kwargs)


# --------------------------------------------------------------------------------------------
# Values exchanged with the shell


@dataclass(frozen=True, slots=True, kw_only=True)
class Ticket:
    """A parked JoinGroup or SyncGroup; its result comes later as a :class:`Completion`."""

    ticket_id: int
    kind: Literal["join", "sync"]
    group_id: str
    member_id: str


@dataclass(frozen=True, slots=True, kw_only=True)
class JoinedMember:
    """A member as the leader sees it in its JoinGroup response."""

    member_id: str
    group_instance_id: str | None
    metadata: bytes


@dataclass(frozen=True, slots=True, kw_only=True)
class JoinGroupResult:
    """The fields of a JoinGroup response. ``members`` is filled for the leader only."""

    error_code: int
    member_id: str
    generation_id: int = NO_GENERATION
    protocol_type: str | None = None
    protocol_name: str | None = None
    leader: str = ""
    members: tuple[JoinedMember, ...] = ()


@dataclass(frozen=True, slots=True, kw_only=True)
class SyncGroupResult:
    """The fields of a SyncGroup response."""

    error_code: int
    protocol_type: str | None = None
    protocol_name: str | None = None
    assignment: bytes = b""


@dataclass(frozen=True, slots=True, kw_only=True)
class Completion:
    """A parked request that is now answered."""

    ticket: Ticket
    result: JoinGroupResult | SyncGroupResult


@dataclass(frozen=True, slots=True, kw_only=True)
class LeavingMember:
    """One member of a LeaveGroup request (v3+ batch several)."""

    member_id: str = ""
    group_instance_id: str | None = None
    reason: str | None = None


@dataclass(frozen=True, slots=True, kw_only=True)
class MemberLeaveResult:
    member_id: str
    group_instance_id: str | None
    error_code: int


@dataclass(frozen=True, slots=True, kw_only=True)
class LeaveGroupResult:
    error_code: int
    members: tuple[MemberLeaveResult, ...]


@dataclass(frozen=True, slots=True, kw_only=True)
class OffsetToCommit:
    """One partition of an OffsetCommit request."""

    topic: str
    partition: int
    offset: int
    leader_epoch: int = NO_LEADER_EPOCH
    metadata: str | None = ""


@dataclass(frozen=True, slots=True, kw_only=True)
class PartitionResult:
    topic: str
    partition: int
    error_code: int


@dataclass(frozen=True, slots=True, kw_only=True)
class CommittedOffset:
    """A committed offset; ``offset == -1`` (with empty metadata) when nothing is committed."""

    topic: str
    partition: int
    offset: int
    leader_epoch: int
    metadata: str


@dataclass(frozen=True, slots=True, kw_only=True)
class MemberDescription:
    member_id: str
    group_instance_id: str | None
    client_id: str
    client_host: str
    metadata: bytes
    assignment: bytes


@dataclass(frozen=True, slots=True, kw_only=True)
class GroupDescription:
    """DescribeGroups' view; an unknown group is reported ``Dead`` with no error, as Kafka
    does. Metadata and assignments are filled only while the group is Stable."""

    group_id: str
    error_code: int
    state: GroupState
    protocol_type: str
    protocol_name: str
    generation_id: int
    leader: str
    members: tuple[MemberDescription, ...]


@dataclass(frozen=True, slots=True, kw_only=True)
class GroupListing:
    group_id: str
    protocol_type: str
    state: GroupState


@dataclass(frozen=True, slots=True, kw_only=True)
class CoordinatorStats:
    groups: int
    members: int
    pending_members: int
    open_tickets: int
    committed_offsets: int


def coordinator_partition(group_id: str, partitions: int = 50) -> int:
    """Kafka's ``__consumer_offsets`` partition for ``group_id``:
    ``Utils.abs(groupId.hashCode) % partitions`` with Java's ``String.hashCode``."""
    if partitions < 1:
        raise GroupConfigError(f"partitions={partitions}: need at least one partition")
    h = 0
    data = group_id.encode("utf-16-be")
    for i in range(0, len(data), 2):
        h = (31 * h + ((data[i] << 8) | data[i + 1])) & 0xFFFFFFFF
    signed = h - (1 << 32) if h & 0x80000000 else h
    # Kafka's Utils.abs maps Integer.MIN_VALUE to 0 rather than overflowing.
    return (0 if signed == -(1 << 31) else abs(signed)) % partitions


# --------------------------------------------------------------------------------------------
# Internal state


@dataclass(slots=True, kw_only=True)
class _Member:
    group_id: str
    member_id: str
    group_instance_id: str | None
    client_id: str
    client_host: str
    protocol_type: str
    protocols: tuple[tuple[str, bytes], ...]
    session_timeout_ms: int
    rebalance_timeout_ms: int
    # "awaiting" outlives a cancelled ticket: Kafka keeps counting a member whose connection
    # dropped mid-request as joined; its session then expires after the phase completes.
    awaiting_join: bool = False
    awaiting_sync: bool = False
    join_ticket: Ticket | None = None
    sync_ticket: Ticket | None = None
    assignment: bytes | None = None
    session_deadline_s: float | None = None

    def metadata_for(self, protocol: str | None) -> bytes:
        for name, metadata in self.protocols:
            if name == protocol:
                return metadata
        return b""

    def supports(self, protocol: str) -> bool:
        return any(name == protocol for name, _ in self.protocols)


@dataclass(slots=True, kw_only=True)
class _Group:
    group_id: str
    offsets_partition: int
    state: GroupState = GroupState.EMPTY
    generation_id: int = 0
    protocol_type: str | None = None
    protocol_name: str | None = None
    leader_id: str | None = None
    members: dict[str, _Member] = field(default_factory=dict)
    # Members told MEMBER_ID_REQUIRED that have not joined yet, with their expiry.
    pending_members: dict[str, float] = field(default_factory=dict)
    static_members: dict[str, str] = field(default_factory=dict)
    pending_sync: set[str] = field(default_factory=set)
    join_deadline_s: float | None = None
    # Set while the first join phase after Empty runs (Kafka's InitialDelayedJoin).
    initial_delay_remaining_ms: int | None = None
    new_member_added: bool = False
    sync_deadline_s: float | None = None
    offsets: dict[tuple[str, int], CommittedOffset] = field(default_factory=dict)

    def rebalance_timeout_ms(self) -> int:
        return max((m.rebalance_timeout_ms for m in self.members.values()), default=0)

    def all_joined(self) -> bool:
        return not self.pending_members and all(m.awaiting_join for m in self.members.values())

    def fenced(self, member_id: str, group_instance_id: str | None) -> bool:
        if group_instance_id is None:
            return False
        current = self.static_members.get(group_instance_id)
        return current is not None and current != member_id


_TimerKind = Literal["session", "pending", "join", "sync"]
_R = TypeVar("_R", JoinGroupResult, SyncGroupResult)


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
        self._clock = clock
        self._new_member_id = member_id_factory or _random_member_id
        self._groups: dict[str, _Group] = {}
        self._timers: list[tuple[float, int, _TimerKind, str, str]] = []
        self._seq = itertools.count()
        self._ticket_ids = itertools.count(1)
        self._open: dict[int, Ticket] = {}
        self._outbox: list[Completion] = []
        self._now_s = clock()
        # __consumer_offsets partitions whose groups no running broker has loaded.
        self._unloaded: set[int] = set()

    @property
    def config(self) -> GroupConfig:
        return self._config

    # ---------------------------------------------------------------- driving the machine

    def tick(self) -> list[Completion]:
        """Fire due timers and hand out every completion not yet handed out."""
        self._advance()
        out, self._outbox = self._outbox, []
        return out

    def next_deadline(self) -> float | None:
        """When :meth:`tick` next has work (clock seconds), or None if nothing is scheduled."""
        if self._outbox:
            return self._now_s
        while self._timers and not self._timer_live(*self._timers[0]):
            heapq.heappop(self._timers)
        return self._timers[0][0] if self._timers else None

    def cancel(self, ticket: Ticket) -> bool:
        """Forget a parked request (its connection is gone). The member stays in the group as
        Kafka keeps it; its session expires if it does not come back. Returns False if the
        ticket was already completed or cancelled."""
        if self._open.pop(ticket.ticket_id, None) is None:
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
                self._finish_join(member, _join_error(GroupError.NOT_COORDINATOR, member.member_id))
                self._finish_sync(member, SyncGroupResult(error_code=GroupError.NOT_COORDINATOR))
        self._groups.clear()
        self._timers.clear()
        self._open.clear()
        self._unloaded.clear()
        out, self._outbox = self._outbox, []
        return out

    # ---------------------------------------------------------------- coordinator moves

    def unload(self, offsets_partition: int) -> None:
        """The broker leading ``__consumer_offsets`` partition ``offsets_partition`` is gone
        (stopped, or no longer its leader): nobody coordinates its groups until :meth:`load`.

        As Kafka's ``GroupCoordinator.onGroupUnloaded``: parked JoinGroup and SyncGroup calls
        complete with NOT_COORDINATOR (collect them with :meth:`tick`); members told
        MEMBER_ID_REQUIRED are forgotten (Kafka never writes them down). No timer of these
        groups fires meanwhile: a stopped coordinator expires nobody.
        """
        self._advance()
        if offsets_partition in self._unloaded:
            return
        self._unloaded.add(offsets_partition)
        for group in self._groups_in(offsets_partition):
            group.pending_members.clear()
            for member in group.members.values():
                self._finish_join(member, _join_error(GroupError.NOT_COORDINATOR, member.member_id))
                self._finish_sync(member, SyncGroupResult(error_code=GroupError.NOT_COORDINATOR))
            _log.info(
                "Group %s unloaded with generation %s (offsets partition %s)",
                group.group_id,
                group.generation_id,
                offsets_partition,
            )

    def load(self, offsets_partition: int) -> None:
        """A running broker now leads ``__consumer_offsets`` partition ``offsets_partition``
        and serves its groups.

        As Kafka's ``GroupCoordinator.onGroupLoaded``: every member's session restarts now, so
        a member that could not reach a coordinator while none was there is not expired for it.
        A rebalance that was under way resumes with its deadline restarted too (Kafka would
        reload the last Stable generation and let the members rejoin; both end in a rebalance
        the clients complete).
        """
        self._advance()
        if offsets_partition not in self._unloaded:
            return
        self._unloaded.discard(offsets_partition)
        for group in self._groups_in(offsets_partition):
            _log.info(
                "Group %s loaded with generation %s (offsets partition %s)",
                group.group_id,
                group.generation_id,
                offsets_partition,
            )
            for member in group.members.values():
                deadline = self._now_s + member.session_timeout_ms / 1000
                member.session_deadline_s = deadline
                self._schedule(deadline, "session", group.group_id, member.member_id)
            restart_s = self._now_s + group.rebalance_timeout_ms() / 1000
            if group.state is GroupState.PREPARING_REBALANCE:
                self._set_join_deadline(group, restart_s)
            if group.sync_deadline_s is not None:
                group.sync_deadline_s = restart_s
                self._schedule(restart_s, "sync", group.group_id, "")
            self._maybe_complete_join(group)

    def _groups_in(self, offsets_partition: int) -> list[_Group]:
        return [g for g in self._groups.values() if g.offsets_partition == offsets_partition]

    def _new_group(self, group_id: str) -> _Group:
        partition = coordinator_partition(group_id, self._config.offsets_partitions)
        return _Group(group_id=group_id, offsets_partition=partition)

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
        self._advance()
        outcome = self._join(
            group_id=group_id,
            member_id=member_id,
            group_instance_id=group_instance_id,
            protocol_type=protocol_type,
            protocols=tuple((name, bytes(metadata)) for name, metadata in protocols),
            session_timeout_ms=session_timeout_ms,
            rebalance_timeout_ms=rebalance_timeout_ms,
            require_known_member_id=require_known_member_id,
            client_id=client_id,
            client_host=client_host,
            reason=reason,
        )
        self._advance()
        return self._claim(outcome, JoinGroupResult)

    def _join(
        self,
        *,
        group_id: str,
        member_id: str,
        group_instance_id: str | None,
        protocol_type: str,
        protocols: tuple[tuple[str, bytes], ...],
        session_timeout_ms: int,
        rebalance_timeout_ms: int,
        require_known_member_id: bool,
        client_id: str,
        client_host: str,
        reason: str | None,
    ) -> JoinGroupResult | Ticket:
        cfg = self._config
        if not group_id:
            return _join_error(GroupError.INVALID_GROUP_ID, member_id)
        if not cfg.min_session_timeout_ms <= session_timeout_ms <= cfg.max_session_timeout_ms:
            return _join_error(GroupError.INVALID_SESSION_TIMEOUT, member_id)
        new = _NewJoin(
            group_instance_id=group_instance_id,
            client_id=client_id,
            client_host=client_host,
            protocol_type=protocol_type,
            protocols=protocols,
            session_timeout_ms=session_timeout_ms,
            rebalance_timeout_ms=rebalance_timeout_ms,
            reason=reason,
        )
        group = self._groups.get(group_id)
        if member_id:
            if group is None:
                return _join_error(GroupError.UNKNOWN_MEMBER_ID, member_id)
            return self._join_known(group, member_id, new)
        if group is None:
            if not protocol_type or not protocols:
                return _join_error(GroupError.INCONSISTENT_GROUP_PROTOCOL, member_id)
            group = self._groups[group_id] = self._new_group(group_id)
        return self._join_unknown(group, new, require_known_member_id)

    def _join_unknown(
        self, group: _Group, new: _NewJoin, require_known_member_id: bool
    ) -> JoinGroupResult | Ticket:
        instance = new.group_instance_id
        replacing = group.static_members.get(instance) if instance is not None else None
        if replacing is None and len(group.members) >= self._config.max_size:
            return _join_error(GroupError.GROUP_MAX_SIZE_REACHED, "")
        if not self._supports(group, new.protocol_type, new.protocols):
            return _join_error(GroupError.INCONSISTENT_GROUP_PROTOCOL, "")
        member_id = self._new_member_id(instance if instance is not None else new.client_id)
        if replacing is not None:
            return self._replace_static_member(group, replacing, member_id, new)
        if instance is None and require_known_member_id:
            # KIP-394: remember the id but admit the member only when it comes back with it, so
            # a client that never reads this response does not hold up the rebalance for long.
            deadline = self._now_s + new.session_timeout_ms / 1000
            group.pending_members[member_id] = deadline
            self._schedule(deadline, "pending", group.group_id, member_id)
            return _join_error(GroupError.MEMBER_ID_REQUIRED, member_id)
        return self._add_member_and_rebalance(group, member_id, new)

    def _join_known(self, group: _Group, member_id: str, new: _NewJoin) -> JoinGroupResult | Ticket:
        if not self._supports(group, new.protocol_type, new.protocols):
            return _join_error(GroupError.INCONSISTENT_GROUP_PROTOCOL, member_id)
        if group.fenced(member_id, new.group_instance_id):
            return _join_error(GroupError.FENCED_INSTANCE_ID, member_id)
        if member_id in group.pending_members:
            del group.pending_members[member_id]
            if len(group.members) >= self._config.max_size:
                self._maybe_complete_join(group)
                return _join_error(GroupError.GROUP_MAX_SIZE_REACHED, member_id)
            return self._add_member_and_rebalance(group, member_id, new)
        member = group.members.get(member_id)
        if member is None:
            return _join_error(GroupError.UNKNOWN_MEMBER_ID, member_id)
        unchanged = member.protocol_type == new.protocol_type and member.protocols == new.protocols
        state = group.state
        if state is GroupState.COMPLETING_REBALANCE and unchanged:
            # The member lost our JoinGroup response: repeat it for the current generation.
            self._touch(member)
            return self._join_result(group, member)
        if state is GroupState.STABLE and unchanged and group.leader_id != member_id:
            self._touch(member)
            return self._join_result(group, member)
        # A leader rejoining a Stable group wants a rebalance (e.g. its metadata changed).
        why = new.reason or f"member {member_id} rejoined"
        return self._update_member_and_rebalance(group, member, new, why)

    def _add_member_and_rebalance(self, group: _Group, member_id: str, new: _NewJoin) -> Ticket:
        if group.state is GroupState.PREPARING_REBALANCE and group.generation_id == 0:
            # Kafka's InitialDelayedJoin: each new member extends the first join phase.
            group.new_member_added = True
        member = _Member(
            group_id=group.group_id,
            member_id=member_id,
            group_instance_id=new.group_instance_id,
            client_id=new.client_id,
            client_host=new.client_host,
            protocol_type=new.protocol_type,
            protocols=new.protocols,
            session_timeout_ms=new.session_timeout_ms,
            rebalance_timeout_ms=new.rebalance_timeout_ms,
            awaiting_join=True,
        )
        ticket = member.join_ticket = self._issue("join", group.group_id, member_id)
        if not group.members:
            group.protocol_type = new.protocol_type
        group.members[member_id] = member
        if group.leader_id is None:
            group.leader_id = member_id
        if new.group_instance_id is not None:
            group.static_members[new.group_instance_id] = member_id
        _log.info(
            "Group %s: member %s (client %s) joins in state %s",
            group.group_id,
            member_id,
            new.client_id,
            group.state.value,
        )
        self._rebalance_or_complete(group, new.reason or f"member {member_id} joined")
        return ticket

    def _update_member_and_rebalance(
        self, group: _Group, member: _Member, new: _NewJoin, reason: str
    ) -> Ticket:
        member.protocol_type = new.protocol_type
        member.protocols = new.protocols
        member.session_timeout_ms = new.session_timeout_ms
        member.rebalance_timeout_ms = new.rebalance_timeout_ms
        # A second JoinGroup while one is parked supersedes it; answer the old one so that no
        # ticket is left hanging (a client never has two in flight on one connection).
        self._finish_join(member, _join_error(GroupError.REBALANCE_IN_PROGRESS, member.member_id))
        member.awaiting_join = True
        member.join_ticket = self._issue("join", group.group_id, member.member_id)
        member.session_deadline_s = None
        ticket = member.join_ticket
        self._rebalance_or_complete(group, reason)
        return ticket

    def _replace_static_member(
        self, group: _Group, old_id: str, new_id: str, new: _NewJoin
    ) -> JoinGroupResult | Ticket:
        # KIP-345: a static member that restarts takes over its old identity (and assignment)
        # under a new member id; the old id is fenced.
        leader_before = group.leader_id
        member = group.members.pop(old_id)
        self._finish_join(member, _join_error(GroupError.FENCED_INSTANCE_ID, old_id))
        self._finish_sync(member, SyncGroupResult(error_code=GroupError.FENCED_INSTANCE_ID))
        member.awaiting_sync = False
        member.member_id = new_id
        member.client_id = new.client_id
        member.client_host = new.client_host
        member.protocol_type = new.protocol_type
        member.protocols = new.protocols
        member.session_timeout_ms = new.session_timeout_ms
        member.rebalance_timeout_ms = new.rebalance_timeout_ms
        group.members[new_id] = member
        if group.leader_id == old_id:
            group.leader_id = new_id
        assert new.group_instance_id is not None  # only static members are replaced
        group.static_members[new.group_instance_id] = new_id
        if old_id in group.pending_sync:
            group.pending_sync.discard(old_id)
            group.pending_sync.add(new_id)
        _log.info(
            "Group %s: static member %s rejoins as %s (was %s)",
            group.group_id,
            new.group_instance_id,
            new_id,
            old_id,
        )
        if group.state is GroupState.STABLE and self._select_protocol(group) == (
            group.protocol_name
        ):
            # No rebalance. The old leader id is returned on purpose: a restarted leader then
            # acts as a follower and fetches its kept assignment with SyncGroup (Kafka does the
            # same before KIP-814).
            member.awaiting_join = False
            self._touch(member)
            return JoinGroupResult(
                error_code=GroupError.NONE,
                member_id=new_id,
                generation_id=group.generation_id,
                protocol_type=group.protocol_type,
                protocol_name=group.protocol_name,
                leader=leader_before or "",
            )
        member.awaiting_join = True
        member.join_ticket = ticket = self._issue("join", group.group_id, new_id)
        member.session_deadline_s = None
        self._rebalance_or_complete(
            group, f"static member {new.group_instance_id} rejoined as {new_id}"
        )
        return ticket

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
        self._advance()
        outcome = self._sync(
            group_id,
            member_id,
            generation_id,
            tuple((mid, bytes(data)) for mid, data in assignments),
            group_instance_id,
            protocol_type,
            protocol_name,
        )
        self._advance()
        return self._claim(outcome, SyncGroupResult)

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
        if group.fenced(member_id, group_instance_id):
            return SyncGroupResult(error_code=GroupError.FENCED_INSTANCE_ID)
        member = group.members.get(member_id)
        if member is None:
            return SyncGroupResult(error_code=GroupError.UNKNOWN_MEMBER_ID)
        if generation_id != group.generation_id:
            return SyncGroupResult(error_code=GroupError.ILLEGAL_GENERATION)
        if (protocol_type is not None and protocol_type != group.protocol_type) or (
            protocol_name is not None and protocol_name != group.protocol_name
        ):
            return SyncGroupResult(error_code=GroupError.INCONSISTENT_GROUP_PROTOCOL)
        if group.state is GroupState.PREPARING_REBALANCE:
            return SyncGroupResult(error_code=GroupError.REBALANCE_IN_PROGRESS)
        if group.state is GroupState.STABLE:
            self._sync_received(group, member_id)
            self._touch(member)
            return self._sync_result(group, member)
        # CompletingRebalance: park until the leader's assignment arrives.
        self._finish_sync(member, SyncGroupResult(error_code=GroupError.REBALANCE_IN_PROGRESS))
        member.awaiting_sync = True
        member.sync_ticket = ticket = self._issue("sync", group_id, member_id)
        member.session_deadline_s = None
        self._sync_received(group, member_id)
        if member_id == group.leader_id:
            given = dict(assignments)
            missing = [mid for mid in group.members if mid not in given]
            if missing:
                _log.warning(
                    "Group %s generation %s: leader assigned nothing to %s",
                    group.group_id,
                    group.generation_id,
                    missing,
                )
            for other in group.members.values():
                other.assignment = given.get(other.member_id, b"")
            group.state = GroupState.STABLE
            _log.info(
                "Group %s is Stable at generation %s with %s member(s)",
                group.group_id,
                group.generation_id,
                len(group.members),
            )
            for other in group.members.values():
                if other.awaiting_sync:
                    other.awaiting_sync = False
                    self._finish_sync(other, self._sync_result(group, other))
                    self._touch(other)
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
        self._advance()
        group = self._groups.get(group_id)
        if group is None:
            return GroupError.UNKNOWN_MEMBER_ID
        if group.fenced(member_id, group_instance_id):
            return GroupError.FENCED_INSTANCE_ID
        member = group.members.get(member_id)
        if member is None:
            return GroupError.UNKNOWN_MEMBER_ID
        if generation_id != group.generation_id:
            return GroupError.ILLEGAL_GENERATION
        self._touch(member)
        if group.state is GroupState.PREPARING_REBALANCE:
            return GroupError.REBALANCE_IN_PROGRESS
        return GroupError.NONE

    def leave_group(self, *, group_id: str, members: Sequence[LeavingMember]) -> LeaveGroupResult:
        """LeaveGroup for one (v0-2) or several (v3+) members. A static member may be named by
        ``group_instance_id`` alone (the admin client's removal)."""
        self._advance()
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
        self._advance()
        return LeaveGroupResult(error_code=GroupError.NONE, members=tuple(results))

    def _leave_one(self, group: _Group, leaving: LeavingMember) -> GroupError:
        reason = leaving.reason or "left the group"
        if leaving.group_instance_id is not None:
            current = group.static_members.get(leaving.group_instance_id)
            if current is None:
                return GroupError.UNKNOWN_MEMBER_ID
            if leaving.member_id and leaving.member_id != current:
                return GroupError.FENCED_INSTANCE_ID
            self._remove_member_and_update(group, group.members[current], reason)
            return GroupError.NONE
        if leaving.member_id in group.pending_members:
            del group.pending_members[leaving.member_id]
            self._maybe_complete_join(group)
            return GroupError.NONE
        member = group.members.get(leaving.member_id)
        if member is None:
            return GroupError.UNKNOWN_MEMBER_ID
        self._remove_member_and_update(group, member, reason)
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
    ) -> tuple[PartitionResult, ...]:
        """OffsetCommit. Generation -1 with an empty member id is a "simple" commit from a
        consumer that manages its own partitions; it is accepted while the group has no
        members. Otherwise the member and generation must be current, and a group still
        waiting for its assignment answers REBALANCE_IN_PROGRESS."""
        self._advance()
        error = self._commit_error(group_id, member_id, generation_id, group_instance_id)
        if error is not GroupError.NONE:
            return tuple(
                PartitionResult(topic=o.topic, partition=o.partition, error_code=error)
                for o in offsets
            )
        group = self._groups.get(group_id)
        if group is None:
            group = self._groups[group_id] = self._new_group(group_id)
        results = []
        for o in offsets:
            metadata = o.metadata or ""
            if len(metadata) > self._config.offset_metadata_max_bytes:
                code = GroupError.OFFSET_METADATA_TOO_LARGE
            else:
                group.offsets[(o.topic, o.partition)] = CommittedOffset(
                    topic=o.topic,
                    partition=o.partition,
                    offset=o.offset,
                    leader_epoch=o.leader_epoch,
                    metadata=metadata,
                )
                code = GroupError.NONE
            results.append(PartitionResult(topic=o.topic, partition=o.partition, error_code=code))
        return tuple(results)

    def _commit_error(
        self, group_id: str, member_id: str, generation_id: int, group_instance_id: str | None
    ) -> GroupError:
        group = self._groups.get(group_id)
        simple = generation_id < 0 and not member_id and group_instance_id is None
        if group is None:
            if generation_id >= 0:
                # A member of a group we do not know: its generation is gone.
                return GroupError.ILLEGAL_GENERATION
            return GroupError.NONE if simple else GroupError.UNKNOWN_MEMBER_ID
        if simple:
            # When the group has members, only they may commit.
            return (
                GroupError.NONE if group.state is GroupState.EMPTY else GroupError.UNKNOWN_MEMBER_ID
            )
        if group.fenced(member_id, group_instance_id):
            return GroupError.FENCED_INSTANCE_ID
        member = group.members.get(member_id)
        if member is None:
            return GroupError.UNKNOWN_MEMBER_ID
        if generation_id != group.generation_id:
            return GroupError.ILLEGAL_GENERATION
        if group.state is GroupState.COMPLETING_REBALANCE:
            # The member knows the new generation but not yet its partitions.
            return GroupError.REBALANCE_IN_PROGRESS
        # Committing during PreparingRebalance is allowed: consumers commit what they processed
        # before rejoining (onPartitionsRevoked).
        self._touch(member)
        return GroupError.NONE

    def fetch_offsets(
        self, group_id: str, partitions: Iterable[tuple[str, int]] | None = None
    ) -> tuple[CommittedOffset, ...]:
        """OffsetFetch: the committed offsets of ``partitions`` (offset -1 where none), or
        every committed offset of the group (sorted) when ``partitions`` is None."""
        group = self._groups.get(group_id)
        stored = group.offsets if group is not None else {}
        if partitions is None:
            return tuple(stored[key] for key in sorted(stored))
        return tuple(
            stored.get((topic, partition))
            or CommittedOffset(
                topic=topic,
                partition=partition,
                offset=NO_OFFSET,
                leader_epoch=NO_LEADER_EPOCH,
                metadata="",
            )
            for topic, partition in partitions
        )

    def remove_topic_offsets(self, topic: str) -> int:
        """Forget every group's committed offsets for a deleted topic; returns how many."""
        removed = 0
        for group in self._groups.values():
            for key in [k for k in group.offsets if k[0] == topic]:
                del group.offsets[key]
                removed += 1
        return removed

    # ---------------------------------------------------------------- admin

    def describe_group(self, group_id: str) -> GroupDescription:
        self._advance()
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
        self._advance()
        return tuple(
            GroupListing(group_id=g.group_id, protocol_type=g.protocol_type or "", state=g.state)
            for _, g in sorted(self._groups.items())
        )

    def delete_groups(self, group_ids: Iterable[str]) -> dict[str, int]:
        """DeleteGroups: only groups without members can go (NON_EMPTY_GROUP otherwise);
        their committed offsets go with them."""
        self._advance()
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
            open_tickets=len(self._open),
            committed_offsets=sum(len(g.offsets) for g in self._groups.values()),
        )

    # ---------------------------------------------------------------- rebalancing

    def _rebalance_or_complete(self, group: _Group, reason: str) -> None:
        if group.state is GroupState.PREPARING_REBALANCE:
            self._maybe_complete_join(group)
        else:
            self._prepare_rebalance(group, reason)

    def _prepare_rebalance(self, group: _Group, reason: str) -> None:
        if group.state is GroupState.COMPLETING_REBALANCE:
            # Members waiting for an assignment of a generation that will not be Stable.
            for member in group.members.values():
                member.assignment = None
                if member.awaiting_sync:
                    member.awaiting_sync = False
                    self._finish_sync(
                        member, SyncGroupResult(error_code=GroupError.REBALANCE_IN_PROGRESS)
                    )
                    self._touch(member)
        group.pending_sync.clear()
        group.sync_deadline_s = None
        timeout_ms = group.rebalance_timeout_ms()
        if group.state is GroupState.EMPTY:
            delay_ms = self._config.initial_rebalance_delay_ms
            group.initial_delay_remaining_ms = max(timeout_ms - delay_ms, 0)
            group.new_member_added = False
        else:
            delay_ms = timeout_ms
            group.initial_delay_remaining_ms = None
        _log.info(
            "Preparing to rebalance group %s in state %s with old generation %s (reason: %s)",
            group.group_id,
            group.state.value,
            group.generation_id,
            reason,
        )
        group.state = GroupState.PREPARING_REBALANCE
        self._set_join_deadline(group, self._now_s + delay_ms / 1000)
        self._maybe_complete_join(group)

    def _maybe_complete_join(self, group: _Group) -> None:
        # During the initial delay the phase only ends by time (Kafka's InitialDelayedJoin).
        if (
            group.state is GroupState.PREPARING_REBALANCE
            and group.initial_delay_remaining_ms is None
            and group.all_joined()
        ):
            self._complete_join(group)

    def _on_join_deadline(self, group: _Group) -> None:
        remaining = group.initial_delay_remaining_ms
        if remaining is not None and group.new_member_added and remaining > 0:
            group.new_member_added = False
            delay_ms = min(self._config.initial_rebalance_delay_ms, remaining)
            group.initial_delay_remaining_ms = remaining - delay_ms
            self._set_join_deadline(group, self._now_s + delay_ms / 1000)
            return
        self._complete_join(group)

    def _complete_join(self, group: _Group) -> None:
        group.join_deadline_s = None
        group.initial_delay_remaining_ms = None
        group.new_member_added = False
        for member in list(group.members.values()):
            if not member.awaiting_join and member.group_instance_id is None:
                self._remove_member(group, member, "did not rejoin before the rebalance timeout")
        if group.members and not self._elect_joined_leader(group):
            # Only static members that have not rejoined are left: wait for them (or for their
            # sessions to expire) rather than form a generation nobody asked for.
            _log.warning("Group %s: no member rejoined; waiting again", group.group_id)
            self._set_join_deadline(group, self._now_s + group.rebalance_timeout_ms() / 1000)
            return
        group.generation_id += 1
        if not group.members:
            group.protocol_name = None
            group.leader_id = None
            group.state = GroupState.EMPTY
            _log.info(
                "Group %s with generation %s is now empty", group.group_id, group.generation_id
            )
            return
        group.protocol_name = self._select_protocol(group)
        group.state = GroupState.COMPLETING_REBALANCE
        _log.info(
            "Stabilized group %s generation %s (protocol %s, leader %s) with %s member(s)",
            group.group_id,
            group.generation_id,
            group.protocol_name,
            group.leader_id,
            len(group.members),
        )
        group.pending_sync = set(group.members)
        deadline = self._now_s + group.rebalance_timeout_ms() / 1000
        group.sync_deadline_s = deadline
        self._schedule(deadline, "sync", group.group_id, "")
        for member in group.members.values():
            member.assignment = None
            if member.awaiting_join:
                member.awaiting_join = False
                self._finish_join(member, self._join_result(group, member))
            self._touch(member)

    def _elect_joined_leader(self, group: _Group) -> bool:
        leader = group.members.get(group.leader_id or "")
        if leader is not None and leader.awaiting_join:
            return True
        for member in group.members.values():
            if member.awaiting_join:
                group.leader_id = member.member_id
                return True
        return False

    def _select_protocol(self, group: _Group) -> str:
        # Kafka: among the protocols every member supports, each member votes for the first one
        # in its own preference order; most votes wins. Ties go to the leader's preference.
        members = list(group.members.values())
        leader = group.members.get(group.leader_id or "", members[0])
        candidates = [
            name for name, _ in leader.protocols if all(m.supports(name) for m in members)
        ]
        if not candidates:
            raise RuntimeError(
                f"group {group.group_id}: no protocol common to all members; join validation "
                "should have refused the last member"
            )
        votes = Counter(
            next(name for name, _ in m.protocols if name in candidates) for m in members
        )
        return max(candidates, key=lambda name: votes[name])

    def _supports(
        self, group: _Group, protocol_type: str, protocols: tuple[tuple[str, bytes], ...]
    ) -> bool:
        if not protocol_type or not protocols:
            return False
        if not group.members:
            return True
        return protocol_type == group.protocol_type and any(
            all(m.supports(name) for m in group.members.values()) for name, _ in protocols
        )

    def _on_sync_deadline(self, group: _Group) -> None:
        group.sync_deadline_s = None
        if not group.pending_sync or group.state not in (
            GroupState.COMPLETING_REBALANCE,
            GroupState.STABLE,
        ):
            return
        late = [group.members[mid] for mid in group.pending_sync if mid in group.members]
        group.pending_sync.clear()
        for member in late:
            self._remove_member(
                group, member, "did not send SyncGroup before the rebalance timeout"
            )
        self._prepare_rebalance(group, f"{len(late)} member(s) did not sync in time")

    def _sync_received(self, group: _Group, member_id: str) -> None:
        group.pending_sync.discard(member_id)
        if not group.pending_sync:
            group.sync_deadline_s = None

    # ---------------------------------------------------------------- members

    def _remove_member(self, group: _Group, member: _Member, reason: str) -> None:
        member_id = member.member_id
        del group.members[member_id]
        instance = member.group_instance_id
        if instance is not None and group.static_members.get(instance) == member_id:
            del group.static_members[instance]
        self._sync_received(group, member_id)
        if group.leader_id == member_id:
            group.leader_id = next(iter(group.members), None)
        member.session_deadline_s = None
        member.awaiting_join = member.awaiting_sync = False
        self._finish_join(member, _join_error(GroupError.UNKNOWN_MEMBER_ID, member_id))
        self._finish_sync(member, SyncGroupResult(error_code=GroupError.UNKNOWN_MEMBER_ID))
        _log.info("Group %s: member %s removed (%s)", group.group_id, member_id, reason)

    def _remove_member_and_update(self, group: _Group, member: _Member, reason: str) -> None:
        self._remove_member(group, member, reason)
        if group.state in (GroupState.STABLE, GroupState.COMPLETING_REBALANCE):
            self._prepare_rebalance(group, f"member {member.member_id} {reason}")
        else:
            self._maybe_complete_join(group)

    def _touch(self, member: _Member) -> None:
        # A member with a parked request is alive by definition; its session clock restarts
        # when the request is answered.
        if member.awaiting_join or member.awaiting_sync:
            member.session_deadline_s = None
            return
        deadline = self._now_s + member.session_timeout_ms / 1000
        member.session_deadline_s = deadline
        self._schedule(deadline, "session", member.group_id, member.member_id)

    def _join_result(self, group: _Group, member: _Member) -> JoinGroupResult:
        is_leader = member.member_id == group.leader_id
        return JoinGroupResult(
            error_code=GroupError.NONE,
            member_id=member.member_id,
            generation_id=group.generation_id,
            protocol_type=group.protocol_type,
            protocol_name=group.protocol_name,
            leader=group.leader_id or "",
            members=tuple(
                JoinedMember(
                    member_id=m.member_id,
                    group_instance_id=m.group_instance_id,
                    metadata=m.metadata_for(group.protocol_name),
                )
                for m in group.members.values()
            )
            if is_leader
            else (),
        )

    def _sync_result(self, group: _Group, member: _Member) -> SyncGroupResult:
        return SyncGroupResult(
            error_code=GroupError.NONE,
            protocol_type=group.protocol_type,
            protocol_name=group.protocol_name,
            assignment=member.assignment or b"",
        )

    # ---------------------------------------------------------------- tickets

    def _issue(self, kind: Literal["join", "sync"], group_id: str, member_id: str) -> Ticket:
        ticket = Ticket(
            ticket_id=next(self._ticket_ids), kind=kind, group_id=group_id, member_id=member_id
        )
        self._open[ticket.ticket_id] = ticket
        return ticket

    def _finish_join(self, member: _Member, result: JoinGroupResult) -> None:
        ticket, member.join_ticket = member.join_ticket, None
        if ticket is not None and self._open.pop(ticket.ticket_id, None) is not None:
            self._outbox.append(Completion(ticket=ticket, result=result))

    def _finish_sync(self, member: _Member, result: SyncGroupResult) -> None:
        ticket, member.sync_ticket = member.sync_ticket, None
        if ticket is not None and self._open.pop(ticket.ticket_id, None) is not None:
            self._outbox.append(Completion(ticket=ticket, result=result))

    def _claim(self, outcome: _R | Ticket, kind: type[_R]) -> _R | Ticket:
        """Answer the caller directly when its own request completed within the call."""
        if isinstance(outcome, Ticket):
            for i, done in enumerate(self._outbox):
                if done.ticket == outcome and isinstance(done.result, kind):
                    del self._outbox[i]
                    return done.result
        return outcome

    # ---------------------------------------------------------------- timers

    def _schedule(self, deadline_s: float, kind: _TimerKind, group_id: str, member_id: str) -> None:
        heapq.heappush(self._timers, (deadline_s, next(self._seq), kind, group_id, member_id))

    def _set_join_deadline(self, group: _Group, deadline_s: float) -> None:
        group.join_deadline_s = deadline_s
        self._schedule(deadline_s, "join", group.group_id, "")

    def _timer_live(
        self, deadline_s: float, _seq: int, kind: _TimerKind, group_id: str, member_id: str
    ) -> bool:
        # Timers are never removed from the heap; an entry is live while the state it was
        # scheduled for still holds the same deadline.
        group = self._groups.get(group_id)
        if group is None or group.offsets_partition in self._unloaded:
            return False
        if kind == "session":
            member = group.members.get(member_id)
            return member is not None and member.session_deadline_s == deadline_s
        if kind == "pending":
            return group.pending_members.get(member_id) == deadline_s
        if kind == "join":
            return (
                group.state is GroupState.PREPARING_REBALANCE
                and group.join_deadline_s == deadline_s
            )
        return group.sync_deadline_s == deadline_s

    def _advance(self) -> None:
        now = max(self._clock(), self._now_s)
        while self._timers and self._timers[0][0] <= now:
            entry = heapq.heappop(self._timers)
            if not self._timer_live(*entry):
                continue
            deadline_s, _, kind, group_id, member_id = entry
            # Fire at the timer's own deadline so that what it starts is timed from then.
            self._now_s = max(self._now_s, deadline_s)
            group = self._groups[group_id]
            if kind == "session":
                _log.info(
                    "Group %s: member %s has not heartbeated within its session timeout",
                    group_id,
                    member_id,
                )
                self._remove_member_and_update(
                    group, group.members[member_id], "session timeout expired"
                )
            elif kind == "pending":
                del group.pending_members[member_id]
                _log.info("Group %s: pending member %s did not rejoin in time", group_id, member_id)
                self._maybe_complete_join(group)
            elif kind == "join":
                self._on_join_deadline(group)
            else:
                self._on_sync_deadline(group)
        self._now_s = now


@dataclass(frozen=True, slots=True, kw_only=True)
class _NewJoin:
    """What a JoinGroup request says about the member, bundled for the helpers."""

    group_instance_id: str | None
    client_id: str
    client_host: str
    protocol_type: str
    protocols: tuple[tuple[str, bytes], ...]
    session_timeout_ms: int
    rebalance_timeout_ms: int
    reason: str | None


def _join_error(error: GroupError, member_id: str) -> JoinGroupResult:
    return JoinGroupResult(error_code=error, member_id=member_id)


def _random_member_id(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4()}"
