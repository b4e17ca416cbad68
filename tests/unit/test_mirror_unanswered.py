"""A cluster that answers no request at startup is named, with its address and flag (the
clients themselves are in tests/integration/test_mirror_unreachable.py)."""

from __future__ import annotations

from concurrent.futures import Future

import pytest
from confluent_kafka import KafkaError, KafkaException

from failover_partitioner.mirror._clients import UNANSWERED, unanswered
from failover_partitioner.mirror._topics import ClusterIdsUnread, TopicSync


class _Described:
    def __init__(self, cluster_id: str) -> None:
        self.cluster_id = cluster_id


class Admin:
    """describe_cluster answered with an id, or failed with ``error``."""

    def __init__(self, cluster_id: str, error: KafkaError | None = None) -> None:
        self.cluster_id = cluster_id
        self.error = error

    def describe_cluster(self, request_timeout: float = -1) -> Future[_Described]:
        answer: Future[_Described] = Future()
        if self.error is not None:
            answer.set_exception(KafkaException(self.error))
        else:
            answer.set_result(_Described(self.cluster_id))
        return answer


TIMED_OUT = KafkaError(KafkaError._TIMED_OUT, "Failed while waiting for controller")


@pytest.mark.parametrize(
    ("failing", "first"),
    [(("source",), "source"), (("target",), "target"), (("source", "target"), "source")],
)
def test_cluster_ids_name_every_cluster_that_did_not_answer(
    failing: tuple[str, ...], first: str
) -> None:
    admins = {
        c: Admin(f"{c}-id", TIMED_OUT if c in failing else None) for c in ("source", "target")
    }
    sync = TopicSync(admins["source"], admins["target"], manage=True)
    with pytest.raises(ClusterIdsUnread) as caught:
        sync.cluster_ids()
    assert isinstance(caught.value, KafkaException)  # as before, for callers that catch it
    assert set(caught.value.unread) == set(failing)
    assert str(caught.value) == str(KafkaException(TIMED_OUT))
    assert caught.value.__cause__ is caught.value.unread[first]


def test_the_message_names_cluster_address_flag_wait_and_error() -> None:
    failed = KafkaException(
        KafkaError(KafkaError._TRANSPORT, "Failed to get metadata: Local: Broker transport failure")
    )
    assert KafkaError._TRANSPORT in UNANSWERED
    assert unanswered("target", "kafka-1:9092", "--target", 30.0, failed) == (
        "the target cluster at kafka-1:9092 (--target) did not answer in 30 s "
        "(_TRANSPORT (Failed to get metadata: Local: Broker transport failure))"
    )
