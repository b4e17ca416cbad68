"""The demo's PNG: written where asked, a real PNG, folders created."""

from __future__ import annotations

import struct
from pathlib import Path

import pytest

from failover_partitioner.demo.cluster import DemoError
from failover_partitioner.demo.plot import _rates, plot_deliveries


def png_size(path: Path) -> tuple[int, int]:
    data = path.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n", "not a PNG signature"
    assert data[12:16] == b"IHDR"
    width, height = struct.unpack(">II", data[16:24])
    return width, height


def test_plot_is_a_png_with_both_series_and_the_fault(tmp_path: Path) -> None:
    out = tmp_path / "nested" / "demo.png"
    written = plot_deliveries(
        out,
        series={"plain": [300] * 10 + [120] * 10 + [900, 300], "failover": [300] * 22},
        fault=(10.0, 20.0),
        fault_label="fault",
        produce_end_s=22.0,
        end_s=22.1,
        title="test",
    )
    assert written == out
    assert png_size(out) == (1000, 450)


def test_plot_without_a_fault(tmp_path: Path) -> None:
    out = plot_deliveries(
        tmp_path / "p.png",
        series={"plain": [1, 2, 3]},
        fault=None,
        fault_label="",
        produce_end_s=3.0,
        end_s=3.0,
        title="no fault",
    )
    assert png_size(out)[0] > 0


def test_a_partial_last_bin_is_drawn_as_a_rate_or_left_out() -> None:
    assert _rates([300, 300, 150], 2.5) == ([0.5, 1.5, 2.25], [300.0, 300.0, 300.0])
    assert _rates([300, 300, 2], 2.1) == ([0.5, 1.5], [300.0, 300.0])


def test_a_plot_that_cannot_be_written_is_a_demo_error_naming_it(tmp_path: Path) -> None:
    a_file = tmp_path / "a-file"
    a_file.write_text("")
    with pytest.raises(
        DemoError, match=f"cannot write the plot to {a_file / 'p.png'}: .*--no-plot"
    ):
        plot_deliveries(
            a_file / "p.png",
            series={"plain": [1]},
            fault=None,
            fault_label="",
            produce_end_s=1.0,
            end_s=1.0,
            title="t",
        )
