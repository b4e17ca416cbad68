"""The ``failover-mirror`` command line: bad flags and settings fail before any connection."""

from __future__ import annotations

import gc
import re
from pathlib import Path

import pytest

import failover_partitioner.mirror as mirror_pkg
from failover_partitioner.errors import FailoverError
from failover_partitioner.mirror import MirrorConfigError, MirrorError, tune_gc
from failover_partitioner.mirror._gc import GC_YOUNG_THRESHOLD
from failover_partitioner.mirror.cli import main

ROOT = Path(__file__).resolve().parents[2]


def test_console_script_points_at_main() -> None:
    pyproject = (ROOT / "pyproject.toml").read_text()
    assert 'failover-mirror = "failover_partitioner.mirror.cli:main"' in pyproject


def test_documented_names_exist() -> None:
    for name in mirror_pkg.__all__:
        assert hasattr(mirror_pkg, name), name
    assert issubclass(MirrorError, FailoverError)
    assert issubclass(MirrorConfigError, MirrorError)


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--target", "t:1", "--group", "g"], "no source cluster: pass --source"),
        (["--source", "s:1", "--group", "g"], "no target cluster: pass --target"),
        (["--source", "s:1", "--target", "t:1"], "no consumer group: pass --group"),
        (
            ["--source", "s:1", "--target", "t:1", "--group", "g", "--include", "("],
            r"--include '\(' is not a valid regular expression",
        ),
        (
            ["--source", "s:1", "--target", "t:1", "--group", "g", "--max-in-flight", "0"],
            "--max-in-flight must be a positive integer",
        ),
        (
            ["--source", "s:1", "--target", "t:1", "--group", "g", "--rename", "x.{name}"],
            r"must contain \{topic\}",
        ),
        (
            ["--source", "s:1", "--target", "t:1", "--group", "g", "--rename", "{topic:.6}"],
            r"--rename '\{topic:\.6\}': write \{topic\} without a format spec or conversion",
        ),
        (
            ["--source", "s:1", "--target", "t:1", "--group", "g", "--rename", "c.{topic!s}"],
            r"without a format spec or conversion",
        ),
        (
            ["--source", "s:1", "--target", "t:1", "--group", "g", "--commit-interval", "0"],
            r"--commit-interval must be a positive number of seconds, not 0\.0",
        ),
        (
            ["--source", "s:1", "--target", "t:1", "--group", "g", "--config-sync-interval=-5"],
            r"--config-sync-interval must be a positive number of seconds, not -5\.0",
        ),
    ],
)
def test_bad_flags_exit_2_naming_the_value(
    argv: list[str], message: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert err.startswith("failover-mirror: error: ")
    assert re.search(message, err), err


def test_properties_files_feed_the_options(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    consumer = tmp_path / "consumer.properties"
    consumer.write_text("bootstrap.servers=s:1\ngroup.id=g\nenable.auto.commit=true\n")
    producer = tmp_path / "producer.properties"
    producer.write_text("bootstrap.servers=t:1\n")
    argv = ["--consumer.config", str(consumer), "--producer.config", str(producer)]
    # The files supply cluster and group; the auto-commit setting is what is refused.
    assert main(argv) == 2
    assert "enable.auto.commit=true would commit offsets" in capsys.readouterr().err


def test_missing_properties_file(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    argv = ["--consumer.config", str(tmp_path / "absent.properties"), "--target", "t:1"]
    assert main(argv) == 2
    assert "cannot read --consumer.config properties file" in capsys.readouterr().err


@pytest.mark.parametrize("command", [[], ["translate"]])
def test_a_properties_file_that_is_not_utf8_is_refused_naming_flag_and_line(
    command: list[str], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # java.util.Properties files are ISO-8859-1; the mirror reads UTF-8 only (docs/mirror.md).
    latin1 = tmp_path / "producer.properties"
    latin1.write_bytes(b"client.id=x\n# caf\xe9\n")
    argv = [*command, "--source", "s:1", "--target", "t:1", "--group", "g"]
    assert main([*argv, "--producer.config", str(latin1)]) == 2
    err = capsys.readouterr().err
    assert err.startswith("failover-mirror")
    assert "error: --producer.config properties file" in err
    assert "is not UTF-8 text (line 2 has byte 0xe9)" in err
    assert "Traceback" not in err


@pytest.mark.parametrize("port", ["99999", "-1", "http"])
def test_a_metrics_port_out_of_range_exits_2_naming_the_flag(
    port: str, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as exit_info:
        main(["--source", "s:1", "--target", "t:1", "--group", "g", "--metrics-port", port])
    assert exit_info.value.code == 2
    assert "error: argument --metrics-port:" in capsys.readouterr().err


def test_help_lists_the_mirrormaker_flags(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exit_info:
        main(["--help"])
    assert exit_info.value.code == 0
    out = capsys.readouterr().out
    for flag in (
        "--source",
        "--target",
        "--group",
        "--consumer.config",
        "--producer.config",
        "--include",
        "--exclude",
        "--rename",
        "--max-in-flight",
        "--dead-letter-topic",
        "--no-provenance-headers",
        "--metrics-port",
        "--status-interval",
        "--json",
    ):
        assert flag in out


def test_a_setting_the_client_rejects_is_a_configuration_error(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    consumer = tmp_path / "consumer.properties"
    consumer.write_text("no.such.setting=1\n")
    argv = ["--source", "127.0.0.1:9", "--target", "127.0.0.1:9", "--group", "g"]
    argv += ["--rename", "c.{topic}", "--consumer.config", str(consumer)]
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert "source consumer config" in err
    assert "no.such.setting" in err


def test_translate_with_a_setting_the_client_rejects_exits_2_as_the_mirror_does(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    consumer = tmp_path / "consumer.properties"
    consumer.write_text("no.such.setting=1\n")
    argv = ["translate", "--source", "127.0.0.1:9", "--target", "127.0.0.1:9", "--group", "g"]
    assert main([*argv, "--consumer.config", str(consumer)]) == 2
    err = capsys.readouterr().err
    assert err.startswith("failover-mirror translate: error: source consumer config: ")
    assert "no.such.setting" in err


def test_tune_gc_freezes_startup_objects_and_raises_the_young_threshold() -> None:
    threshold = gc.get_threshold()
    try:
        tune_gc()
        assert gc.get_threshold()[0] == GC_YOUNG_THRESHOLD
        assert gc.get_threshold()[1:] == threshold[1:]
        assert gc.get_freeze_count() > 0
    finally:
        gc.unfreeze()
        gc.set_threshold(*threshold)
