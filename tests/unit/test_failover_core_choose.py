"""Partition choice: only usable partitions, fair round robin, Kafka-compatible keyed placement."""

from __future__ import annotations

import random
import tracemalloc
from collections import Counter

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from failover_partitioner._murmur2 import (
    _py_partition_for_key,
    murmur2,
    partition_for_key,
    to_positive,
)
from failover_partitioner.choose import (
    CLIENT_PARTITIONER,
    NO_PARTITION,
    ChoiceOptions,
    KeyedMemo,
    KeyPolicy,
    PartitionChooser,
    rendezvous,
)
from failover_partitioner.errors import ConfigError
from failover_partitioner.health import PartitionMetadata, TopicMetadata, TopicView

# Kafka's own golden vectors: clients/src/test/java/org/apache/kafka/common/utils/UtilsTest.java
# (testMurmur2).
JAVA_MURMUR2 = {
    b"21": -973932308,
    b"foobar": -790332482,
    b"a-little-bit-long-string": -985981536,
    b"a-little-bit-longer-string": -1486304829,
    b"lkjh234lh9fiuh90y23oiuhsafujhadof229phr9h19h89h8": -58897971,
    b"abc": 479470107,
}


ROUND_ROBIN = ChoiceOptions(strategy="round_robin")


def view(
    n: int,
    *,
    down: frozenset[int] = frozenset(),
    at_risk: frozenset[int] = frozenset(),
    racks: dict[int, str] | None = None,
) -> TopicView:
    parts = []
    for p in range(n):
        isr = 1 if p in down else 2 if p in at_risk else 3
        parts.append(
            PartitionMetadata(
                partition=p,
                leader=1 + p % 3,
                replicas=(1, 2, 3),
                isr=tuple(range(1, isr + 1)),
                leader_rack=(racks or {}).get(p),
            )
        )
    return TopicView.build(TopicMetadata(topic="t", partitions=tuple(parts), min_insync_replicas=2))


partition_sets = st.integers(1, 24).flatmap(
    lambda n: st.tuples(st.just(n), st.frozensets(st.integers(0, n - 1)))
)
keys = st.binary(min_size=0, max_size=40)


@pytest.mark.parametrize(("key", "expected"), sorted(JAVA_MURMUR2.items()))
def test_murmur2_matches_the_java_client(key: bytes, expected: int) -> None:
    assert murmur2(key) == expected


@pytest.mark.parametrize(("key", "expected"), sorted(JAVA_MURMUR2.items()))
@pytest.mark.parametrize("n", [1, 3, 12, 100, 2**30])
def test_partition_for_key_is_javas_positive_modulo(key: bytes, expected: int, n: int) -> None:
    assert partition_for_key(key, n) == to_positive(expected) % n
    assert _py_partition_for_key(key, n) == to_positive(expected) % n


@given(keys, st.integers(1, 1000))
def test_fast_and_reference_murmur2_agree(key: bytes, n: int) -> None:
    assert partition_for_key(key, n) == _py_partition_for_key(key, n)


@given(partition_sets, st.sampled_from(["round_robin", "sticky"]), st.booleans())
def test_keyless_choice_only_returns_usable_partitions(
    spec: tuple[int, frozenset[int]], strategy: str, headroom: bool
) -> None:
    n, down = spec
    v = view(n, down=down)
    chooser = PartitionChooser(
        v,
        ChoiceOptions(strategy=strategy, headroom=headroom, sticky_messages=3),  # type: ignore[arg-type]  # hypothesis draws valid literals
        rng=random.Random(0),
    )
    picks = {chooser.keyless(100) for _ in range(3 * n + 5)}
    if v.usable:
        assert picks <= set(v.usable)
    else:
        assert picks == {NO_PARTITION}


@given(partition_sets, st.integers(1, 5))
def test_round_robin_is_exactly_fair(spec: tuple[int, frozenset[int]], rounds: int) -> None:
    n, down = spec
    v = view(n, down=down)
    chooser = PartitionChooser(v, ROUND_ROBIN, rng=random.Random(1))
    counts = Counter(chooser.keyless(0) for _ in range(rounds * len(v.usable)))
    if v.usable:
        assert set(counts) == set(v.usable)
        assert set(counts.values()) == {rounds}


def test_sticky_stays_for_a_batch_then_moves() -> None:
    chooser = PartitionChooser(
        view(4), ChoiceOptions(strategy="sticky", sticky_messages=5), rng=random.Random(2)
    )
    picks = [chooser.keyless(10) for _ in range(20)]
    runs = [picks[i : i + 5] for i in range(0, 20, 5)]
    assert all(len(set(r)) == 1 for r in runs)
    assert sorted(r[0] for r in runs) == [0, 1, 2, 3]


def test_a_sticky_plan_costs_memory_by_partitions_not_by_sticky_messages() -> None:
    """A new view makes a new plan (each strike, each metadata change, in the caller's
    produce()); spelled out as partitions x sticky_messages entries, 1,000 partitions at the
    default 10,000 took 80 MB and seconds a view."""
    tracemalloc.start()
    try:
        chooser = PartitionChooser(
            view(1000), ChoiceOptions(strategy="sticky", sticky_messages=10_000)
        )
        chooser.update(view(1000, down=frozenset({1, 2})))
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < 2_000_000
    picks = [chooser.keyless(0) for _ in range(30_000)]
    assert [len(set(picks[i : i + 10_000])) for i in range(0, 30_000, 10_000)] == [1, 1, 1]
    assert len(set(picks)) == 3
    assert not set(picks) & {1, 2}


def test_sticky_moves_after_the_byte_budget() -> None:
    chooser = PartitionChooser(
        view(4),
        ChoiceOptions(strategy="sticky", sticky_messages=1000, sticky_bytes=250),
        rng=random.Random(2),
    )
    picks = [chooser.keyless(100) for _ in range(6)]
    assert picks[0] == picks[1] != picks[2]
    assert picks[2] == picks[3] != picks[4]


def test_sticky_leaves_a_partition_that_becomes_unusable() -> None:
    chooser = PartitionChooser(
        view(4), ChoiceOptions(strategy="sticky", sticky_messages=1000), rng=random.Random(3)
    )
    current = chooser.keyless(0)
    chooser.update(view(4, down=frozenset({current})))
    assert chooser.keyless(0) != current


def test_headroom_avoids_at_risk_while_half_is_healthy() -> None:
    opts = ChoiceOptions(strategy="round_robin", headroom=True)
    chooser = PartitionChooser(view(4, at_risk=frozenset({0, 1})), opts, rng=random.Random(0))
    assert {chooser.keyless(0) for _ in range(20)} == {2, 3}
    # Fewer than half healthy: AT_RISK partitions are used again rather than overload the rest.
    chooser.update(view(4, at_risk=frozenset({0, 1, 2})))
    assert {chooser.keyless(0) for _ in range(20)} == {0, 1, 2, 3}


def test_client_rack_prefers_local_leaders_and_falls_back() -> None:
    racks = {0: "a", 1: "b", 2: "a", 3: "b"}
    chooser = PartitionChooser(
        view(4, racks=racks),
        ChoiceOptions(strategy="round_robin", client_rack="a"),
        rng=random.Random(0),
    )
    assert {chooser.keyless(0) for _ in range(20)} == {0, 2}
    chooser.update(view(4, racks=racks, down=frozenset({0, 2})))
    assert {chooser.keyless(0) for _ in range(20)} == {1, 3}


@given(st.lists(keys, min_size=1, max_size=50), st.integers(1, 24))
def test_keyed_placement_equals_murmur2_while_usable(key_list: list[bytes], n: int) -> None:
    chooser = PartitionChooser(view(n))
    for k in key_list:
        assert chooser.keyed(k) == to_positive(murmur2(k)) % n


@settings(max_examples=60)
@given(partition_sets, st.lists(keys, min_size=1, max_size=80))
def test_failover_moves_only_degraded_keys_and_they_return(
    spec: tuple[int, frozenset[int]], key_list: list[bytes]
) -> None:
    n, down = spec
    chooser = PartitionChooser(view(n))
    before = {k: chooser.keyed(k) for k in key_list}
    chooser.update(view(n, down=down))
    during = {k: chooser.keyed(k) for k in key_list}
    for k in key_list:
        if before[k] not in down:
            assert during[k] == before[k]
        elif len(down) < n:
            assert during[k] not in down
            assert during[k] != NO_PARTITION
        else:
            assert during[k] == NO_PARTITION
    chooser.update(view(n))
    assert {k: chooser.keyed(k) for k in key_list} == before


@settings(max_examples=60)
@given(partition_sets, st.lists(keys, min_size=1, max_size=80))
def test_strict_never_moves_a_key(spec: tuple[int, frozenset[int]], key_list: list[bytes]) -> None:
    n, down = spec
    chooser = PartitionChooser(view(n), ChoiceOptions(key_policy="strict"))
    home = {k: chooser.keyed(k) for k in key_list}
    chooser.update(view(n, down=down))
    for k in key_list:
        assert chooser.keyed(k) == (NO_PARTITION if home[k] in down else home[k])


@settings(max_examples=60)
@given(
    partition_sets,
    st.lists(keys, min_size=1, max_size=80),
    st.integers(0, 40),
    st.sampled_from(["failover", "strict"]),
)
def test_a_keyed_memo_answers_what_its_choice_answers_and_keeps_at_most_its_cap(
    spec: tuple[int, frozenset[int]], key_list: list[bytes], cap: int, policy: KeyPolicy
) -> None:
    """KeyedMemo (the confluent healthy path's table of a degraded topic's keyed choice):
    every answer, first or remembered, is the choice's; it keeps at most ``cap`` keys, and
    says so once, when a key past them comes."""
    n, down = spec
    chooser = PartitionChooser(view(n, down=down), ChoiceOptions(key_policy=policy))
    said: list[None] = []
    memo = KeyedMemo(chooser.keyed, cap, lambda: said.append(None))
    for _ in range(2):
        assert [memo[k] for k in key_list] == [chooser.keyed(k) for k in key_list]
        assert [memo.__getitem__(k) for k in key_list] == [chooser.keyed(k) for k in key_list]
    distinct = len(set(key_list))
    assert len(memo) == min(cap, distinct)
    assert len(said) == (1 if distinct > cap else 0)


def test_failover_spreads_a_degraded_partitions_keys_over_the_others() -> None:
    chooser = PartitionChooser(view(6))
    keys_of_0 = [k for k in (str(i).encode() for i in range(5000)) if chooser.keyed(k) == 0]
    chooser.update(view(6, down=frozenset({0})))
    moved = Counter(chooser.keyed(k) for k in keys_of_0)
    assert set(moved) == {1, 2, 3, 4, 5}
    assert min(moved.values()) > len(keys_of_0) / 5 * 0.6


@given(st.integers(0, 2**31 - 1), st.frozensets(st.integers(0, 30), min_size=2))
def test_rendezvous_removal_moves_only_the_removed_choice(seed: int, parts: frozenset[int]) -> None:
    ordered = tuple(sorted(parts))
    winner = rendezvous(seed, ordered)
    other = next(p for p in ordered if p != winner)
    assert rendezvous(seed, tuple(p for p in ordered if p != other)) == winner


def test_empty_topic_has_nothing_to_choose() -> None:
    chooser = PartitionChooser(view(0))
    assert chooser.keyless(0) == NO_PARTITION
    assert chooser.keyed(b"k") == NO_PARTITION
    assert chooser.choose(None) == NO_PARTITION


def test_choose_dispatches_on_key() -> None:
    chooser = PartitionChooser(view(5))
    assert chooser.choose(b"abc") == to_positive(479470107) % 5
    assert chooser.choose(None) in range(5)
    assert chooser.home(b"abc") == to_positive(479470107) % 5
    assert chooser.usable(2)
    assert not chooser.usable(7)


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"strategy": "random"}, "strategy='random' is not supported"),
        ({"key_policy": "loose"}, "key_policy='loose' is not supported"),
        ({"headroom": 1}, "headroom must be True or False, got 1"),
        ({"client_rack": ""}, "client_rack must be a non-empty string or None, got ''"),
        ({"sticky_messages": 0}, "sticky_messages must be an integer >= 1, got 0"),
        ({"sticky_bytes": 1.5}, "sticky_bytes must be an integer >= 1, got 1.5"),
    ],
)
def test_bad_options_name_the_value(kwargs: dict[str, object], message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        ChoiceOptions(**kwargs)  # type: ignore[arg-type]  # deliberately wrong values


STICKY = ChoiceOptions(strategy="sticky", sticky_messages=3)


def test_a_client_sticky_chooser_leaves_keyless_messages_to_the_client_while_all_are_usable() -> (
    None
):
    chooser = PartitionChooser(view(6), STICKY, client_sticky=True, rng=random.Random(1))
    assert {chooser.next_keyless() for _ in range(50)} == {CLIENT_PARTITIONER}
    assert chooser.keyless(100) == CLIENT_PARTITIONER
    assert chooser.choose(None) == CLIENT_PARTITIONER
    assert chooser.keyed(b"k") == partition_for_key(b"k", 6)  # keys stay explicit
    # Degraded: explicit sticky choice over the usable partitions, runs of sticky_messages.
    chooser.update(view(6, down=frozenset({2})))
    chosen = [chooser.next_keyless() for _ in range(36)]
    assert set(chosen) == {0, 1, 3, 4, 5}
    assert all(len(set(chosen[i : i + 3])) == 1 for i in range(0, 36, 3))
    # Whole again: back to the client.
    chooser.update(view(6))
    assert chooser.next_keyless() == CLIENT_PARTITIONER


@pytest.mark.parametrize(
    "options",
    [
        ROUND_ROBIN,
        ChoiceOptions(strategy="sticky", sticky_bytes=1000),
        ChoiceOptions(strategy="sticky", headroom=True),
        ChoiceOptions(strategy="sticky", client_rack="r1"),
    ],
    ids=["round_robin", "sticky_bytes", "headroom", "client_rack"],
)
def test_only_plain_sticky_is_left_to_the_client(options: ChoiceOptions) -> None:
    chooser = PartitionChooser(view(6), options, client_sticky=True)
    assert all(0 <= chooser.keyless(10) < 6 for _ in range(50))
    assert not options.client_can_stick


def test_without_client_sticky_sticky_is_always_explicit() -> None:
    chooser = PartitionChooser(view(6), STICKY)
    assert all(0 <= chooser.next_keyless() < 6 for _ in range(50))


@given(
    partition_sets,
    st.lists(st.integers(1, 60), min_size=1, max_size=8),
    st.integers(0, 2**32),
)
@settings(max_examples=150, deadline=None)
def test_a_dealt_round_robin_batch_lands_where_single_choices_would(
    parts: tuple[int, frozenset[int]], sizes: list[int], seed: int
) -> None:
    n, down = parts
    dealt = PartitionChooser(view(n, down=down), rng=random.Random(seed))
    single = PartitionChooser(view(n, down=down), rng=random.Random(seed))
    for k in sizes:
        deal = dealt.keyless_deal(k)
        assert [deal[i % len(deal)] for i in range(k)] == [single.next_keyless() for _ in range(k)]


def test_a_sticky_deal_is_one_step_and_moves_the_rotation_on() -> None:
    dealt = PartitionChooser(view(4), STICKY, rng=random.Random(3))
    single = PartitionChooser(view(4), STICKY, rng=random.Random(3))
    assert dealt.keyless_deal(2) == (single.next_keyless(),)
    single.next_keyless()
    assert dealt.keyless_deal(1) == (single.next_keyless(),)
    client = PartitionChooser(view(4), STICKY, client_sticky=True)
    assert client.keyless_deal(500) == (CLIENT_PARTITIONER,)
    assert PartitionChooser(view(3, down=frozenset({0, 1, 2}))).keyless_deal(5) == (NO_PARTITION,)


def test_a_client_keyed_chooser_leaves_keys_to_the_client_only_while_all_are_usable() -> None:
    chooser = PartitionChooser(view(6), client_keyed=True)
    assert {chooser.keyed(b"k%d" % i) for i in range(50)} == {CLIENT_PARTITIONER}
    chooser.update(view(6, down=frozenset({1})))
    # Degraded: explicit, the home partition while usable, else rendezvous over the others.
    for i in range(200):
        key = b"k%d" % i
        home = partition_for_key(key, 6)
        p = chooser.keyed(key)
        assert p == home if home != 1 else p in {0, 2, 3, 4, 5}
    chooser.update(view(6))
    assert chooser.keyed(b"x") == CLIENT_PARTITIONER
    # strict keeps every choice explicit, as does a chooser without client_keyed
    strict = PartitionChooser(view(6), ChoiceOptions(key_policy="strict"), client_keyed=True)
    assert strict.keyed(b"x") == partition_for_key(b"x", 6)
    assert PartitionChooser(view(6)).keyed(b"x") == partition_for_key(b"x", 6)


def test_keys_of_an_unusable_partition_spread_and_stay_put_when_another_goes() -> None:
    """The keys of an unusable partition spread over the usable ones (by their bucket's
    rendezvous hashing); when one more partition goes, only the keys that had chosen it move,
    and a key comes back home once its partition is usable again."""
    chooser = PartitionChooser(view(6, down=frozenset({1})))
    keys = [b"k%d" % i for i in range(6000)]
    moved = [k for k in keys if partition_for_key(k, 6) == 1]
    before = {k: chooser.keyed(k) for k in moved}
    assert before == {k: chooser.keyed(k) for k in moved}, "stable"
    counts = Counter(before.values())
    assert set(counts) == {0, 2, 3, 4, 5}
    assert min(counts.values()) > 0.6 * len(moved) / 5, counts
    chooser.update(view(6, down=frozenset({1, 4})))
    after = {k: chooser.keyed(k) for k in moved}
    assert all(after[k] == before[k] for k in moved if before[k] != 4)
    assert {after[k] for k in moved if before[k] == 4} <= {0, 2, 3, 5}
    chooser.update(view(6))
    assert all(chooser.keyed(k) == 1 for k in moved)


@given(key=st.binary(max_size=40), partitions=st.integers(2, 300), displaced=st.booleans())
def test_a_key_out_of_its_home_goes_to_its_buckets_winner(
    key: bytes, partitions: int, displaced: bool
) -> None:
    """The documented rule (guarantees.md, Keyed messages): a key whose partition is out of use
    goes to the rendezvous winner of its bucket, toPositive(murmur2(key)) modulo 1,024, over the
    usable partitions; one hash of the key gives the home and the bucket alike."""
    home = to_positive(murmur2(key)) % partitions
    down = home if displaced else (home + 1) % partitions
    chooser = PartitionChooser(view(partitions, down=frozenset({down})))
    usable = tuple(p for p in range(partitions) if p != down)
    bucket = to_positive(murmur2(key)) % 1024
    assert chooser.keyed(key) == (rendezvous(bucket, usable) if displaced else home)
