"""The confluent-kafka clients under :class:`FailoverProducer`: the main one and the one that sends
the records of a refused batch alone (made on first need); polling and flushing them with a
delivery callback's re-entry guarded; what a refused login says."""

from __future__ import annotations

import logging
from typing import Any

import confluent_kafka

from failover_partitioner._config import companion_conf
from failover_partitioner.confluent._state import ProducerState
from failover_partitioner.errors import AuthenticationFailed, FailoverError, MetadataUnavailable

logger = logging.getLogger("failover_partitioner.confluent.producer")  # the producer's own


class Clients(ProducerState):
    """The confluent-kafka clients underneath, and the calls into them."""

    def _solo(self) -> Any:
        """The client that sends each record in a batch of its own (made on first need)."""
        solo = self._solo_client
        if solo is None:
            conf = companion_conf(
                self._client_conf,
                "solo",
                # A refused login is told only through error_cb: this client's too.
                settings={
                    "batch.num.messages": 1,
                    "linger.ms": 0,
                    "error_cb": self._on_client_error,
                },
            )
            solo = self._solo_client = confluent_kafka.Producer(conf)
            logger.warning(
                "%s: a broker refused a whole batch (too large, or a bad record in it); its "
                "records are sent again one by one. If this repeats, set batch.size below the "
                "topic's max.message.bytes",
                self._name,
            )
        return solo

    def _on_client_error(self, err: confluent_kafka.KafkaError) -> None:
        if err.code() == confluent_kafka.KafkaError._AUTHENTICATION:
            if self._auth_error is None:
                logger.error(
                    "the cluster refused this producer's credentials: %s; check sasl.username, "
                    "sasl.password and sasl.mechanisms (nothing is sent until they are right)",
                    err.str(),
                )
            self._auth_error = err.str()
        if self._user_error_cb is not None:
            self._user_error_cb(err)

    def _raise_if_refused(self, exc: MetadataUnavailable) -> None:
        """Raise AuthenticationFailed instead of ``exc`` when a refused login is the cause."""
        self._client.poll(0)  # serves error_cb: a refused login is told only there
        if self._auth_error is not None:
            raise AuthenticationFailed(
                f"{exc}: the cluster refused the credentials ({self._auth_error})"
            ) from exc

    def _client_len(self) -> int:
        """Messages the clients hold (queued, in flight, or reports not yet served), at most."""
        solo = self._solo_client
        held = min(len(self._client), self._queue_cap)
        return held if solo is None else held + len(solo)

    def _in_callback(self) -> bool:
        return bool(getattr(self._local, "depth", 0))

    def _poll_client(self, timeout: float) -> int:
        local = self._local
        local.depth = getattr(local, "depth", 0) + 1
        try:
            served = int(self._client.poll(timeout))
            if self._solo_client is not None:
                served += int(self._solo_client.poll(0))
            return served
        finally:
            local.depth -= 1

    def _flush_client(self, timeout: float) -> int:
        local = self._local
        local.depth = getattr(local, "depth", 0) + 1
        try:
            left = int(self._client.flush(timeout))
            if self._solo_client is not None:
                left += int(self._solo_client.flush(0))
            return left
        finally:
            local.depth -= 1

    def _check_not_in_callback(self, what: str) -> None:
        if self._in_callback():
            raise FailoverError(
                f"{what}() was called from inside a delivery callback; confluent-kafka cannot "
                "re-enter poll/flush there (it aborts). Return from the callback instead"
            )
