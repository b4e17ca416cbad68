"""What the group coordinator keeps per group and per member, and what that state alone answers.

A :class:`Group` holds the fields of Kafka's ``GroupMetadata``: state, generation, protocol,
leader, members (static ones also by instance id), the members told MEMBER_ID_REQUIRED, and the
committed offsets. Its methods read or tidy that state and need neither the clock nor the parked
requests; the steps that do (a rebalance, a JoinGroup) are in ``_group_rebalance`` and
``_group_join``.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field

from minibroker._group_values import (
    CommittedOffset,
    GroupConfig,
    GroupError,
    GroupState,
    JoinedMember,
    JoinGroupResult,
    SyncGroupResult,
    Ticket,
    coordinator_partition,
)


@dataclass(slots=True, kw_only=True)
class Member:
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
class Group:
    group_id: str
    offsets_partition: int
    state: GroupState = GroupState.EMPTY
    generation_id: int = 0
    protocol_type: str | None = None
    protocol_name: str | None = None
    leader_id: str | None = None
    members: dict[str, Member] = field(default_factory=dict)
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

    @classmethod
    def named(cls, group_id: str, config: GroupConfig) -> Group:
        """A new, Empty group, on its ``__consumer_offsets`` partition."""
        partition = coordinator_partition(group_id, config.offsets_partitions)
        return cls(group_id=group_id, offsets_partition=partition)

    def rebalance_timeout_ms(self) -> int:
        return max((m.rebalance_timeout_ms for m in self.members.values()), default=0)

    def all_joined(self) -> bool:
        return not self.pending_members and all(m.awaiting_join for m in self.members.values())

    def fenced(self, member_id: str, group_instance_id: str | None) -> bool:
        if group_instance_id is None:
            return False
        current = self.static_members.get(group_instance_id)
        return current is not None and current != member_id

    def current_member(
        self, member_id: str, generation_id: int, group_instance_id: str | None
    ) -> Member | GroupError:
        """The member a SyncGroup, Heartbeat or OffsetCommit comes from, or the error to answer
        when the instance is fenced, the member unknown or the generation not the current one."""
        if self.fenced(member_id, group_instance_id):
            return GroupError.FENCED_INSTANCE_ID
        member = self.members.get(member_id)
        if member is None:
            return GroupError.UNKNOWN_MEMBER_ID
        if generation_id != self.generation_id:
            return GroupError.ILLEGAL_GENERATION
        return member

    def accepts(self, protocol_type: str, protocols: tuple[tuple[str, bytes], ...]) -> bool:
        """Whether a member offering ``protocols`` of ``protocol_type`` may join: the group's
        type, and a protocol every member supports."""
        if not protocol_type or not protocols:
            return False
        if not self.members:
            return True
        return protocol_type == self.protocol_type and any(
            all(m.supports(name) for m in self.members.values()) for name, _ in protocols
        )

    def select_protocol(self) -> str:
        # Kafka: among the protocols every member supports, each member votes for the first one
        # in its own preference order; most votes wins. Ties go to the leader's preference.
        members = list(self.members.values())
        leader = self.members.get(self.leader_id or "", members[0])
        candidates = [
            name for name, _ in leader.protocols if all(m.supports(name) for m in members)
        ]
        if not candidates:
            raise RuntimeError(
                f"group {self.group_id}: no protocol common to all members; join validation "
                "should have refused the last member"
            )
        votes = Counter(
            next(name for name, _ in m.protocols if name in candidates) for m in members
        )
        return max(candidates, key=lambda name: votes[name])

    def elect_joined_leader(self) -> bool:
        """Keep the leader if it rejoined, else make the first member that did the leader;
        False if no member rejoined."""
        leader = self.members.get(self.leader_id or "")
        if leader is not None and leader.awaiting_join:
            return True
        for member in self.members.values():
            if member.awaiting_join:
                self.leader_id = member.member_id
                return True
        return False

    def sync_received(self, member_id: str) -> None:
        self.pending_sync.discard(member_id)
        if not self.pending_sync:
            self.sync_deadline_s = None

    def join_result(self, member: Member) -> JoinGroupResult:
        """``member``'s JoinGroup answer for the current generation."""
        is_leader = member.member_id == self.leader_id
        return JoinGroupResult(
            error_code=GroupError.NONE,
            member_id=member.member_id,
            generation_id=self.generation_id,
            protocol_type=self.protocol_type,
            protocol_name=self.protocol_name,
            leader=self.leader_id or "",
            members=tuple(
                JoinedMember(
                    member_id=m.member_id,
                    group_instance_id=m.group_instance_id,
                    metadata=m.metadata_for(self.protocol_name),
                )
                for m in self.members.values()
            )
            if is_leader
            else (),
        )

    def sync_result(self, member: Member) -> SyncGroupResult:
        """``member``'s SyncGroup answer: its assignment in the current generation."""
        return SyncGroupResult(
            error_code=GroupError.NONE,
            protocol_type=self.protocol_type,
            protocol_name=self.protocol_name,
            assignment=member.assignment or b"",
        )
