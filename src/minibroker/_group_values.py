"""The values the group coordinator exchanges with its shell, and its settings.

Kafka's error codes and group states, :class:`GroupConfig`, the request and result values of
every group API, and :func:`coordinator_partition`. :mod:`minibroker.groups` re-exports the
public ones; import them from there.
"""

from __future__ import annotations

import enum
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Literal

from minibroker.errors import ConfigError

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
    INVALID_REQUEST = 42
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


def join_error(error: GroupError, member_id: str) -> JoinGroupResult:
    """A JoinGroup answered with ``error`` alone."""
    return JoinGroupResult(error_code=error, member_id=member_id)
