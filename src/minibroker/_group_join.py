"""JoinGroup: who may join a group, under which member id, and which rebalance that starts.

After Kafka's ``GroupCoordinator.handleJoinGroup`` and its ``doNewMemberJoinGroup`` (with
KIP-394's MEMBER_ID_REQUIRED), ``doCurrentMemberJoinGroup`` and ``doStaticMemberJoinGroup``
(KIP-345: a restarted static member takes over its old identity). The rebalance a join starts
or completes is ``_group_rebalance``'s.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, MutableMapping
from dataclasses import dataclass

from minibroker._group_purgatory import Purgatory
from minibroker._group_rebalance import Rebalancer
from minibroker._group_state import Group, Member
from minibroker._group_values import (
    GroupConfig,
    GroupError,
    GroupState,
    JoinGroupResult,
    Ticket,
    join_error,
)

# The coordinator logs as one component, under its public module's name.
_log = logging.getLogger("minibroker.groups")

# A member id is `<group.instance.id or client.id>-<UUID>` (Kafka's format), and it travels as
# a STRING (int16 length, at most 32,767 UTF-8 bytes) in the non-flexible versions of JoinGroup,
# LeaveGroup and DescribeGroups, including in answers to other members (the leader's member
# list). Kafka's broker does not check its length (the Java client refuses an instance id over
# 249 characters, JoinGroupRequest.validateGroupInstanceId; librdkafka does not); minibroker
# answers INVALID_REQUEST to a join whose member id would not fit, as no answer naming that
# member could be encoded (the whole group's JoinGroup answers would fail).
_MAX_MEMBER_ID_BYTES = 32_767
_MEMBER_ID_SUFFIX_BYTES = len("-00000000-0000-0000-0000-000000000000")


@dataclass(frozen=True, slots=True, kw_only=True)
class NewJoin:
    """What a JoinGroup request says about the member, bundled for the helpers."""

    group_instance_id: str | None
    client_id: str
    client_host: str
    protocol_type: str
    protocols: tuple[tuple[str, bytes], ...]
    session_timeout_ms: int
    rebalance_timeout_ms: int
    reason: str | None


class Joiner:
    """Answers JoinGroup for the groups in ``groups``, creating a group on its first join."""

    def __init__(
        self,
        config: GroupConfig,
        groups: MutableMapping[str, Group],
        purgatory: Purgatory,
        rebalance: Rebalancer,
        new_member_id: Callable[[str], str],
    ) -> None:
        self._config = config
        self._groups = groups
        self._purgatory = purgatory
        self._rebalance = rebalance
        self._new_member_id = new_member_id

    def join(
        self,
        *,
        group_id: str,
        member_id: str,
        require_known_member_id: bool,
        new: NewJoin,
    ) -> JoinGroupResult | Ticket:
        cfg = self._config
        if not group_id:
            return join_error(GroupError.INVALID_GROUP_ID, member_id)
        if not cfg.min_session_timeout_ms <= new.session_timeout_ms <= cfg.max_session_timeout_ms:
            return join_error(GroupError.INVALID_SESSION_TIMEOUT, member_id)
        if _member_id_too_long(member_id, new):
            _log.warning(
                "Group %s: JoinGroup refused: a member id made from its %s (%d bytes) would "
                "not fit the %d bytes of a Kafka string",
                group_id,
                "group.instance.id" if new.group_instance_id is not None else "client.id",
                len(_member_id_prefix(new).encode()),
                _MAX_MEMBER_ID_BYTES,
            )
            return join_error(GroupError.INVALID_REQUEST, member_id)
        group = self._groups.get(group_id)
        if member_id:
            if group is None:
                return join_error(GroupError.UNKNOWN_MEMBER_ID, member_id)
            return self._join_known(group, member_id, new)
        if group is None:
            if not new.protocol_type or not new.protocols:
                return join_error(GroupError.INCONSISTENT_GROUP_PROTOCOL, member_id)
            group = self._groups[group_id] = Group.named(group_id, cfg)
        return self._join_unknown(group, new, require_known_member_id)

    def _join_unknown(
        self, group: Group, new: NewJoin, require_known_member_id: bool
    ) -> JoinGroupResult | Ticket:
        instance = new.group_instance_id
        replacing = group.static_members.get(instance) if instance is not None else None
        if replacing is None and len(group.members) >= self._config.max_size:
            return join_error(GroupError.GROUP_MAX_SIZE_REACHED, "")
        if not group.accepts(new.protocol_type, new.protocols):
            return join_error(GroupError.INCONSISTENT_GROUP_PROTOCOL, "")
        member_id = self._new_member_id(_member_id_prefix(new))
        if replacing is not None:
            return self._replace_static_member(group, replacing, member_id, new)
        if instance is None and require_known_member_id:
            # KIP-394: remember the id but admit the member only when it comes back with it, so
            # a client that never reads this response does not hold up the rebalance for long.
            deadline = self._purgatory.now_s + new.session_timeout_ms / 1000
            group.pending_members[member_id] = deadline
            self._purgatory.schedule(deadline, "pending", group.group_id, member_id)
            return join_error(GroupError.MEMBER_ID_REQUIRED, member_id)
        return self._add_member_and_rebalance(group, member_id, new)

    def _join_known(self, group: Group, member_id: str, new: NewJoin) -> JoinGroupResult | Ticket:
        if not group.accepts(new.protocol_type, new.protocols):
            return join_error(GroupError.INCONSISTENT_GROUP_PROTOCOL, member_id)
        if group.fenced(member_id, new.group_instance_id):
            return join_error(GroupError.FENCED_INSTANCE_ID, member_id)
        if member_id in group.pending_members:
            del group.pending_members[member_id]
            if len(group.members) >= self._config.max_size:
                self._rebalance.maybe_complete_join(group)
                return join_error(GroupError.GROUP_MAX_SIZE_REACHED, member_id)
            return self._add_member_and_rebalance(group, member_id, new)
        member = group.members.get(member_id)
        if member is None:
            return join_error(GroupError.UNKNOWN_MEMBER_ID, member_id)
        unchanged = member.protocol_type == new.protocol_type and member.protocols == new.protocols
        state = group.state
        if state is GroupState.COMPLETING_REBALANCE and unchanged:
            # The member lost our JoinGroup response: repeat it for the current generation.
            self._rebalance.touch(member)
            return group.join_result(member)
        if state is GroupState.STABLE and unchanged and group.leader_id != member_id:
            self._rebalance.touch(member)
            return group.join_result(member)
        # A leader rejoining a Stable group wants a rebalance (e.g. its metadata changed).
        why = new.reason or f"member {member_id} rejoined"
        return self._update_member_and_rebalance(group, member, new, why)

    def _add_member_and_rebalance(self, group: Group, member_id: str, new: NewJoin) -> Ticket:
        if group.state is GroupState.PREPARING_REBALANCE and group.generation_id == 0:
            # Kafka's InitialDelayedJoin: each new member extends the first join phase.
            group.new_member_added = True
        member = Member(
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
        ticket = member.join_ticket = self._purgatory.issue("join", group.group_id, member_id)
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
        self._rebalance.rebalance_or_complete(group, new.reason or f"member {member_id} joined")
        return ticket

    def _update_member_and_rebalance(
        self, group: Group, member: Member, new: NewJoin, reason: str
    ) -> Ticket:
        _take_request(member, new)
        # A second JoinGroup while one is parked supersedes it; answer the old one so that no
        # ticket is left hanging (a client never has two in flight on one connection).
        self._purgatory.finish_join(
            member, join_error(GroupError.REBALANCE_IN_PROGRESS, member.member_id)
        )
        return self._park_join(group, member, reason)

    def _replace_static_member(
        self, group: Group, old_id: str, new_id: str, new: NewJoin
    ) -> JoinGroupResult | Ticket:
        # KIP-345: a static member that restarts takes over its old identity (and assignment)
        # under a new member id; the old id is fenced.
        leader_before = group.leader_id
        member = group.members.pop(old_id)
        self._purgatory.refuse(member, GroupError.FENCED_INSTANCE_ID)
        member.awaiting_sync = False
        member.member_id = new_id
        member.client_id = new.client_id
        member.client_host = new.client_host
        _take_request(member, new)
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
        if group.state is GroupState.STABLE and group.select_protocol() == group.protocol_name:
            # No rebalance. The old leader id is returned on purpose: a restarted leader then
            # acts as a follower and fetches its kept assignment with SyncGroup (Kafka does the
            # same before KIP-814).
            member.awaiting_join = False
            self._rebalance.touch(member)
            return JoinGroupResult(
                error_code=GroupError.NONE,
                member_id=new_id,
                generation_id=group.generation_id,
                protocol_type=group.protocol_type,
                protocol_name=group.protocol_name,
                leader=leader_before or "",
            )
        why = f"static member {new.group_instance_id} rejoined as {new_id}"
        return self._park_join(group, member, why)

    def _park_join(self, group: Group, member: Member, reason: str) -> Ticket:
        """Park ``member``'s JoinGroup until the join phase it starts or joins completes."""
        member.awaiting_join = True
        member.join_ticket = ticket = self._purgatory.issue(
            "join", group.group_id, member.member_id
        )
        member.session_deadline_s = None
        self._rebalance.rebalance_or_complete(group, reason)
        return ticket


def _take_request(member: Member, new: NewJoin) -> None:
    """``member`` now offers what its latest JoinGroup says (protocols and timeouts)."""
    member.protocol_type = new.protocol_type
    member.protocols = new.protocols
    member.session_timeout_ms = new.session_timeout_ms
    member.rebalance_timeout_ms = new.rebalance_timeout_ms


def _member_id_prefix(new: NewJoin) -> str:
    """What the member id of a new member starts with: its instance id, else its client id."""
    return new.group_instance_id if new.group_instance_id is not None else new.client_id


def _member_id_too_long(member_id: str, new: NewJoin) -> bool:
    """Whether the member id this join gets (or keeps) would be too long to encode. A static
    member's id always derives from its instance id (a restart gets a new one); a dynamic
    member's only when it has none yet."""
    if new.group_instance_id is None and member_id:
        return False
    prefix_bytes = len(_member_id_prefix(new).encode())
    return prefix_bytes + _MEMBER_ID_SUFFIX_BYTES > _MAX_MEMBER_ID_BYTES
