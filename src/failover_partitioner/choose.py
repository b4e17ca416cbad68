"""Choosing a partition for each message: only usable partitions, cheaply.

Keyless messages
    ``sticky`` (default) stays on one usable partition for ``sticky_messages`` messages (or,
    when ``sticky_bytes`` is set, until that many value bytes went there), then moves to the
    next: round robin over the usable partitions by runs of messages, so each gets batches as
    large as a healthy topic's. It is the rule the Java client (KIP-480, KIP-794) and librdkafka
    follow for keyless messages, and the one a producer's healthy path already leaves to
    librdkafka, so a keyless message is placed alike whether the topic is whole or degraded.
    ``round_robin`` gives each keyless message the next usable partition (the seed's
    per-message round robin): an even spread message by message, at the price of a batch per
    partition a few messages long at high rates (librdkafka itself runs at about 0.82 of its
    sticky rate when each message names the next partition; bench/bench_failover.py).
    ``headroom=True`` avoids AT_RISK partitions while at least half the topic is HEALTHY.
    ``client_rack`` prefers partitions whose leader is in that rack (KIP-1123's idea).

Keyed messages
    While the key's own partition is usable the key gets it, and that partition is the one
    Kafka's default partitioner picks (``toPositive(murmur2(key)) % partitions``), so key
    affinity is unchanged. When it is unusable, ``key_policy="failover"`` places the key by
    rendezvous hashing over the usable partitions (of the key's bucket, its hash modulo 1,024,
    so that each bucket's place is worked out once per view): only keys of degraded partitions
    move, each to a stable place, and they return when their partition recovers (filtering
    the list and taking ``murmur2 % len(usable)`` would instead move almost every key; cf.
    kafka-go #139).
    ``key_policy="strict"`` never moves a key: the chooser answers :data:`NO_PARTITION` and the
    producer keeps the message waiting.

:data:`NO_PARTITION` (-1) also answers a keyless message when no partition is usable.

Leaving the choice to the client
    A chooser made with ``client_sticky=True`` (the confluent-kafka producer's, for
    ``strategy="sticky"`` without ``sticky_bytes``, ``headroom`` or ``client_rack``) answers
    keyless messages with :data:`CLIENT_PARTITIONER` while every partition of the topic is
    usable: librdkafka's own sticky partitioner (KIP-480: it moves to a new partition each
    ``sticky.partitioning.linger.ms``) then places the message, which is the same rule and
    cheaper than an explicit partition (larger batches, no Python call). ``sticky_messages``
    governs the choice only while the topic is degraded. A partition that fails between the
    check and the send is the race every choice has: the failure quarantines it, the view
    stops covering every partition, and the retry is placed explicitly.

    Likewise ``client_keyed=True`` (the confluent-kafka producer's when its client runs
    librdkafka's ``murmur2_random`` partitioner, the Java client's rule) answers keyed
    messages with :data:`CLIENT_PARTITIONER` while every partition is usable and
    ``key_policy="failover"``: the key's home partition is then usable, and librdkafka
    computes the same one in C.

Everything the hot path needs is precomputed per view in a :class:`_Plan` that is swapped as one
attribute; a keyless round-robin choice is one ``next()`` on an ``itertools.cycle``.
"""

from __future__ import annotations

import itertools
import random
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Final, Literal

from failover_partitioner._murmur2 import partition_for_key
from failover_partitioner.errors import ConfigError
from failover_partitioner.health import TopicView

__all__ = [
    "CLIENT_PARTITIONER",
    "NO_PARTITION",
    "ChoiceOptions",
    "KeyPolicy",
    "KeyedMemo",
    "PartitionChooser",
    "Strategy",
]

NO_PARTITION: Final = -1
"""Returned when the message must wait: nothing usable, or a strict key's partition is down."""

CLIENT_PARTITIONER: Final = -2
"""Returned (by a ``client_sticky`` chooser) when the client's own partitioner places it."""

Strategy = Literal["round_robin", "sticky"]
KeyPolicy = Literal["failover", "strict"]

_STRATEGIES: Final = ("round_robin", "sticky")
_KEY_POLICIES: Final = ("failover", "strict")
_M64: Final = 0xFFFFFFFFFFFFFFFF
_POSITIVE: Final = 0x7FFFFFFF
# Keys of unusable partitions are placed by their bucket (their hash modulo this): enough
# buckets to spread them evenly, few enough to remember every bucket's place per view.
_BUCKETS: Final = 1024

# The sticky strategy's defaults, the same for both producers (they take them from here):
# move on after this many messages; no byte budget, because counting bytes costs a Python
# call per keyless message, more than the confluent-kafka producer's hot path can afford.
# Set sticky_bytes when messages are large.
STICKY_MESSAGES_DEFAULT: Final = 1000
STICKY_BYTES_DEFAULT: Final[int | None] = None


@dataclass(frozen=True, slots=True, kw_only=True)
class ChoiceOptions:
    """How partitions are chosen; validated here so a bad value fails at construction."""

    strategy: Strategy = "sticky"
    key_policy: KeyPolicy = "failover"
    headroom: bool = False
    client_rack: str | None = None
    sticky_messages: int = STICKY_MESSAGES_DEFAULT
    sticky_bytes: int | None = STICKY_BYTES_DEFAULT

    def __post_init__(self) -> None:
        if self.strategy not in _STRATEGIES:
            raise ConfigError(
                f"strategy={self.strategy!r} is not supported; use one of {_STRATEGIES}"
            )
        if self.key_policy not in _KEY_POLICIES:
            raise ConfigError(
                f"key_policy={self.key_policy!r} is not supported; use one of {_KEY_POLICIES}"
            )
        if not isinstance(self.headroom, bool):
            raise ConfigError(f"headroom must be True or False, got {self.headroom!r}")
        if self.client_rack is not None and (
            not isinstance(self.client_rack, str) or not self.client_rack
        ):
            raise ConfigError(
                f"client_rack must be a non-empty string or None, got {self.client_rack!r}"
            )
        for name in ("sticky_messages", "sticky_bytes"):
            value = getattr(self, name)
            if value is None and name == "sticky_bytes":
                continue
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ConfigError(f"{name} must be an integer >= 1, got {value!r}")

    @property
    def client_can_stick(self) -> bool:
        """True when librdkafka's sticky partitioner follows the same rule as ours (for
        keyless messages of a topic whose every partition is usable)."""
        return (
            self.strategy == "sticky"
            and self.sticky_bytes is None
            and not self.headroom
            and self.client_rack is None
        )

    @property
    def counts_bytes(self) -> bool:
        """True when a keyless choice needs the message's size (sticky with a byte budget)."""
        return self.strategy == "sticky" and self.sticky_bytes is not None


def _score(seed: int, partition: int) -> int:
    # splitmix64's finaliser over (key seed, partition): a well-mixed 64-bit weight.
    z = (((seed << 32) | partition) + 0x9E3779B97F4A7C15) & _M64
    z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & _M64
    z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & _M64
    return z ^ (z >> 31)


def rendezvous(seed: int, partitions: tuple[int, ...]) -> int:
    """The partition with the highest weight for ``seed`` (highest random weight hashing).

    Removing a partition from ``partitions`` moves only the seeds that had chosen it.
    """
    best = NO_PARTITION
    best_score = -1
    for p in partitions:
        s = _score(seed, p)
        if s > best_score:
            best_score = s
            best = p
    return best


class _Plan:
    """Everything a choice reads, derived once from a view."""

    __slots__ = ("candidate_set", "candidates", "cycle", "num_partitions", "usable", "usable_mask")

    def __init__(
        self,
        view: TopicView,
        options: ChoiceOptions,
        rng: random.Random,
        client_sticky: bool = False,
    ) -> None:
        self.num_partitions = view.num_partitions
        self.usable = view.usable
        mask = [False] * view.num_partitions
        for p in view.usable:
            mask[p] = True
        self.usable_mask = tuple(mask)
        candidates = view.usable
        if options.headroom and 2 * len(view.healthy) >= view.num_partitions > 0:
            candidates = view.healthy
        if options.client_rack is not None:
            local = tuple(
                p for p in candidates if view.partitions[p].leader_rack == options.client_rack
            )
            if local:
                candidates = local
        self.candidates = candidates
        self.candidate_set = frozenset(candidates)
        if client_sticky and view.whole:
            self.cycle: Iterator[int] = itertools.repeat(CLIENT_PARTITIONER)
        elif candidates:
            # Start at a random place so frequent view swaps do not favour low partition ids.
            k = rng.randrange(len(candidates))
            order = candidates[k:] + candidates[:k]
            if options.strategy == "sticky" and options.sticky_bytes is None:
                # Sticky by count is round robin over each partition repeated: one next() too,
                # through iterators made as it goes (spelled out, the order took partitions x
                # sticky_messages entries and 0.12 s to build at 500 partitions, on each view).
                self.cycle = itertools.chain.from_iterable(
                    map(
                        itertools.repeat,
                        itertools.cycle(order),
                        itertools.repeat(options.sticky_messages),
                    )
                )
            else:
                self.cycle = itertools.cycle(order)
        else:
            self.cycle = itertools.repeat(NO_PARTITION)


def _client_places(key: bytes) -> int:
    return CLIENT_PARTITIONER


def _keyed_for(
    plan: _Plan,
    home: Callable[[bytes, int], int],
    strict: bool,
    client: bool = False,
) -> Callable[[bytes], int]:
    """The keyed choice for ``plan``, as a closure: locals are cheaper than attribute reads.

    ``client``: the client's partitioner computes the home partition (only when it is usable
    for every key, i.e. every partition is)."""
    n = plan.num_partitions
    mask = plan.usable_mask
    usable = plan.usable
    if n == 0:
        return lambda key: NO_PARTITION
    if client and not strict and len(usable) == n:
        return _client_places

    # One hash gives both the home and the bucket: toPositive(murmur2) modulo n times the
    # bucket count is that value modulo n (the home) and modulo the bucket count (the bucket)
    # alike, as both divide it. (Under 2**31: fewer buckets past two million partitions.)
    buckets = min(_BUCKETS, _POSITIVE // n)
    span = n * buckets
    # A key whose home is out of use goes where its bucket's rendezvous hashing says: the
    # winner of each bucket is worked out once per plan, on first need (a rendezvous over the
    # usable partitions costs microseconds; a lookup, nanoseconds).
    winners = [NO_PARTITION] * buckets

    def keyed(key: bytes) -> int:
        h = home(key, span)
        p = h % n
        if mask[p]:
            return p
        if strict:
            return NO_PARTITION
        bucket = h % buckets
        p = winners[bucket]
        if p < 0:
            p = winners[bucket] = rendezvous(bucket, usable)
        return p

    return keyed


class KeyedMemo(dict[bytes, int]):
    """A keyed choice's answers as a dict: ``memo[key]`` (or ``memo.__getitem__(key)``) is
    ``choice(key)``, worked out the first time a key comes (``__missing__``) and looked up
    after, with no Python frame: about 30 ns against 170 ns for a call of the choice (a
    scratch timeit, 1,000 keys in turn, 4 of 12 partitions out). It answers what the choice
    answers and nothing else: the choice decides, the memo remembers.

    It keeps at most ``cap`` keys: a key past them is answered, not kept, and the first such
    calls ``full()``. With more keys than that a memo is a loss (a miss costs a lookup and a
    frame more than the choice alone: 320 ns against 170 for keys never seen before), so its
    owner goes back to the choice itself then. One memo serves one plan of one chooser (a new
    view makes a new choice), so what it holds is never stale.
    """

    __slots__ = ("_choice", "_full", "_left")

    def __init__(self, choice: Callable[[bytes], int], cap: int, full: Callable[[], None]) -> None:
        super().__init__()
        self._choice = choice
        self._left = cap
        self._full = full

    def __missing__(self, key: bytes) -> int:
        p = self._choice(key)
        left = self._left
        if left > 0:
            self._left = left - 1
            self[key] = p
        elif left == 0:
            self._left = -1  # (full() once)
            self._full()
        return p


class PartitionChooser:
    """Chooses partitions for one topic from its current :class:`TopicView`.

    ``next_keyless()`` and ``keyed(key)`` are the hot-path calls; they are rebuilt with each
    view (a keyless round-robin choice is the ``__next__`` of an ``itertools.cycle``, with no
    Python frame at all). Not locked: a producer calls it from the threads that produce;
    :meth:`update` may run on another thread because it replaces each callable in a single
    assignment.
    """

    __slots__ = (
        "_client_keyed",
        "_client_sticky",
        "_home",
        "_options",
        "_plan",
        "_rng",
        "_sticky_current",
        "_sticky_left_bytes",
        "_sticky_left_msgs",
        "_strict",
        "_view",
        "keyed",
        "keyless",
        "next_keyless",
    )

    def __init__(
        self,
        view: TopicView,
        options: ChoiceOptions | None = None,
        *,
        rng: random.Random | None = None,
        home: Callable[[bytes, int], int] = partition_for_key,
        client_sticky: bool = False,
        client_keyed: bool = False,
    ) -> None:
        self._options = options or ChoiceOptions()
        self._client_keyed = client_keyed
        # Leave keyless messages to the client while the topic is whole (see the module doc).
        self._client_sticky = client_sticky and self._options.client_can_stick
        self._rng = rng or random.Random()
        self._home = home
        self._strict = self._options.key_policy == "strict"
        self._sticky_current = NO_PARTITION
        self._sticky_left_msgs = 0
        self._sticky_left_bytes = 0
        self.keyless: Callable[[int], int]
        """``keyless(nbytes)``: the partition for a keyless message of ``nbytes`` bytes."""
        self.next_keyless: Callable[[], int]
        """``next_keyless()``: the same when the size does not matter (see ``counts_bytes``)."""
        self.keyed: Callable[[bytes], int]
        """``keyed(key)``: the key's home partition while usable, else per the key policy."""
        if self._options.counts_bytes:
            self.keyless = self._sticky
        else:
            self.keyless = self._round_robin
        self.update(view)

    @property
    def view(self) -> TopicView:
        return self._view

    @property
    def options(self) -> ChoiceOptions:
        return self._options

    def update(self, view: TopicView) -> None:
        """Use ``view`` from now on."""
        plan = _Plan(view, self._options, self._rng, self._client_sticky)
        self._view = view
        self._plan = plan
        self.keyed = _keyed_for(plan, self._home, self._strict, self._client_keyed)
        if self._options.counts_bytes:
            self.next_keyless = self._sticky
        else:
            self.next_keyless = plan.cycle.__next__

    def whole_rotation(self, client_places: bool = True) -> Iterator[int] | Literal[False] | None:
        """The keyless choice for a producer's healthy path, which does not call the chooser:
        while every partition of the topic is usable, None where the client's own partitioner
        may place keyless messages, else the plan's rotation (``next()`` of it is the next
        choice). False while the topic is not whole, or when a choice needs the message's size.
        A new view makes a new rotation: the producer asks again after each.

        The client may place them (``client_places``: its sticky partitioner is on) unless
        ``headroom`` or ``client_rack`` prefer some partitions: librdkafka's partitioner spreads
        keyless messages over every partition (KIP-480 sticky batches), which is what either
        strategy does while nothing is out of use, and placing them in C keeps its batches as
        large as a raw producer's."""
        options = self._options
        if not self._view.whole or options.counts_bytes:
            return False
        if client_places and not options.headroom and options.client_rack is None:
            return None
        return self._plan.cycle

    def keyless_rotation(self) -> Iterator[int] | Literal[False]:
        """The keyless choice for a producer's healthy path while the topic is not whole: the
        plan's own rotation over the usable partitions (``next()`` of it is what
        ``next_keyless()`` would answer). False when a choice needs the message's size, or
        when no partition is usable (messages then wait). Keyed messages are not covered: a
        key whose partition is out of use is the chooser's to place."""
        if self._options.counts_bytes or not self._plan.candidates:
            return False
        return self._plan.cycle

    def replace_view(self, view: TopicView) -> None:
        """Swap in ``view`` when it differs from the current one only in its fetch time."""
        self._view = view

    def _round_robin(self, nbytes: int = 0) -> int:
        return next(self._plan.cycle)

    def _sticky(self, nbytes: int = 0) -> int:
        plan = self._plan
        current = self._sticky_current
        self._sticky_left_msgs -= 1
        self._sticky_left_bytes -= nbytes
        if (
            self._sticky_left_msgs < 0
            or self._sticky_left_bytes < 0
            or current not in plan.candidate_set
        ):
            current = next(plan.cycle)
            self._sticky_current = current
            self._sticky_left_msgs = self._options.sticky_messages - 1
            self._sticky_left_bytes = (self._options.sticky_bytes or 0) - nbytes
        return current

    def keyless_deal(self, n: int) -> tuple[int, ...]:
        """Partitions for ``n`` keyless messages chosen in one step (``n`` >= 1).

        Message ``i`` goes to ``result[i % len(result)]``. Round robin answers one partition
        per candidate (fewer when ``n`` is smaller), so the messages are dealt out exactly as
        ``n`` single choices would, and the rotation moves on by ``n``; sticky answers one
        partition for all ``n``. Entries may be :data:`NO_PARTITION` or
        :data:`CLIENT_PARTITIONER`, as single choices may.
        """
        plan = self._plan
        if self._options.counts_bytes:
            return (self._sticky(0),)
        cycle = plan.cycle
        period = len(plan.candidates)
        if self._options.strategy == "sticky" or period == 0:
            # One step; the rotation skips the rest as if each had been chosen.
            first = next(cycle)
            next(itertools.islice(cycle, n - 1, n - 1), None)
            return (first,)
        c = min(n, period)
        out = tuple(itertools.islice(cycle, c))
        skip = (n - c) % period  # the cycle repeats every `period`: skipping more is the same
        next(itertools.islice(cycle, skip, skip), None)
        return out

    def home(self, key: bytes) -> int:
        """The partition Kafka's default partitioner gives ``key`` (over all partitions)."""
        return self._home(key, self._plan.num_partitions)

    def choose(self, key: bytes | None, nbytes: int = 0) -> int:
        """The partition for a message (keyed or not), or :data:`NO_PARTITION` to wait."""
        if key is None:
            return self.keyless(nbytes)
        return self.keyed(key)

    def usable(self, partition: int) -> bool:
        plan = self._plan
        return 0 <= partition < plan.num_partitions and plan.usable_mask[partition]
