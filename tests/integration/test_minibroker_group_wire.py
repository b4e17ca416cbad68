"""Consumer-group requests byte for byte: the error codes Kafka answers, and what one member
whose answers cannot be encoded must not do to the others. Raw frames, on the kio client of
``test_minibroker_protocol``."""

from __future__ import annotations

import time
from collections.abc import Iterator

import pytest
from kio.schema.errors import ErrorCode

from minibroker import Cluster, _group_join
from tests.integration.test_minibroker_protocol import Wire

_JOIN, _SYNC, _HEARTBEAT, _COMMIT, _FETCH, _API_VERSIONS = 11, 14, 12, 8, 9, 18
_DESCRIBE, _DELETE = 15, 42
# A member id is `<instance or client id>-<UUID>`; a Kafka string holds 32,767 bytes.
_TOO_LONG = "i" * 32_740


@pytest.fixture(scope="module")
def cluster() -> Iterator[Cluster]:
    with Cluster(brokers=2) as running:
        running.create_topic("g", partitions=1, replication_factor=2)
        yield running


def _wire(cluster: Cluster, broker_id: int) -> Wire:
    return Wire(cluster.bootstrap_servers.split(",")[broker_id - 1])


def _join(
    wire: Wire,
    group: str,
    member_id: str = "",
    *,
    version: int = 3,
    instance: str | None = None,
    client_id: str = "wire-test",
) -> bytes:
    """A JoinGroup frame. v3 comes before KIP-394: a new member is admitted at once."""
    values = {
        "group_id": group,
        "session_timeout": 30_000,
        "rebalance_timeout": 30_000,
        "member_id": member_id,
        "group_instance_id": instance,
        "protocol_type": "consumer",
        "protocols": [{"name": "range", "metadata": b"m"}],
    }
    return wire.encode(_JOIN, version, values, client_id=client_id)


def _sync(wire: Wire, group: str, generation: int, member_id: str, members: list[str]) -> int:
    values = {
        "group_id": group,
        "generation_id": generation,
        "member_id": member_id,
        "group_instance_id": None,
        "assignments": [{"member_id": m, "assignment": b""} for m in members],
    }
    return int(wire.call(_SYNC, 3, values).error_code)


def _await_rebalance(wire: Wire, group: str, generation: int, member_id: str) -> None:
    """Heartbeat until the group is rebalancing (a join sent on another connection arrived)."""
    values = {
        "group_id": group,
        "generation_id": generation,
        "member_id": member_id,
        "group_instance_id": None,
    }
    deadline = time.monotonic() + 10
    while int(wire.call(_HEARTBEAT, 3, values).error_code) != ErrorCode.rebalance_in_progress:
        assert time.monotonic() < deadline, "the join never arrived"
        time.sleep(0.01)


def _form_group(group: str, wires: list[Wire]) -> tuple[int, list[str]]:
    """Join ``wires`` one at a time and sync; the generation and member ids, leader first."""
    ids: list[str] = []
    generation = 0
    for count, newcomer in enumerate(wires, start=1):
        newcomer.send_frame(_join(newcomer, group))
        if ids:
            _await_rebalance(wires[0], group, generation, ids[0])
            for wire, member_id in zip(wires, ids, strict=False):
                wire.send_frame(_join(wire, group, member_id))
        answers = [wire.receive(_JOIN, 3) for wire in wires[:count]]
        assert [int(a.error_code) for a in answers] == [0] * count
        generation = answers[0].generation_id
        ids = [a.member_id for a in answers]
        for wire, member_id in zip(wires, ids, strict=False):
            assert _sync(wire, group, generation, member_id, ids) == 0
    return generation, ids


def test_a_member_id_too_long_for_a_kafka_string_is_refused_at_join(cluster: Cluster) -> None:
    group = "long-ids"
    wire = _wire(cluster, cluster.group_coordinator(group))
    try:
        refused = []
        for version, instance, client_id in [
            (5, _TOO_LONG, "wire-test"),
            (6, _TOO_LONG, "wire-test"),
            (3, None, _TOO_LONG),
        ]:
            wire.send_frame(
                _join(wire, group, version=version, instance=instance, client_id=client_id)
            )
            refused.append(wire.receive(_JOIN, version))
        assert [(r.error_code, r.member_id) for r in refused] == [
            (ErrorCode.invalid_request, "")
        ] * 3
        # They left nothing behind: the next member forms the group at once.
        wire.send_frame(_join(wire, group, version=5, instance="ok"))
        joined = wire.receive(_JOIN, 5)
        assert (joined.error_code, joined.generation_id) == (ErrorCode.none, 1)
        assert joined.member_id.startswith("ok-")
    finally:
        wire.close()


def test_an_answer_that_cannot_be_encoded_closes_only_its_connection(
    cluster: Cluster, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Without JoinGroup's length check a member id too long to encode gets in, and every
    # JoinGroup answer naming it fails: its own, and the leader's (the member list).
    monkeypatch.setattr(_group_join, "_MAX_MEMBER_ID_BYTES", 1_000_000)
    group = "poisoned"
    coordinator = cluster.group_coordinator(group)
    leader, second, third, poison, probe = (_wire(cluster, coordinator) for _ in range(5))
    try:
        generation, (leader_id, second_id, third_id) = _form_group(group, [leader, second, third])
        poison.send_frame(_join(poison, group, version=5, instance=_TOO_LONG))
        _await_rebalance(leader, group, generation, leader_id)
        leader.send_frame(_join(leader, group, leader_id))
        second.send_frame(_join(second, group, second_id))
        probe.call(_API_VERSIONS, 0, {})  # both rejoins are in before the last one is sent
        # The last rejoin completes the join phase; the answers go out in member order: the
        # leader's fails, then the second member's must still go out.
        third.send_frame(_join(third, group, third_id))
        answers = [second.receive(_JOIN, 3), third.receive(_JOIN, 3)]
        assert [(a.error_code, a.generation_id, a.leader) for a in answers] == [
            (ErrorCode.none, generation + 1, leader_id)
        ] * 2
        assert leader.read_frame() is None
        assert poison.read_frame() is None
    finally:
        for wire in (leader, second, third, poison, probe):
            wire.close()


def _commit(wire: Wire, group: str, version: int, generation: int, member_id: str) -> int:
    values = {
        "group_id": group,
        "generation_id_or_member_epoch": generation,
        "member_id": member_id,
        "group_instance_id": None,
        "topics": [
            {
                "name": "g",
                "partitions": [
                    {
                        "partition_index": 0,
                        "committed_offset": 5,
                        "committed_leader_epoch": -1,
                        "committed_metadata": "",
                    }
                ],
            }
        ],
    }
    response = wire.call(_COMMIT, version, values)
    return int(response.topics[0].partitions[0].error_code)


def test_offset_commit_of_a_generation_of_an_unknown_group_is_group_id_not_found_from_v9(
    cluster: Cluster,
) -> None:
    # Kafka 4's OffsetMetadataManager.validateOffsetCommit: GROUP_ID_NOT_FOUND from v9,
    # ILLEGAL_GENERATION before.
    wire = _wire(cluster, cluster.group_coordinator("unknown"))
    try:
        assert _commit(wire, "unknown", 9, 3, "m") == ErrorCode.group_id_not_found
        assert _commit(wire, "unknown", 8, 3, "m") == ErrorCode.illegal_generation
    finally:
        wire.close()


def test_offset_commit_of_generation_minus_one_is_accepted_while_the_group_is_empty(
    cluster: Cluster,
) -> None:
    # Kafka 4's ClassicGroup.validateOffsetCommit: generation -1 (the admin client, a consumer
    # assigning its own partitions) may commit to an empty group whatever member id it names;
    # an unknown group is created empty.
    groups = ("simple-x", "simple-empty", "simple-joined")
    wires = {g: _wire(cluster, cluster.group_coordinator(g)) for g in groups}
    try:
        wire = wires["simple-x"]
        assert _commit(wire, "simple-x", 9, -1, "x") == ErrorCode.none
        assert _commit(wire, "simple-x", 8, -1, "x") == ErrorCode.none
        fetched = wire.call(
            _FETCH,
            7,
            {"group_id": "simple-x", "topics": [{"name": "g", "partition_indexes": [0]}]},
        )
        assert fetched.topics[0].partitions[0].committed_offset == 5
        wire = wires["simple-empty"]
        assert _commit(wire, "simple-empty", 9, -1, "") == ErrorCode.none
        assert _commit(wire, "simple-empty", 9, -1, "x") == ErrorCode.none
        # Once the group has members, only they may commit, in their generation.
        wire = wires["simple-joined"]
        wire.send_frame(_join(wire, "simple-joined"))
        member = wire.receive(_JOIN, 3)
        assert _commit(wire, "simple-joined", 9, -1, "x") == ErrorCode.unknown_member_id
        assert _commit(wire, "simple-joined", 9, -1, "") == ErrorCode.unknown_member_id
        assert (
            _commit(wire, "simple-joined", 9, -1, member.member_id) == ErrorCode.illegal_generation
        )
    finally:
        for wire in wires.values():
            wire.close()


def test_offset_fetch_v1_from_another_broker_puts_the_error_on_each_partition(
    cluster: Cluster,
) -> None:
    # v1 has no group-level error: Kafka's OffsetFetchRequest.getErrorResponse.
    group = "fetched"
    other = next(b for b in cluster.broker_ids if b != cluster.group_coordinator(group))
    wire = _wire(cluster, other)
    try:
        topics = [
            {"name": "g", "partition_indexes": [0]},
            {"name": "nope", "partition_indexes": [3]},
        ]
        old = wire.call(_FETCH, 1, {"group_id": group, "topics": topics})
        assert [
            (
                t.name,
                [
                    (p.partition_index, p.committed_offset, p.metadata, p.error_code)
                    for p in t.partitions
                ],
            )
            for t in old.topics
        ] == [
            ("g", [(0, -1, "", ErrorCode.not_coordinator)]),
            ("nope", [(3, -1, "", ErrorCode.not_coordinator)]),
        ]
        new = wire.call(_FETCH, 2, {"group_id": group, "topics": topics})
        assert (new.error_code, new.topics) == (ErrorCode.not_coordinator, ())
    finally:
        wire.close()


def _delete(wire: Wire, groups: list[str], version: int) -> list[tuple[str, int]]:
    response = wire.call(_DELETE, version, {"groups_names": groups})
    return [(r.group_id, int(r.error_code)) for r in response.results]


@pytest.mark.parametrize("version", [0, 1, 2])
def test_delete_groups_answers_each_group_as_kafka_does(cluster: Cluster, version: int) -> None:
    # Kafka 4's GroupCoordinatorShard.deleteGroups and ClassicGroup.validateDeleteGroup; the
    # same codes came back from Kafka 4.4 (tests/realkafka) for each case.
    joined, empty, missing = (f"{name}-v{version}" for name in ("joined", "emptied", "missing"))
    wires = {g: _wire(cluster, cluster.group_coordinator(g)) for g in (joined, empty, missing, "")}
    other = next(b for b in cluster.broker_ids if b != cluster.group_coordinator(empty))
    elsewhere = _wire(cluster, other)
    try:
        wires[joined].send_frame(_join(wires[joined], joined))
        assert int(wires[joined].receive(_JOIN, 3).error_code) == ErrorCode.none
        assert _commit(wires[empty], empty, 9, -1, "") == ErrorCode.none

        assert _delete(wires[joined], [joined], version) == [(joined, ErrorCode.non_empty_group)]
        assert _delete(wires[missing], [missing], version) == [
            (missing, ErrorCode.group_id_not_found)
        ]
        assert _delete(wires[""], [""], version) == [("", ErrorCode.group_id_not_found)]
        assert _delete(elsewhere, [empty], version) == [(empty, ErrorCode.not_coordinator)]
        # A group named twice is answered once, as Kafka drops repeats.
        assert _delete(wires[empty], [empty, empty], version) == [(empty, ErrorCode.none)]

        # Gone with its offsets: Dead to DescribeGroups, nothing committed, not found again.
        described = wires[empty].call(
            _DESCRIBE, 5, {"groups": [empty], "include_authorized_operations": False}
        )
        assert described.groups[0].group_state == "Dead"
        fetched = wires[empty].call(
            _FETCH, 7, {"group_id": empty, "topics": [{"name": "g", "partition_indexes": [0]}]}
        )
        assert fetched.topics[0].partitions[0].committed_offset == -1
        assert _delete(wires[empty], [empty], version) == [(empty, ErrorCode.group_id_not_found)]
    finally:
        for wire in (*wires.values(), elsewhere):
            wire.close()
