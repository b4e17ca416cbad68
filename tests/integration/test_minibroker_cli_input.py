"""`minibroker` given bad input: one line naming the value and exit 2, never a traceback."""

from __future__ import annotations

import glob
import os
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from minibroker.cli import main

SRC = Path(__file__).resolve().parents[2] / "src"
START = [sys.executable, "-m", "minibroker.cli", "start"]


@pytest.mark.parametrize(
    ("args", "named"),
    [
        (["start", "--control-port", "70000"], "--control-port: 70000 is not a TCP port number"),
        (["start", "--control-port", "-5"], "--control-port: -5 is not a TCP port number"),
        (["start", "--port", "70000"], "--port: 70000 is not a TCP port number"),
        (["start", "--log-level", "bogus"], "--log-level: invalid choice: 'BOGUS'"),
        (["start", "--config", "foo"], "--config expects KEY=VALUE, got 'foo'"),
        (["ctl", "--control-port", "0", "describe"], "--control-port: 0 is not a TCP port"),
        (["ctl", "create-topic", "t", "--config", "=1"], "--config expects KEY=VALUE, got '=1'"),
    ],
)
def test_a_bad_argument_exits_2_with_a_line_naming_it(
    args: list[str], named: str, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as exited:
        main(args)
    assert exited.value.code == 2
    last = capsys.readouterr().err.splitlines()[-1]
    assert last.startswith("minibroker"), last
    assert named in last


@pytest.fixture
def control_port() -> Iterator[int]:
    """The control port of a one-broker `minibroker start` in another process."""
    process = subprocess.Popen(
        [sys.executable, "-m", "minibroker.cli", "start", "--brokers", "1", "--control-port", "0"],
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
    )
    try:
        assert process.stdout is not None
        process.stdout.readline()  # the bootstrap servers
        control = process.stdout.readline().strip()
        assert control.startswith("control: http://127.0.0.1:"), control
        yield int(control.rsplit(":", 1)[1])
    finally:
        process.terminate()
        process.communicate(timeout=30)


@pytest.mark.parametrize("command", ["describe", "delete-topic"])
def test_ctl_sends_any_topic_name_it_is_given(
    control_port: int, command: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """A space or a '/' in the name reaches the cluster (which answers that there is no such
    topic) instead of breaking the request URL."""
    for name in ("a b", "a/b"):
        with pytest.raises(SystemExit) as exited:
            main(["ctl", "--control-port", str(control_port), command, name])
        assert isinstance(exited.value.code, str)
        assert exited.value.code.startswith("minibroker ctl: topic "), exited.value.code
        assert "does not exist" in exited.value.code
        assert repr(name) in exited.value.code, exited.value.code  # the name, unquoted
    main(["ctl", "--control-port", str(control_port), "create-topic", "a.b", "-p", "1"])
    main(["ctl", "--control-port", str(control_port), command, "a.b"])
    assert "a.b" in capsys.readouterr().out


def test_a_second_start_on_a_taken_control_port_names_it_before_starting_a_cluster(
    control_port: int,
) -> None:
    """Which port, which option and what to give instead, in one line; and no cluster comes
    up (no "cluster ... up" log line, no bootstrap servers printed) only to be torn down."""
    second = subprocess.run(
        [*START, "--brokers", "1", "--control-port", str(control_port)],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    other = control_port + 1 if control_port < 65535 else control_port - 1
    assert second.returncode == 2, second.stderr
    assert second.stdout == ""
    assert second.stderr.splitlines() == [
        f"minibroker: cannot listen on the control port 127.0.0.1:{control_port} "
        "(--control-port, default 9700): address already in use (another `minibroker start` "
        "running?); give this cluster its own: --control-port 0 (a free port, printed on the "
        f"second line) or another, e.g. --control-port {other} (and the same to "
        "`minibroker ctl`)"
    ]


def _python_3_10() -> str | None:
    """A Python 3.10 interpreter on this machine (on PATH, or one pyenv has), else None."""
    root = os.environ.get("PYENV_ROOT", os.path.expanduser("~/.pyenv"))
    candidates = [
        shutil.which("python3.10"),
        *sorted(glob.glob(f"{root}/versions/3.10*/bin/python3.10")),
    ]
    for candidate in candidates:
        if candidate is None:
            continue
        probe = subprocess.run(
            [candidate, "-c", "import sys; sys.exit(sys.version_info[:2] != (3, 10))"],
            capture_output=True,
            timeout=30,
            check=False,
        )
        if probe.returncode == 0:
            return candidate
    return None


def test_on_python_3_10_start_says_it_needs_3_11_and_ctl_still_works() -> None:
    python = _python_3_10()
    if python is None:
        pytest.skip("no Python 3.10 interpreter on this machine")
    env = {**os.environ, "PYTHONPATH": str(SRC)}

    def run(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [python, "-m", "minibroker.cli", *args],
            capture_output=True,
            text=True,
            env=env,
            timeout=60,
            check=False,
        )

    started = run("start", "--brokers", "1", "--control-port", "0")
    assert started.returncode == 2, started.stderr
    assert started.stderr.splitlines() == [
        "minibroker: minibroker start needs Python 3.11 or later (this is 3.10); "
        "run it with Python 3.11+"
    ]
    # ctl only speaks HTTP: on 3.10 it runs, and here finds nothing listening on port 1.
    driven = run("ctl", "--control-port", "1", "describe")
    assert driven.returncode == 1, driven.stderr
    assert driven.stderr.startswith("minibroker ctl: no cluster control endpoint on 127.0.0.1:1")
