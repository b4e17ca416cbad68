"""Test support: librdkafka's own mock cluster, driven from Python through ctypes.

confluent-kafka ships librdkafka with its ``rd_kafka_mock_*`` functions exported but offers no
Python API for them. :class:`MockCluster` starts a mock cluster of N brokers on 127.0.0.1 and
exposes the fault injection this project needs: per-broker request errors (for instance every
Produce answered with NOT_ENOUGH_REPLICAS while the metadata still reports a full ISR), broker
down/up, a broker that hangs (answers delayed) and leader moves, and the requests each broker
received.

The mock has no replication, no ISR and no min-ISR enforcement (its metadata reports
ISR == replicas), no CreateTopics and no DescribeConfigs: use it for speed and for failures
injected by hand, and minibroker for Kafka's replication semantics. Its API is declared
experimental by librdkafka (``rdkafka_mock.h``). Linux and other platforms where variadic
integer arguments pass like fixed ones (the error push is variadic).
"""

from __future__ import annotations

import ctypes
import glob
import os
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

__all__ = ["METADATA_API_KEY", "PRODUCE_API_KEY", "MockCluster"]

PRODUCE_API_KEY = 0
METADATA_API_KEY = 3


def _load_librdkafka() -> ctypes.CDLL:
    import confluent_kafka

    base = os.path.dirname(os.path.dirname(os.path.abspath(confluent_kafka.__file__)))
    patterns = [
        os.path.join(base, "confluent_kafka.libs", "librdkafka*.so*"),
        os.path.join(os.path.dirname(confluent_kafka.__file__), ".dylibs", "librdkafka*.dylib"),
    ]
    for pattern in patterns:
        found = sorted(glob.glob(pattern))
        if found:
            return ctypes.CDLL(found[0])
    raise RuntimeError(
        "librdkafka with the mock cluster API was not found next to confluent_kafka "
        f"(looked for {patterns}); MockCluster needs confluent-kafka's binary wheel"
    )


class _Lib:
    def __init__(self) -> None:
        lib = _load_librdkafka()
        vp, cp, i, sz = ctypes.c_void_p, ctypes.c_char_p, ctypes.c_int, ctypes.c_size_t
        lib.rd_kafka_conf_new.restype = vp
        lib.rd_kafka_conf_set.argtypes = [vp, cp, cp, cp, sz]
        lib.rd_kafka_conf_set.restype = i
        lib.rd_kafka_new.argtypes = [i, vp, cp, sz]
        lib.rd_kafka_new.restype = vp
        lib.rd_kafka_destroy.argtypes = [vp]
        lib.rd_kafka_mock_cluster_new.argtypes = [vp, i]
        lib.rd_kafka_mock_cluster_new.restype = vp
        lib.rd_kafka_mock_cluster_destroy.argtypes = [vp]
        lib.rd_kafka_mock_cluster_bootstraps.argtypes = [vp]
        lib.rd_kafka_mock_cluster_bootstraps.restype = cp
        lib.rd_kafka_mock_topic_create.argtypes = [vp, cp, i, i]
        lib.rd_kafka_mock_topic_create.restype = i
        lib.rd_kafka_mock_broker_error_stack_cnt.argtypes = [
            vp,
            ctypes.c_int32,
            ctypes.c_int16,
            ctypes.POINTER(sz),
        ]
        lib.rd_kafka_mock_broker_error_stack_cnt.restype = i
        # Variadic: (mcluster, broker_id, ApiKey, cnt, err1, rtt1, ...); argtypes stay unset.
        lib.rd_kafka_mock_broker_push_request_error_rtts.restype = i
        lib.rd_kafka_mock_clear_request_errors.argtypes = [vp, ctypes.c_int16]
        lib.rd_kafka_mock_partition_set_leader.argtypes = [vp, cp, ctypes.c_int32, ctypes.c_int32]
        lib.rd_kafka_mock_partition_set_leader.restype = i
        lib.rd_kafka_mock_broker_set_down.argtypes = [vp, ctypes.c_int32]
        lib.rd_kafka_mock_broker_set_down.restype = i
        lib.rd_kafka_mock_broker_set_up.argtypes = [vp, ctypes.c_int32]
        lib.rd_kafka_mock_broker_set_up.restype = i
        lib.rd_kafka_mock_broker_set_rtt.argtypes = [vp, ctypes.c_int32, i]
        lib.rd_kafka_mock_broker_set_rtt.restype = i
        lib.rd_kafka_mock_start_request_tracking.argtypes = [vp]
        lib.rd_kafka_mock_get_requests.argtypes = [vp, ctypes.POINTER(sz)]
        lib.rd_kafka_mock_get_requests.restype = ctypes.POINTER(vp)
        lib.rd_kafka_mock_request_id.argtypes = [vp]
        lib.rd_kafka_mock_request_id.restype = ctypes.c_int32
        lib.rd_kafka_mock_request_api_key.argtypes = [vp]
        lib.rd_kafka_mock_request_api_key.restype = ctypes.c_int16
        lib.rd_kafka_mock_request_destroy_array.argtypes = [ctypes.POINTER(vp), sz]
        self.lib = lib


_lib: _Lib | None = None
_lib_lock = threading.Lock()


def _get_lib() -> ctypes.CDLL:
    global _lib
    with _lib_lock:
        if _lib is None:
            _lib = _Lib()
        return _lib.lib


class MockCluster:
    """A librdkafka mock cluster of ``brokers`` brokers (ids 1..N) on 127.0.0.1.

    After :meth:`close` (a second one does nothing) every method raises RuntimeError: the mock
    handle is freed then, and a call through it would read freed memory. Calls are serialized
    with :meth:`close` so that none can run into the destroyed handle.
    """

    def __init__(self, brokers: int = 3) -> None:
        if isinstance(brokers, bool) or not isinstance(brokers, int) or brokers < 1:
            raise ValueError(f"brokers must be an int >= 1, got {brokers!r}")
        lib = _get_lib()
        self._lib = lib
        conf = lib.rd_kafka_conf_new()
        errstr = ctypes.create_string_buffer(512)
        # Quiet: the mock handle's own log lines would go to stderr.
        lib.rd_kafka_conf_set(conf, b"log_level", b"0", errstr, 512)
        self._rk = lib.rd_kafka_new(0, conf, errstr, 512)
        if not self._rk:
            raise RuntimeError(f"rd_kafka_new failed: {errstr.value.decode()}")
        self._mc = lib.rd_kafka_mock_cluster_new(self._rk, brokers)
        if not self._mc:
            lib.rd_kafka_destroy(self._rk)
            raise RuntimeError("rd_kafka_mock_cluster_new failed")
        self.brokers = brokers
        self.bootstrap_servers: str = lib.rd_kafka_mock_cluster_bootstraps(self._mc).decode()
        self._closed = False
        # Held around every call into the mock and around its destruction.
        self._lock = threading.RLock()
        # failing_produce blocks still running: close() stops their threads first.
        self._top_ups: set[tuple[threading.Event, threading.Thread]] = set()

    def _call(self, method: str, function: str, *args: Any) -> Any:
        """``function(mock cluster, *args)`` from librdkafka, refused once closed."""
        with self._lock:
            self._refuse_if_closed(method)
            # A c_void_p, not the bare int: the variadic error push has no argtypes to convert.
            return getattr(self._lib, function)(ctypes.c_void_p(self._mc), *args)

    def _refuse_if_closed(self, method: str) -> None:
        if self._closed:
            raise RuntimeError(
                f"MockCluster.{method}() called after close(): the mock cluster is gone; "
                "create a new MockCluster"
            )

    def create_topic(self, name: str, partitions: int, replication_factor: int = 3) -> None:
        err = self._call(
            "create_topic",
            "rd_kafka_mock_topic_create",
            name.encode(),
            partitions,
            min(replication_factor, self.brokers),
        )
        if err:
            raise RuntimeError(f"mock topic_create({name!r}) failed with error {err}")

    def push_broker_errors(
        self, broker_id: int, error_code: int, count: int, *, api_key: int = PRODUCE_API_KEY
    ) -> None:
        """The next ``count`` requests of ``api_key`` to ``broker_id`` fail with the error."""
        chunk = 64
        while count > 0:
            n = min(chunk, count)
            args: list[object] = []
            for _ in range(n):
                args += [ctypes.c_int(error_code), ctypes.c_int(0)]
            err = self._call(
                "push_broker_errors",
                "rd_kafka_mock_broker_push_request_error_rtts",
                ctypes.c_int32(broker_id),
                ctypes.c_int16(api_key),
                ctypes.c_size_t(n),
                *args,
            )
            if err:
                raise RuntimeError(f"mock push_request_error_rtts failed with error {err}")
            count -= n

    def broker_errors_left(self, broker_id: int, *, api_key: int = PRODUCE_API_KEY) -> int:
        cnt = ctypes.c_size_t(0)
        err = self._call(
            "broker_errors_left",
            "rd_kafka_mock_broker_error_stack_cnt",
            broker_id,
            api_key,
            ctypes.byref(cnt),
        )
        if err:
            raise RuntimeError(f"mock broker_error_stack_cnt failed with error {err}")
        return int(cnt.value)

    def clear_errors(self, api_key: int = PRODUCE_API_KEY) -> None:
        self._call("clear_errors", "rd_kafka_mock_clear_request_errors", api_key)

    @contextmanager
    def failing_produce(
        self, broker_id: int, error_code: int, *, keep: int = 200, check_s: float = 0.005
    ) -> Iterator[None]:
        """Every Produce request to ``broker_id`` fails with ``error_code`` inside the block.

        The mock pops one queued error per request, so a thread keeps at least ``keep``
        queued. A broker's queue cannot be cleared: after the block the remaining errors (at
        most ``keep``) still answer that many requests.
        """
        self._refuse_if_closed("failing_produce")
        stop = threading.Event()
        self.push_broker_errors(broker_id, error_code, keep)

        def top_up() -> None:
            while not stop.wait(check_s):
                try:
                    left = self.broker_errors_left(broker_id)
                    if left < keep:
                        self.push_broker_errors(broker_id, error_code, keep - left)
                except RuntimeError:
                    if self._closed:  # a close() from another thread won the race: done
                        return
                    raise

        thread = threading.Thread(target=top_up, name=f"mock-fail-{broker_id}", daemon=True)
        entry = (stop, thread)
        with self._lock:
            self._top_ups.add(entry)
        thread.start()
        try:
            yield
        finally:
            stop.set()
            thread.join()
            with self._lock:
                self._top_ups.discard(entry)

    def set_leader(self, topic: str, partition: int, broker_id: int) -> None:
        err = self._call(
            "set_leader",
            "rd_kafka_mock_partition_set_leader",
            topic.encode(),
            partition,
            broker_id,
        )
        if err:
            raise RuntimeError(f"mock partition_set_leader failed with error {err}")

    def broker_down(self, broker_id: int) -> None:
        self._call("broker_down", "rd_kafka_mock_broker_set_down", broker_id)

    def broker_up(self, broker_id: int) -> None:
        self._call("broker_up", "rd_kafka_mock_broker_set_up", broker_id)

    def delay_broker(self, broker_id: int, rtt_ms: int) -> None:
        """Every answer of ``broker_id`` comes ``rtt_ms`` late (0: on time again). A long delay
        is a hung broker: its connections stay open and nothing is answered, as with a
        SIGSTOPped one (librdkafka's client only notices when a request times out)."""
        err = self._call("delay_broker", "rd_kafka_mock_broker_set_rtt", broker_id, rtt_ms)
        if err:
            raise RuntimeError(f"mock broker_set_rtt failed with error {err}")

    def track_requests(self) -> None:
        """Record every request the brokers receive from now on (see :meth:`requests`)."""
        self._call("track_requests", "rd_kafka_mock_start_request_tracking")

    def requests(self) -> list[tuple[int, int]]:
        """(broker id, ApiKey) of each request received since :meth:`track_requests`."""
        cnt = ctypes.c_size_t(0)
        array = self._call("requests", "rd_kafka_mock_get_requests", ctypes.byref(cnt))
        # The array is ours (copies), valid after a close() too, until destroyed here.
        try:
            lib = self._lib
            return [
                (
                    int(lib.rd_kafka_mock_request_id(array[n])),
                    int(lib.rd_kafka_mock_request_api_key(array[n])),
                )
                for n in range(cnt.value)
            ]
        finally:
            if array:
                self._lib.rd_kafka_mock_request_destroy_array(array, cnt)

    def close(self) -> None:
        """Destroy the mock cluster; a second call does nothing. A ``failing_produce`` block
        still open is stopped first (its thread would call into the destroyed mock)."""
        with self._lock:
            top_ups = list(self._top_ups)
        for stop, thread in top_ups:
            stop.set()
            thread.join()
        with self._lock:
            if self._closed:
                return
            self._closed = True
            self._lib.rd_kafka_mock_cluster_destroy(self._mc)
            self._lib.rd_kafka_destroy(self._rk)

    def __enter__(self) -> MockCluster:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
