"""The confluent-kafka clients under :class:`FailoverProducer`: the main one and the one that sends
the records of a refused batch alone (made on first need); polling and flushing them with a
delivery callback's re-entry guarded and Ctrl-C and SIGTERM held back; what a refused login
says.

**A signal while the client serves callbacks.** Python runs a signal's handler in whatever
Python code runs when the signal is handled; Ctrl-C's raises KeyboardInterrupt there, an
application's SIGTERM handler often SystemExit (``sys.exit()``). When that is the first line
of a callback the client is about to run, the callback does not run, and confluent-kafka
(2.16, on Python before 3.12) loses the exception: flush() raises a SystemError instead, and
the message whose report that callback was to take is gone without a word (a failure would
never be retried or reported). So while the client waits and serves callbacks in the main
thread, the Python handlers of SIGINT and SIGTERM are replaced by one of this module that
notes the signal, and once the client call returns (within 0.1 s: the producer's waits are
sliced so) they are put back and run for what came. A signal with no Python handler is left
alone (SIGTERM's default ends the process at once). ``poll(0)`` is guarded too: it serves the
clients at most every ``POLL_GAP_S``, and a hold costs four ``sigaction`` calls, about 1.4 us
through ``_signal`` (``signal``'s own functions add enum conversions: 14 us).
"""

from __future__ import annotations

import contextlib
import logging
import signal
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from types import FrameType
from typing import Any

import confluent_kafka

from failover_partitioner._config import companion_conf
from failover_partitioner.confluent._shared import login_refusal, purge_until_empty
from failover_partitioner.confluent._state import ProducerState
from failover_partitioner.errors import (
    AuthenticationFailed,
    FailoverError,
    MetadataUnavailable,
    ProducerClosed,
)

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
                    "error_cb": self._client_conf["error_cb"],
                },
            )
            solo = self._solo_client = confluent_kafka.Producer(conf)
            self._polled = (*self._polled, solo)
            logger.warning(
                "%s: a broker refused a whole batch (too large, or a bad record in it); its "
                "records are sent again one by one. If this repeats, set batch.size below the "
                "topic's max.message.bytes",
                self._name,
            )
        return solo

    def _on_client_error(self, err: confluent_kafka.KafkaError) -> None:
        told = login_refusal(err)
        if told is not None:
            what, settings = told
            if self._auth_error is None:
                logger.error(
                    "%s: %s; check %s (nothing is sent until they are right)",
                    what,
                    err.str(),
                    settings,
                )
            self._auth_error = f"{what} ({err.str()})"
        if self._user_error_cb is not None:
            self._user_error_cb(err)

    def _raise_if_refused(self, exc: MetadataUnavailable) -> None:
        """Raise AuthenticationFailed instead of ``exc`` when a refused login (credentials, or
        a TLS handshake: the brokers' certificate not trusted) is the cause."""
        self._poll_client(0)  # serves error_cb: a refused login is told only there
        if self._auth_error is not None:
            raise AuthenticationFailed(f"{exc}: {self._auth_error}") from exc

    def _others(self) -> tuple[Any, ...]:
        """The clients beside the main one that exist: the quiet one, the solo one."""
        return self._polled[1:]

    def _client_len(self) -> int:
        """Messages the clients hold (queued, in flight, or reports not yet served), at most."""
        held = min(len(self._client), self._queue_cap)
        quiet = self._quiet_client
        if quiet is not None:
            held += min(len(quiet), self._queue_cap)
        solo = self._solo_client
        return held if solo is None else held + len(solo)

    def _in_callback(self) -> bool:
        return self._local.depth > 0

    def _clients_busy_first(self) -> list[Any]:
        """Every client, the first one holding something first: a wait blocks on it."""
        return sorted(self._polled, key=lambda c: not len(c))  # stable

    def _poll_client(self, timeout: float) -> int:
        """Serve the clients' callbacks, waiting up to ``timeout`` on the busiest one."""
        return self._serve("poll", timeout)

    def _flush_client(self, timeout: float) -> int:
        """Flush the client holding messages for up to ``timeout`` (the others at once)."""
        return self._serve("flush", timeout)

    def _serve(self, call: str, timeout: float) -> int:
        """``poll`` or ``flush`` (``call``) every client, waiting up to ``timeout`` on the
        first one holding something, SIGINT and SIGTERM held meanwhile (the module doc)."""
        local = self._local
        local.depth += 1
        held = _hold_signals()
        try:
            others: Sequence[Any] = self._polled  # no wait: the order does not matter
            n = 0
            if timeout > 0:
                first, *others = self._clients_busy_first()
                n = int(getattr(first, call)(timeout))
            for other in others:
                n += int(getattr(other, call)(0))
            return n
        except SystemError as exc:
            if _LOST not in str(exc):
                raise
            raise KeyboardInterrupt(_LOST_INTERRUPT) from exc
        except RuntimeError as exc:
            if not self._closed:
                raise
            # close() in another thread closed the client under this call: what it held,
            # close() handed back or reported.
            raise ProducerClosed(f"{call}() while close() ran in another thread") from exc
        finally:
            local.depth -= 1
            if held is not None:
                held.release()

    def _purge_clients(self, client: confluent_kafka.Producer) -> None:
        """Take back what librdkafka still holds and serve the purge reports, so that every
        message ends up in the failed buffer, from where close() returns it
        (``purge_until_empty``)."""

        def purge() -> None:
            for each in (client, *self._others()):
                each.purge(in_queue=True, in_flight=True, blocking=True)

        def settle(wait_s: float) -> bool:
            until = time.monotonic() + wait_s
            while self._client_len() and time.monotonic() < until:
                self._poll_client(0.05)
            return not self._client_len()

        purge_until_empty(purge, settle)
        self._poll_client(0)

    def _keep_raised(self, exc: Exception) -> None:
        """Keep a callback's exception met while ``produce()`` made way, for the next
        ``poll()``, ``flush()`` or ``close()`` to raise (``_raise_kept``); a second one
        before then is logged."""
        if self._kept_raised is None:
            self._kept_raised = exc
        else:
            logger.error(
                "a callback raised again before its first exception was raised", exc_info=exc
            )

    def _raise_kept(self) -> None:
        exc = self._kept_raised
        if exc is not None:
            self._kept_raised = None
            raise exc

    def _end_quiet(self) -> bool:
        """A first attempt with a callback comes: from now on every first attempt goes to the
        main client, which reports deliveries. The quiet client's messages are let end first
        (delivered, or failed and handed to the retry path), so that none is overtaken by a
        later message to the same partition: from the start of this wait the quiet client
        takes nothing new (a first attempt without a callback meets a full queue, and waits
        as at the in-flight limit, until it is empty), else other threads producing without
        callbacks would keep it from ever emptying. False when it did not empty within
        ``produce_timeout_s`` (the caller's message is not accepted). Inside a callback
        nothing can be waited for: the mode ends at once, and the quiet client's last
        messages may still be under way (docs/guarantees.md)."""
        quiet = self._quiet
        if quiet is None:
            return True
        with self._whole_lock:
            if self._produce_raw == quiet.produce:
                self._produce_raw = self._after_quiet(quiet, self._produce_reported)
                self._produce_batch_raw = self._after_quiet(quiet, self._produce_batch_reported)
        if not self._in_callback():
            deadline = time.monotonic() + self._produce_timeout_s
            while len(quiet):
                if time.monotonic() >= deadline:
                    return False
                try:
                    self._poll_client(0.01)
                except Exception as exc:  # another message's callback (see _keep_raised)
                    self._keep_raised(exc)
        self._quiet_ended()
        return True

    def _quiet_ended(self) -> None:
        with self._whole_lock:
            if self._quiet is not None:
                self._quiet = None
                self._produce_raw = self._produce_reported
                self._produce_batch_raw = self._produce_batch_reported

    def _after_quiet(self, quiet: Any, send: Callable[..., Any]) -> Callable[..., Any]:
        """``send`` (the main client's), once the quiet client is empty; until then a full
        queue (BufferError: every path that sends waits for room then, and calls again). The
        first call that finds it empty ends the quiet mode. Inside a callback, where nothing
        can wait, at once."""

        def after_quiet(*args: Any, **kwargs: Any) -> Any:
            if not len(quiet):
                self._quiet_ended()
            elif not self._in_callback():
                raise BufferError("the quiet client's last messages are still under way")
            return send(*args, **kwargs)

        return after_quiet

    def _check_not_in_callback(self, what: str) -> None:
        if self._in_callback():
            raise FailoverError(
                f"{what}() was called from inside a delivery callback; confluent-kafka cannot "
                "re-enter poll/flush there (it aborts). Return from the callback instead"
            )


# What confluent-kafka says when it lost an exception raised in a callback (the module doc):
# with every callback of the producer's catching what it raises, a signal it was interrupted by.
_LOST = "returned NULL without setting an exception"
_LOST_INTERRUPT = "interrupted as the client started a callback, which did not run"


# The signals whose handlers may raise to stop the program: Ctrl-C's, and the one a service
# manager (systemd, Kubernetes) stops it with.
_HELD_SIGNALS: tuple[int, ...] = (signal.SIGINT, signal.SIGTERM)

# The C functions under signal.getsignal and signal.signal, which convert handlers to and from
# enums around them in Python (about 2 and 3 us a call against 0.05 and 0.4). A hold passes
# back what it was given (an int for SIG_DFL and SIG_IGN, which are never held).
try:
    import _signal as _c_signal  # type: ignore[import-not-found, unused-ignore]
except ImportError:  # an interpreter without CPython's module: the same calls, slower
    _c_signal = signal
_getsignal: Callable[[int], Any] = _c_signal.getsignal
_setsignal: Callable[[int, Any], Any] = _c_signal.signal


class _HeldSignals:
    """The Python handlers of :data:`_HELD_SIGNALS`, replaced for one client call by this,
    which notes each signal that comes (the module doc)."""

    __slots__ = ("_came", "_handlers")

    def __init__(self, handlers: dict[int, Callable[[int, FrameType | None], Any]]) -> None:
        self._handlers = handlers
        self._came: list[tuple[int, FrameType | None]] = []

    def __call__(self, signum: int, frame: FrameType | None) -> None:
        self._came.append((signum, frame))

    def release(self) -> None:
        """Put the handlers back, and run them for the signals that came, in order (Python's
        own SIGINT handler raises KeyboardInterrupt)."""
        for signum, handler in self._handlers.items():
            _setsignal(signum, handler)
        for signum, frame in self._came:
            self._handlers[signum](signum, frame)


def _hold_signals() -> _HeldSignals | None:
    """Hold SIGINT and SIGTERM back until ``release()``, those with a Python handler."""
    if threading.current_thread() is not threading.main_thread():
        return None  # a signal is handled in the main thread, never in this one's callbacks
    handlers: dict[int, Callable[[int, FrameType | None], Any]] = {}
    for signum in _HELD_SIGNALS:
        handler = _getsignal(signum)
        if callable(handler) and not isinstance(handler, _HeldSignals):
            handlers[signum] = handler
    if not handlers:
        return None
    held = _HeldSignals(handlers)
    for held_signum in handlers:
        _setsignal(held_signum, held)
    return held


@contextlib.contextmanager
def signals_held() -> Iterator[None]:
    """SIGINT and SIGTERM held back over a block that waits for nothing, then run for what
    came: a client made meanwhile is made whole, not cut short in confluent-kafka (which reads
    its settings in C and turns an exception raised by a handler there into a TypeError)."""
    held = _hold_signals()
    try:
        yield
    finally:
        if held is not None:
            held.release()


def close_all(clients: tuple[Any, ...]) -> Callable[[], None]:
    """A call closing ``clients``, in order."""

    def close() -> None:
        for each in clients:
            each.close()

    return close
