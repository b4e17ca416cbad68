"""Kafka's key hash: murmur2 exactly as the Java client's ``Utils.murmur2``.

The Java default partitioner places a keyed record at ``toPositive(murmur2(key)) % partitions``
(``BuiltInPartitioner.partitionForKey``); librdkafka's ``murmur2`` partitioner and
``confluent_kafka.murmur2`` compute the same. The C function is used when confluent-kafka is
installed; the pure-Python one is the reference and the fallback for other clients.
"""

from __future__ import annotations

from collections.abc import Callable

__all__ = ["murmur2", "partition_for_key", "to_positive"]

_M = 0x5BD1E995
_SEED = 0x9747B28C
_MASK32 = 0xFFFFFFFF
_POSITIVE = 0x7FFFFFFF


def murmur2(data: bytes) -> int:
    """The signed 32-bit murmur2 hash of ``data``, bit for bit as Java's ``Utils.murmur2``."""
    length = len(data)
    h = (_SEED ^ length) & _MASK32
    end = length & ~3
    for i in range(0, end, 4):
        k = data[i] | (data[i + 1] << 8) | (data[i + 2] << 16) | (data[i + 3] << 24)
        k = (k * _M) & _MASK32
        k ^= k >> 24
        k = (k * _M) & _MASK32
        h = ((h * _M) & _MASK32) ^ k
    rest = length & 3
    # Java's switch falls through from case 3 to case 1.
    if rest == 3:
        h ^= data[end + 2] << 16
    if rest >= 2:
        h ^= data[end + 1] << 8
    if rest >= 1:
        h ^= data[end]
        h = (h * _M) & _MASK32
    h ^= h >> 13
    h = (h * _M) & _MASK32
    h ^= h >> 15
    return h - (1 << 32) if h & 0x80000000 else h


def to_positive(h: int) -> int:
    """Java's ``Utils.toPositive``: clear the sign bit (not ``abs``)."""
    return h & _POSITIVE


def _py_partition_for_key(key: bytes, num_partitions: int) -> int:
    return (murmur2(key) & _POSITIVE) % num_partitions


def _select() -> Callable[[bytes, int], int]:
    try:
        from confluent_kafka import murmur2 as c_murmur2
    except ImportError:  # older confluent-kafka (< 2.13) or none: the Python reference
        return _py_partition_for_key
    return c_murmur2


partition_for_key: Callable[[bytes, int], int] = _select()
"""``partition_for_key(key, n)``: the partition Kafka's default partitioner gives ``key``."""
