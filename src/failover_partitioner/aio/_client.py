"""The aiokafka producer underneath, answering with the broker's first reply.

aiokafka puts a batch that failed with a retriable error (NOT_ENOUGH_REPLICAS among them) back
on the *same* partition and tries again until the batch is ``request_timeout_ms`` old
(``SendProduceReqHandler._can_retry``): "messages are only partitioned once", and the failover
layer would hear of the refusal that late. Here every produce response, good or bad, resolves
the batch at once; the failover producer does the retrying itself, as a new message on a
partition it chooses again (DESIGN.md section 1, point 2). It is the asyncio counterpart of
running librdkafka with ``retries=0``.

aiokafka has no public switch for this, so the sender of each inner producer is given a
subclass that differs only in that decision. :func:`first_answer_supported` says whether the
installed aiokafka still has the hooks; without them the producer falls back to aiokafka's own
retries (bounded by ``request_timeout_ms``) and warns.
"""

from __future__ import annotations

import contextlib
import logging
import socket
import ssl
from collections.abc import Mapping
from typing import Any

from aiokafka import AIOKafkaProducer  # type: ignore[import-untyped,unused-ignore]  # no py.typed
from aiokafka.errors import (  # type: ignore[import-untyped,unused-ignore]  # no py.typed
    KafkaConnectionError,
)
from aiokafka.producer import sender as _sender  # type: ignore[import-untyped,unused-ignore]

from failover_partitioner.aio._settings import ANSWER_MARGIN_MS
from failover_partitioner.errors import AuthenticationFailed

__all__ = [
    "abandon_inner",
    "first_answer_supported",
    "login_refusal",
    "make_inner_producer",
    "start_inner_producer",
]

logger = logging.getLogger(__name__)


def first_answer_supported() -> bool:
    """True when the installed aiokafka has the hooks the first-answer sender overrides."""
    handler = getattr(_sender, "SendProduceReqHandler", None)
    sender = getattr(_sender, "Sender", None)
    return (
        handler is not None
        and sender is not None
        and callable(getattr(handler, "_can_retry", None))
        and callable(getattr(handler, "do", None))
        and callable(getattr(sender, "_send_produce_req", None))
    )


if first_answer_supported():

    class _FirstAnswerHandler(_sender.SendProduceReqHandler):  # type: ignore[misc]  # aiokafka is untyped
        """Never re-enqueue a failed batch: its messages go back to the failover producer."""

        def _can_retry(self, error: Any, batch: Any) -> bool:
            return False

    class _FirstAnswerSender(_sender.Sender):  # type: ignore[misc]  # aiokafka is untyped
        """aiokafka's sender with :class:`_FirstAnswerHandler` for produce requests."""

        async def _send_produce_req(self, node_id: int, batches: Mapping[Any, Any]) -> None:
            await _FirstAnswerHandler(self, batches).do(node_id)
            # What the base method does after its handler: the node and partitions are free.
            self._in_flight.remove(node_id)
            for tp in batches:
                self._muted_partitions.remove(tp)


def make_inner_producer(client_kwargs: Mapping[str, Any]) -> tuple[Any, bool]:
    """A new ``AIOKafkaProducer`` (not started) and whether it answers with the first reply.

    With the first-answer sender, the produce request asks the broker to hold a write at most
    ``request_timeout_ms``, while the client itself waits :data:`ANSWER_MARGIN_MS` longer (for
    a request's answer, and for a batch in its queue behind a held request). The broker's own
    answer, per partition (written, or REQUEST_TIMED_OUT for the one that held it), then
    arrives before the client gives up on the whole request: otherwise aiokafka's wait, which
    starts first, ends first, closes the connection and fails every batch of the request alike,
    and a batch that waited behind the held one expires in the client's queue at the same
    moment, so the partitions that held nothing would be struck too.

    Must be called inside the running event loop (aiokafka binds to it).
    """
    hold_ms = client_kwargs["request_timeout_ms"]
    if not first_answer_supported():
        logger.warning(_NO_HOOKS)
        return AIOKafkaProducer(**dict(client_kwargs)), False
    producer = AIOKafkaProducer(
        **{**client_kwargs, "request_timeout_ms": hold_ms + ANSWER_MARGIN_MS}
    )
    sender: Any = getattr(producer, "_sender", None)
    if type(sender) is not _sender.Sender or not hasattr(sender, "_request_timeout_ms"):
        logger.warning(_NO_HOOKS)
        return producer, False
    # Same state, one overridden decision: swapping the class keeps every attribute.
    sender.__class__ = _FirstAnswerSender
    sender._request_timeout_ms = hold_ms  # the produce request's own timeout
    return producer, True


_NO_HOOKS = (
    "this aiokafka version does not have the sender hooks the failover producer uses; "
    "a refused batch is retried on its partition for up to request_timeout_ms before it "
    "is rerouted"
)


def abandon_inner(inner: Any, name: str) -> None:
    """The inner producer of a closed event loop, shut as far as it can be without that loop:
    each connection's socket shut down, so the brokers see it end (asyncio closes the socket
    itself when its transport is collected: a ``ResourceWarning``), and the producer marked
    closed, so that it does not log itself unclosed when collected: the loop's end was
    reported already. aiokafka's ``stop()`` and ``close()`` need the loop."""
    try:
        for conn in list(inner.client._conns.values()):
            writer = getattr(conn, "_writer", None)
            sock = None if writer is None else writer.transport.get_extra_info("socket")
            if sock is not None:
                with contextlib.suppress(OSError):  # closed already, or never connected
                    sock.shutdown(socket.SHUT_RDWR)
        inner._closed = True
    except Exception:
        logger.exception("%s: the inner aiokafka producer could not be shut without its loop", name)


async def start_inner_producer(client_kwargs: Mapping[str, Any], name: str) -> tuple[Any, bool]:
    """:func:`make_inner_producer`, started (connected to the cluster).

    If it cannot start, it is stopped again; a cluster that refused the credentials raises
    :class:`AuthenticationFailed` saying so (``name``: the producer's, for the message),
    anything else its own error.
    """
    inner, first_answer = make_inner_producer(client_kwargs)
    try:
        await inner.start()
    except BaseException as exc:
        await inner.stop()
        if isinstance(exc, KafkaConnectionError):
            refusal = await login_refusal(client_kwargs)
            if refusal is not None:
                raise AuthenticationFailed(
                    f"{name}: no broker could be reached: {refusal}; nothing was sent"
                ) from None
        raise
    return inner, first_answer


# The keyword arguments of AIOKafkaProducer that aiokafka's create_conn takes too: how to reach
# and log in to a broker.
_CONNECTION_KEYS = (
    "client_id",
    "request_timeout_ms",
    "ssl_context",
    "security_protocol",
    "sasl_mechanism",
    "sasl_plain_username",
    "sasl_plain_password",
    "sasl_kerberos_service_name",
    "sasl_kerberos_domain_name",
    "sasl_oauth_token_provider",
)


async def login_refusal(client_kwargs: Mapping[str, Any]) -> str | None:
    """Why the brokers refused to let this client log in (its credentials, its SASL mechanism,
    or a TLS handshake: their certificate not trusted), with what to check; None if they did
    not.

    aiokafka's bootstrap logs each broker's refusal and then raises only "Unable to bootstrap";
    one more connection to the first bootstrap server, with the same settings, gets the reason.
    """
    protocol = str(client_kwargs.get("security_protocol", ""))
    if not protocol.startswith("SASL") and protocol != "SSL":
        return None
    from aiokafka import errors
    from aiokafka.conn import create_conn  # type: ignore[import-untyped,unused-ignore]

    servers = client_kwargs.get("bootstrap_servers", "")
    first = (servers.split(",") if isinstance(servers, str) else list(servers))[0].strip()
    host, _, port = first.rpartition(":")
    settings = {k: client_kwargs[k] for k in _CONNECTION_KEYS if k in client_kwargs}
    try:
        conn = await create_conn(host or first, int(port or 9092), **settings)
    except (errors.SaslAuthenticationFailed, errors.AuthenticationFailedError) as exc:
        return f"the cluster refused the credentials ({exc})"
    except errors.UnsupportedSaslMechanismError as exc:
        return (
            f"the cluster does not take SASL mechanism {client_kwargs.get('sasl_mechanism')!r} "
            f"({exc}); check sasl_mechanism"
        )
    except ssl.SSLError as exc:
        return (
            f"the TLS handshake with the cluster failed ({exc}); check ssl_context (the CA that "
            "signed the brokers' certificates)"
        )
    except Exception:  # unreachable, or refused for another reason: not a login refusal
        return None
    conn.close()
    return None
