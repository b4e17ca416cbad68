"""Refused logins: a cluster that refuses the mirror's credentials stops it.

librdkafka tells of a refused login (SASL authentication failed: a wrong password, an unknown
user) only through a client's ``error_cb``, as ``_AUTHENTICATION``, and then tries again for
ever; meanwhile each request fails as if the brokers were down (``_TRANSPORT``, ``_TIMED_OUT``:
"Failed to get metadata"), and a consumer that never subscribed returns nothing from
``consume()``. The Java clients throw a ``SaslAuthenticationException`` instead, and MirrorMaker
2 fails its task. So each client of a cluster hands its errors to that cluster's
:class:`Logins`, and a request to the cluster that fails stops the mirror when the cluster
refused the login on every broker tried: a refusal and then ``_ALL_BROKERS_DOWN`` from its
clients, with no request answered since. A failure without a refusal (a broker restarting, a
network cut) is waited out as before, and so is one broker refusing while another answers (a
broker that has not yet learnt a new user's credentials): a request that succeeds clears what
was noted, and so does a consumer fetch during which nothing was told (a fetch during which a
refusal was told proves nothing: the refusal may have come after it). A TLS handshake that
fails (the brokers' certificate not signed by the CA in ``ssl.ca.location``) is told and
retried the same way, and counts as a refused login.

The first request to both clusters (their ids) waits up to its timeout (15 s); while it waits,
:meth:`Logins.check` stops the mirror once every broker tried has refused for
``REFUSED_FOR_S``, as long as ``FailoverProducer`` waits before it raises
``AuthenticationFailed`` (a broker that learns a new user's credentials meanwhile answers
the request, which then succeeds).
"""

from __future__ import annotations

import logging
import time
import weakref
from collections.abc import Callable
from typing import Any

from confluent_kafka import KafkaError

from failover_partitioner.confluent import _shared

from ._clients import describe
from ._errors import MirrorError

__all__ = ["LOGIN_REFUSALS", "REFUSED_FOR_S", "Logins", "refused_login"]

logger = logging.getLogger(__name__)

# What librdkafka reports for a login the cluster refused (see confluent._shared).
LOGIN_REFUSALS = frozenset(_shared.LOGIN_REFUSALS)
# How long every broker may refuse, with no request answered, before a waiting request stops
# the mirror: FailoverProducer's metadata_timeout_s, the wait before AuthenticationFailed.
REFUSED_FOR_S = 5.0


def refused_login(cluster: str, settings: str, err: KafkaError) -> str:
    """The error of a mirror whose ``cluster`` ("source" or "target") refused the login with
    the settings of ``settings`` (the flag of the file they came from). librdkafka's text
    names the broker and the mechanism, never the password."""
    told = _shared.login_refusal(err, f"the {cluster} cluster")
    assert told is not None, f"{err} is no refused login"
    what, check = told
    return (
        f"{what}, with the settings of {settings} ({describe(err)}): check {check} in it. "
        "Stopped; nothing undelivered was committed. Fix them and restart: the mirror resumes "
        "where it committed"
    )


class Logins:
    """The refused logins told by the clients of one cluster (their ``error_cb``), since a
    request to it last succeeded. ``cluster`` and ``settings`` name it in the error."""

    def __init__(
        self, cluster: str, settings: str, clock: Callable[[], float] = time.monotonic
    ) -> None:
        self._cluster = cluster
        self._settings = settings
        self._clock = clock
        self._refused: KafkaError | None = None
        self._all_down_at: float | None = None  # (when every broker was down, after a refusal)
        self._serve: list[weakref.ref[Any]] = []
        self.told = 0
        """Refusals and all-brokers-down told so far (see :meth:`fetched`)."""

    def error_cb(self, err: KafkaError) -> None:
        """A client's ``error_cb``: called in the thread that polls the client."""
        code = err.code()
        if code in LOGIN_REFUSALS:
            self._refused = err
            self.told += 1
        elif code == KafkaError._ALL_BROKERS_DOWN:
            self.told += 1
            # librdkafka fails a broker (the refusal) before it counts it down.
            if self._refused is not None and self._all_down_at is None:
                self._all_down_at = self._clock()
        logger.debug("%s client: %s", self._cluster, describe(err))

    def served_by(self, client: object) -> None:
        """``client`` (an admin client, whose callbacks only its ``poll`` serves) tells its
        errors here; they are served before each look at them. Held weakly: the client holds
        ``error_cb``, and so this."""
        if hasattr(client, "poll"):
            self._serve.append(weakref.ref(client))

    def succeeded(self) -> None:
        """A request to the cluster was answered: the credentials are good somewhere. What the
        admin clients told before it is served first, so that it is not taken later for news."""
        self._serve_clients()
        self._clear()

    def fetched(self, told_before: int) -> None:
        """The cluster's consumer returned messages from a ``consume()`` begun when ``told``
        was ``told_before``. Its ``error_cb`` is served inside that call, so a refusal told
        during it may have come after the fetch (credentials revoked or rotated while the
        mirror runs; librdkafka tells all brokers down only once): only a fetch during which
        nothing was told makes what was told before old news."""
        if self.told == told_before:
            self._clear()

    def _clear(self) -> None:
        self._refused = None
        self._all_down_at = None

    def failed(self) -> None:
        """A request to the cluster failed: raise :class:`MirrorError` when the cluster refused
        the login on every broker tried, else return (the caller goes on as before)."""
        self._stop_if_refused(0.0)

    def check(self) -> None:
        """A request to the cluster is still waiting: raise :class:`MirrorError` when the
        cluster has refused the login on every broker tried for ``REFUSED_FOR_S``."""
        self._stop_if_refused(REFUSED_FOR_S)

    def _serve_clients(self) -> None:
        for served in self._serve:
            if (client := served()) is not None:
                client.poll(0)

    def _stop_if_refused(self, for_s: float) -> None:
        self._serve_clients()
        since = self._all_down_at
        if self._refused is not None and since is not None and self._clock() - since >= for_s:
            raise MirrorError(refused_login(self._cluster, self._settings, self._refused))
