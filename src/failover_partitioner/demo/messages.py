"""The demo's message values: who sent them and their sequence number, readable on consume-back.

Both producers write to the same topic, so they meet exactly the same degraded partitions; the
value says which producer sent a message. A run id keeps messages of an earlier run on the same
cluster from being counted.
"""

from __future__ import annotations

from typing import NamedTuple

VALUE_BYTES = 100


class MessageId(NamedTuple):
    run_id: str
    producer: str
    seq: int


def encode(run_id: str, producer: str, seq: int) -> bytes:
    """``b"<run> <producer> <seq> "`` padded with dots to ``VALUE_BYTES``."""
    for name, part in (("run_id", run_id), ("producer", producer)):
        if not part or any(c.isspace() for c in part):
            raise ValueError(f"{name}={part!r}: must be non-empty and contain no whitespace")
    if seq < 0:
        raise ValueError(f"seq={seq}: sequence numbers start at 0")
    head = f"{run_id} {producer} {seq} ".encode()
    return head + b"." * max(0, VALUE_BYTES - len(head))


def decode(value: bytes | None) -> MessageId | None:
    """The id in ``value``, or None for a value this demo did not write."""
    if not value:
        return None
    parts = value.split(b" ", 3)
    if len(parts) != 4 or not parts[2].isdigit():
        return None
    try:
        return MessageId(parts[0].decode(), parts[1].decode(), int(parts[2]))
    except UnicodeDecodeError:
        return None
