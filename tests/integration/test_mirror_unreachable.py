"""A cluster that does not answer at startup (a mistyped --source or --target, brokers not
running): the error names the cluster, its address and the flag that gave it, and what to do.

It used to be librdkafka's words alone, after 30 s: ``failover-mirror: error:
KafkaError{code=_TRANSPORT,val=-195,str="Failed to get metadata: Local: Broker transport
failure"}``, the same for ``failover-mirror translate``. Nothing listens on the ports used here
(bound, then closed), so each request fails at once and is tried again until its timeout.
"""

from __future__ import annotations

import logging
import socket
import threading
import time
from pathlib import Path

import pytest

from failover_partitioner.mirror import (
    Mirror,
    MirrorError,
    MirrorOptions,
    TopicRouter,
    TranslateError,
    cli,
    load_properties,
    translate,
)


def unused_addresses(count: int) -> list[str]:
    """``count`` different 127.0.0.1 addresses where nothing listens."""
    sockets = [socket.socket() for _ in range(count)]
    try:
        for s in sockets:
            s.bind(("127.0.0.1", 0))
        return [f"127.0.0.1:{s.getsockname()[1]}" for s in sockets]
    finally:
        for s in sockets:
            s.close()


def test_the_mirror_names_the_clusters_that_do_not_answer_their_address_and_flag(
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    caplog: pytest.LogCaptureFixture,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(cli, "tune_gc", lambda: None)  # leave this process's gc alone
    source, target, other_target = unused_addresses(3)
    # The target given by bootstrap.servers in --producer.config instead, run alongside
    # through the API (each run waits 30 s; the command line's signal handlers want the
    # main thread).
    props = tmp_path / "producer.properties"
    props.write_text(f"bootstrap.servers={other_target}\n")
    options = MirrorOptions(
        source_bootstrap=source,
        group_id="g2",
        producer_config=load_properties(props, flag="--producer.config"),
        status_interval_s=60,
    )
    raised: list[BaseException] = []

    def run_api() -> None:
        try:
            Mirror(options).run()
        except BaseException as exc:
            raised.append(exc)

    thread = threading.Thread(target=run_api, daemon=True)
    caplog.set_level(logging.WARNING, logger="failover_partitioner.mirror")
    started = time.monotonic()
    thread.start()
    code = cli.main(
        ["--source", source, "--target", target, "--group", "g", "--status-interval", "0"]
    )
    elapsed = time.monotonic() - started
    thread.join(20)
    assert not thread.is_alive()

    err = capsys.readouterr().err
    assert code == 1, err
    line = next(x for x in err.splitlines() if x.startswith("failover-mirror: error:"))
    assert f"the target cluster at {target} (--target) did not answer in 30 s" in line
    assert f"nor did the source cluster at {source} (--source)" in line
    assert "check the address (host and port) and that the brokers run" in line
    assert "the mirror waits 30 s for the target at startup" in line
    assert "Nothing was mirrored or committed" in line
    assert "KafkaError{" not in line
    assert elapsed < 40, f"stopped after {elapsed:.1f} s"
    # The first request (the clusters' ids) warned of each, naming it, and waited on.
    warned = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert any(
        f"the source cluster at {source} (--source) did not answer in 15 s" in w for w in warned
    ), warned

    assert len(raised) == 1, raised
    assert isinstance(raised[0], MirrorError), raised
    told = str(raised[0])
    assert (
        f"the target cluster at {other_target} (bootstrap.servers in --producer.config) "
        "did not answer" in told
    ), told
    assert f"nor did the source cluster at {source} (--source)" in told


def test_translate_names_the_source_that_does_not_answer_its_address_and_flag() -> None:
    source, target = unused_addresses(2)
    started = time.monotonic()
    with pytest.raises(TranslateError) as caught:
        translate(
            source_config={"bootstrap.servers": source},
            target_config={"bootstrap.servers": target},
            group="g",
            router=TopicRouter(include=".*", exclude=None, rename="{topic}"),
            offset_syncs_topic="failover-mirror.offset-syncs",
            timeout_s=2,
        )
    assert time.monotonic() - started < 15
    told = str(caught.value)
    assert f"the source cluster at {source} (--source) did not answer in 2 s" in told, told
    assert "check the address (host and port) and that the brokers run" in told
    assert "translate waits 2 s for each cluster. Nothing was committed" in told
