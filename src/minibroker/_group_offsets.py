"""Committed offsets: who may commit (OffsetCommit), what is stored, OffsetFetch, and forgetting
the offsets of a deleted topic.

Offsets are kept in memory with their group (``Group.offsets``), so a deleted group takes them
along; there is no retention, no ``__consumer_offsets`` log and no transactional commit.
"""

from __future__ import annotations

from collections.abc import Iterable, MutableMapping, Sequence

from minibroker._group_rebalance import Rebalancer
from minibroker._group_state import Group
from minibroker._group_values import (
    NO_LEADER_EPOCH,
    NO_OFFSET,
    CommittedOffset,
    GroupConfig,
    GroupError,
    GroupState,
    OffsetToCommit,
    PartitionResult,
)

# The OffsetCommit version from which a commit to an unknown group is GROUP_ID_NOT_FOUND.
_GROUP_ID_NOT_FOUND_VERSION = 9


class OffsetStore:
    """OffsetCommit and OffsetFetch for the groups in ``groups``; a commit to a group nobody
    has joined yet creates it."""

    def __init__(
        self, config: GroupConfig, groups: MutableMapping[str, Group], rebalance: Rebalancer
    ) -> None:
        self._config = config
        self._groups = groups
        self._rebalance = rebalance

    def commit(
        self,
        *,
        group_id: str,
        member_id: str,
        generation_id: int,
        offsets: Sequence[OffsetToCommit],
        group_instance_id: str | None,
        api_version: int,
    ) -> tuple[PartitionResult, ...]:
        error = self._commit_error(
            group_id, member_id, generation_id, group_instance_id, api_version
        )
        if error is not GroupError.NONE:
            return tuple(
                PartitionResult(topic=o.topic, partition=o.partition, error_code=error)
                for o in offsets
            )
        group = self._groups.get(group_id)
        if group is None:
            group = self._groups[group_id] = Group.named(group_id, self._config)
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
        self,
        group_id: str,
        member_id: str,
        generation_id: int,
        group_instance_id: str | None,
        api_version: int,
    ) -> GroupError:
        # After Kafka 4's OffsetMetadataManager.validateOffsetCommit and
        # ClassicGroup.validateOffsetCommit: generation -1 comes from the admin client or a
        # consumer assigning its own partitions, and may commit to a group nobody is in,
        # whatever member id it names (an unknown group is created, empty).
        group = self._groups.get(group_id)
        if group is None:
            if generation_id < 0:
                return GroupError.NONE
            # A member of a group we do not know. GROUP_ID_NOT_FOUND from v9, which both group
            # protocols understand; ILLEGAL_GENERATION before, as older Kafka answered.
            if api_version >= _GROUP_ID_NOT_FOUND_VERSION:
                return GroupError.GROUP_ID_NOT_FOUND
            return GroupError.ILLEGAL_GENERATION
        if generation_id < 0 and group.state is GroupState.EMPTY:
            return GroupError.NONE
        if generation_id < 0 and not member_id and group_instance_id is None:
            # When the group has members, only they may commit.
            return GroupError.UNKNOWN_MEMBER_ID
        member = group.current_member(member_id, generation_id, group_instance_id)
        if isinstance(member, GroupError):
            return member
        if group.state is GroupState.COMPLETING_REBALANCE:
            # The member knows the new generation but not yet its partitions.
            return GroupError.REBALANCE_IN_PROGRESS
        # Committing during PreparingRebalance is allowed: consumers commit what they processed
        # before rejoining (onPartitionsRevoked).
        self._rebalance.touch(member)
        return GroupError.NONE

    def fetch(
        self, group_id: str, partitions: Iterable[tuple[str, int]] | None
    ) -> tuple[CommittedOffset, ...]:
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

    def remove_topic(self, topic: str) -> int:
        removed = 0
        for group in self._groups.values():
            for key in [k for k in group.offsets if k[0] == topic]:
                del group.offsets[key]
                removed += 1
        return removed
