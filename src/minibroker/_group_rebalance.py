"""The classic protocol's rebalance: join and sync phases, generations, expiry, coordinator moves.

Everything that moves a group from one :class:`GroupState` to another or starts a generation
happens here, after Kafka's ``GroupCoordinator.scala`` (``prepareRebalance``,
``onCompleteJoin``, ``onExpireHeartbeat``, ``onGroupLoaded``/``onGroupUnloaded``); the module
doc of :mod:`minibroker.groups` draws the states. The requests (``groups``, ``_group_join``)
decide whether a call is valid and then call in here.

Timers fire only from :meth:`Rebalancer.advance`, in deadline order, each at its own deadline
as "now", so a clock that jumps far ahead replays what would have happened on the way.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence

from minibroker._group_purgatory import Purgatory, Timer, TimerKind
from minibroker._group_state import Group, Member
from minibroker._group_values import (
    GroupConfig,
    GroupError,
    GroupState,
    SyncGroupResult,
)

# The coordinator logs as one component, under its public module's name.
_log = logging.getLogger("minibroker.groups")


class Rebalancer:
    """Drives the groups in ``groups`` through their rebalances, parking and answering requests
    in ``purgatory``."""

    def __init__(
        self, config: GroupConfig, groups: Mapping[str, Group], purgatory: Purgatory
    ) -> None:
        self._config = config
        self._groups = groups
        self._purgatory = purgatory
        # __consumer_offsets partitions whose groups no running broker has loaded.
        self._unloaded: set[int] = set()

    # ---------------------------------------------------------------- coordinator moves

    def unload(self, offsets_partition: int) -> None:
        """Nobody coordinates the groups of ``offsets_partition`` until :meth:`load`: parked
        calls are answered NOT_COORDINATOR, pending members forgotten, and no timer of these
        groups fires meanwhile."""
        if offsets_partition in self._unloaded:
            return
        self._unloaded.add(offsets_partition)
        for group in self._groups_in(offsets_partition):
            group.pending_members.clear()
            for member in group.members.values():
                self._purgatory.refuse(member, GroupError.NOT_COORDINATOR)
            _log.info(
                "Group %s unloaded with generation %s (offsets partition %s)",
                group.group_id,
                group.generation_id,
                offsets_partition,
            )

    def load(self, offsets_partition: int) -> None:
        """The groups of ``offsets_partition`` are served again: every member's session, and a
        rebalance under way, restart now."""
        if offsets_partition not in self._unloaded:
            return
        self._unloaded.discard(offsets_partition)
        now_s = self._purgatory.now_s
        for group in self._groups_in(offsets_partition):
            _log.info(
                "Group %s loaded with generation %s (offsets partition %s)",
                group.group_id,
                group.generation_id,
                offsets_partition,
            )
            for member in group.members.values():
                deadline = now_s + member.session_timeout_ms / 1000
                member.session_deadline_s = deadline
                self._purgatory.schedule(deadline, "session", group.group_id, member.member_id)
            restart_s = now_s + group.rebalance_timeout_ms() / 1000
            if group.state is GroupState.PREPARING_REBALANCE:
                self._set_join_deadline(group, restart_s)
            if group.sync_deadline_s is not None:
                group.sync_deadline_s = restart_s
                self._purgatory.schedule(restart_s, "sync", group.group_id, "")
            self.maybe_complete_join(group)

    def forget_unloaded(self) -> None:
        """Every group is gone: no partition is left unloaded."""
        self._unloaded.clear()

    def _groups_in(self, offsets_partition: int) -> list[Group]:
        return [g for g in self._groups.values() if g.offsets_partition == offsets_partition]

    # ---------------------------------------------------------------- phases

    def rebalance_or_complete(self, group: Group, reason: str) -> None:
        """A member joined or changed: start a join phase, or complete the one under way if
        that member was the last one awaited."""
        if group.state is GroupState.PREPARING_REBALANCE:
            self.maybe_complete_join(group)
        else:
            self._prepare_rebalance(group, reason)

    def _prepare_rebalance(self, group: Group, reason: str) -> None:
        if group.state is GroupState.COMPLETING_REBALANCE:
            # Members waiting for an assignment of a generation that will not be Stable.
            for member in group.members.values():
                member.assignment = None
                if member.awaiting_sync:
                    member.awaiting_sync = False
                    self._purgatory.finish_sync(
                        member, SyncGroupResult(error_code=GroupError.REBALANCE_IN_PROGRESS)
                    )
                    self.touch(member)
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
        self._set_join_deadline(group, self._purgatory.now_s + delay_ms / 1000)
        self.maybe_complete_join(group)

    def maybe_complete_join(self, group: Group) -> None:
        # During the initial delay the phase only ends by time (Kafka's InitialDelayedJoin).
        if (
            group.state is GroupState.PREPARING_REBALANCE
            and group.initial_delay_remaining_ms is None
            and group.all_joined()
        ):
            self._complete_join(group)

    def _on_join_deadline(self, group: Group) -> None:
        remaining = group.initial_delay_remaining_ms
        if remaining is not None and group.new_member_added and remaining > 0:
            group.new_member_added = False
            delay_ms = min(self._config.initial_rebalance_delay_ms, remaining)
            group.initial_delay_remaining_ms = remaining - delay_ms
            self._set_join_deadline(group, self._purgatory.now_s + delay_ms / 1000)
            return
        self._complete_join(group)

    def _complete_join(self, group: Group) -> None:
        now_s = self._purgatory.now_s
        group.join_deadline_s = None
        group.initial_delay_remaining_ms = None
        group.new_member_added = False
        for member in list(group.members.values()):
            if not member.awaiting_join and member.group_instance_id is None:
                self._remove_member(group, member, "did not rejoin before the rebalance timeout")
        if group.members and not group.elect_joined_leader():
            # Only static members that have not rejoined are left: wait for them (or for their
            # sessions to expire) rather than form a generation nobody asked for.
            _log.warning("Group %s: no member rejoined; waiting again", group.group_id)
            self._set_join_deadline(group, now_s + group.rebalance_timeout_ms() / 1000)
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
        group.protocol_name = group.select_protocol()
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
        deadline = now_s + group.rebalance_timeout_ms() / 1000
        group.sync_deadline_s = deadline
        self._purgatory.schedule(deadline, "sync", group.group_id, "")
        for member in group.members.values():
            member.assignment = None
            if member.awaiting_join:
                member.awaiting_join = False
                self._purgatory.finish_join(member, group.join_result(member))
            self.touch(member)

    def complete_sync(self, group: Group, assignments: Sequence[tuple[str, bytes]]) -> None:
        """The leader's SyncGroup: every member gets its part of ``assignments`` (empty bytes
        if the leader named it not), the group is Stable, and parked SyncGroups are answered."""
        given = dict(assignments)
        missing = [mid for mid in group.members if mid not in given]
        if missing:
            _log.warning(
                "Group %s generation %s: leader assigned nothing to %s",
                group.group_id,
                group.generation_id,
                missing,
            )
        for member in group.members.values():
            member.assignment = given.get(member.member_id, b"")
        group.state = GroupState.STABLE
        _log.info(
            "Group %s is Stable at generation %s with %s member(s)",
            group.group_id,
            group.generation_id,
            len(group.members),
        )
        for member in group.members.values():
            if member.awaiting_sync:
                member.awaiting_sync = False
                self._purgatory.finish_sync(member, group.sync_result(member))
                self.touch(member)

    def _on_sync_deadline(self, group: Group) -> None:
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

    # ---------------------------------------------------------------- members

    def _remove_member(self, group: Group, member: Member, reason: str) -> None:
        member_id = member.member_id
        del group.members[member_id]
        instance = member.group_instance_id
        if instance is not None and group.static_members.get(instance) == member_id:
            del group.static_members[instance]
        group.sync_received(member_id)
        if group.leader_id == member_id:
            group.leader_id = next(iter(group.members), None)
        member.session_deadline_s = None
        member.awaiting_join = member.awaiting_sync = False
        self._purgatory.refuse(member, GroupError.UNKNOWN_MEMBER_ID)
        _log.info("Group %s: member %s removed (%s)", group.group_id, member_id, reason)

    def remove_member_and_update(self, group: Group, member: Member, reason: str) -> None:
        """``member`` is gone (left, or its session expired): rebalance without it."""
        self._remove_member(group, member, reason)
        if group.state in (GroupState.STABLE, GroupState.COMPLETING_REBALANCE):
            self._prepare_rebalance(group, f"member {member.member_id} {reason}")
        else:
            self.maybe_complete_join(group)

    def touch(self, member: Member) -> None:
        """Restart ``member``'s session."""
        # A member with a parked request is alive by definition; its session clock restarts
        # when the request is answered.
        if member.awaiting_join or member.awaiting_sync:
            member.session_deadline_s = None
            return
        deadline = self._purgatory.now_s + member.session_timeout_ms / 1000
        member.session_deadline_s = deadline
        self._purgatory.schedule(deadline, "session", member.group_id, member.member_id)

    # ---------------------------------------------------------------- timers

    def _set_join_deadline(self, group: Group, deadline_s: float) -> None:
        group.join_deadline_s = deadline_s
        self._purgatory.schedule(deadline_s, "join", group.group_id, "")

    def timer_live(self, timer: Timer) -> bool:
        """Whether ``timer`` still means something. Timers are never removed from the heap; an
        entry is live while the state it was scheduled for still holds the same deadline."""
        deadline_s, _, kind, group_id, member_id = timer
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

    def advance(self) -> None:
        """Fire every live timer that is due by the clock."""
        purgatory = self._purgatory
        now = max(purgatory.clock(), purgatory.now_s)
        while (timer := purgatory.pop_due(now)) is not None:
            if not self.timer_live(timer):
                continue
            deadline_s, _, kind, group_id, member_id = timer
            # Fire at the timer's own deadline so that what it starts is timed from then.
            purgatory.now_s = max(purgatory.now_s, deadline_s)
            self._fire(kind, self._groups[group_id], member_id)
        purgatory.now_s = now

    def _fire(self, kind: TimerKind, group: Group, member_id: str) -> None:
        if kind == "session":
            _log.info(
                "Group %s: member %s has not heartbeated within its session timeout",
                group.group_id,
                member_id,
            )
            self.remove_member_and_update(
                group, group.members[member_id], "session timeout expired"
            )
        elif kind == "pending":
            del group.pending_members[member_id]
            _log.info(
                "Group %s: pending member %s did not rejoin in time", group.group_id, member_id
            )
            self.maybe_complete_join(group)
        elif kind == "join":
            self._on_join_deadline(group)
        else:
            self._on_sync_deadline(group)
