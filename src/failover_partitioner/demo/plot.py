"""The PNG: delivered messages per second for each producer, the fault window shaded."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path

from failover_partitioner.demo.cluster import DemoError

_COLOURS = {"plain": "tab:red", "failover": "tab:blue"}


def plot_deliveries(
    path: Path,
    *,
    series: Mapping[str, Sequence[int]],
    fault: tuple[float, float] | None,
    fault_label: str,
    produce_end_s: float,
    end_s: float,
    title: str,
) -> Path:
    """Write the plot to ``path`` (parent folders created) and return it; a file that cannot
    be written is a :class:`DemoError` naming it.

    ``series`` holds deliveries per one-second bin; ``end_s`` is when counting stopped, so the
    last, partial bin is drawn as a rate rather than as a misleading drop.
    """
    import matplotlib  # imported late: only the plot needs it, and it is the `demo` extra

    matplotlib.use("Agg")  # no display needed, and no GUI toolkit is touched
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(10, 4.5), dpi=100)
    try:
        for name, counts in series.items():
            xs, ys = _rates(counts, end_s)
            ax.plot(xs, ys, label=name, color=_COLOURS.get(name), linewidth=1.6)
        if fault is not None:
            ax.axvspan(fault[0], fault[1], color="tab:orange", alpha=0.18, label=fault_label)
        ax.axvline(produce_end_s, color="grey", linestyle=":", linewidth=1, label="producing stops")
        ax.set_xlabel("seconds since start")
        ax.set_ylabel("messages delivered per second")
        ax.set_title(title)
        ax.set_ylim(bottom=0)
        ax.set_xlim(left=0)
        ax.grid(alpha=0.3)
        ax.legend(loc="upper left", fontsize="small")
        fig.tight_layout()
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            fig.savefig(path, format="png")
        except OSError as e:
            raise DemoError(
                f"cannot write the plot to {path}: {e.strerror or e}; "
                "give --plot a file in a writable folder, or --no-plot"
            ) from e
    finally:
        plt.close(fig)
    return path


def _rates(counts: Sequence[int], end_s: float) -> tuple[list[float], list[float]]:
    """Deliveries per second at each bin's middle; a last bin under 0.25 s is left out."""
    xs: list[float] = []
    ys: list[float] = []
    for i, n in enumerate(counts):
        width = min(1.0, end_s - i)
        if width < 0.25:
            break
        xs.append(i + width / 2)
        ys.append(n / width)
    return xs, ys
