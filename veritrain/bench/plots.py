"""The comm benchmark's figures (matplotlib, written as PNG without a display)."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

LABELS = {
    "allreduce": "AllReduce (every inner step)",
    "diloco": "DiLoCo (blocking, fp32)",
    "dilocox": "DiLoCoX (overlap + compression)",
    "dilocox-blocking": "DiLoCoX without overlap",
}
SHORT = {
    "allreduce": "AllReduce",
    "diloco": "DiLoCo\n(blocking, fp32)",
    "dilocox": "DiLoCoX",
    "dilocox-blocking": "DiLoCoX\nwithout overlap",
}
COLOURS = {
    "allreduce": "#444444",
    "diloco": "#1f77b4",
    "dilocox": "#d62728",
    "dilocox-blocking": "#ff9896",
}


def write_plots(result: Mapping[str, Any], directory: Path) -> list[Path]:
    """``bench-loss.png``, ``bench-throughput.png`` and ``bench-exposed.png`` in ``directory``."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    directory.mkdir(parents=True, exist_ok=True)
    methods: Mapping[str, Mapping[str, Any]] = result["methods"]
    subtitle = (
        f"{result['clusters']} clusters, {result['link_mbit']:.3g} "
        f"Mbit/s link ({result['shaping']})"
    )
    written = []

    figure, axes = plt.subplots(figsize=(7, 4.2))
    for name in ("allreduce", "diloco", "dilocox"):
        curve = [p for p in methods[name]["curve"] if p["eval_loss"] is not None]
        axes.plot(
            [p["tokens"] for p in curve],
            [p["eval_loss"] for p in curve],
            marker="o",
            markersize=3,
            label=f"{LABELS[name]}: {methods[name]['bytes_per_token']:.3g} B/token",
            color=COLOURS[name],
        )
    axes.set_xlabel("tokens trained (all clusters)")
    axes.set_ylabel("held-out loss (nats/token)")
    axes.set_title(
        f"Held-out loss at equal tokens\n{result['clusters']} "
        "clusters, same model, data order and seed"
    )
    axes.legend()
    axes.grid(alpha=0.3)
    written.append(_save(figure, directory / "bench-loss.png"))

    names = [
        n
        for n in ("allreduce", "diloco", "dilocox-blocking", "dilocox")
        if "tokens_per_s" in methods.get(n, {})
    ]
    figure, axes = plt.subplots(figsize=(7, 4.2))
    values = [methods[n]["tokens_per_s"] for n in names]
    bars = axes.bar([SHORT[n] for n in names], values, color=[COLOURS[n] for n in names])
    axes.set_yscale("log")
    axes.set_ylim(top=max(values) * 4)
    axes.set_ylabel("tokens/s (log scale)")
    axes.set_title(f"Throughput on the emulated link\n{subtitle}")
    for bar, name in zip(bars, names, strict=True):
        axes.annotate(
            f"{methods[name]['tokens_per_s']:,.0f}\n×{methods[name]['speedup_over_allreduce']:.1f}",
            (bar.get_x() + bar.get_width() / 2, bar.get_height()),
            ha="center",
            va="bottom",
            fontsize=8,
        )
    written.append(_save(figure, directory / "bench-throughput.png"))

    figure, axes = plt.subplots(figsize=(7, 4.2))
    pair = ["dilocox-blocking", "dilocox"]
    total = [methods[n]["comm_s_per_outer_step"] for n in pair]
    exposed = [methods[n]["exposed_comm_s_per_outer_step"] for n in pair]
    positions = range(len(pair))
    for offset, heights, label, colour in (
        (-0.2, total, "communication (launch to completion)", "#9ecae1"),
        (0.2, exposed, "exposed (compute waited for it)", "#d62728"),
    ):
        bars = axes.bar(
            [p + offset for p in positions], heights, width=0.4, label=label, color=colour
        )
        for bar, height in zip(bars, heights, strict=True):
            axes.annotate(
                f"{height:.3f} s",
                (bar.get_x() + bar.get_width() / 2, height),
                ha="center",
                va="bottom",
                fontsize=8,
            )
    axes.set_xticks(list(positions), [SHORT[n] for n in pair])
    axes.set_ylim(top=max([*total, *exposed, 1e-3]) * 1.45)  # room for the legend above the bars
    axes.set_ylabel("seconds per outer step")
    axes.set_title(f"Exposed communication, blocking vs one-step-delay overlap\n{subtitle}")
    axes.legend()
    written.append(_save(figure, directory / "bench-exposed.png"))
    return written


def _save(figure: Any, path: Path) -> Path:
    figure.tight_layout()
    figure.savefig(path, dpi=120)
    import matplotlib.pyplot as plt

    plt.close(figure)
    return path
