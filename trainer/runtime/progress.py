"""What a person sees: an inner-step progress bar and one line per outer step (coordinator only)."""

from __future__ import annotations

from typing import Protocol

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, TextColumn, TimeElapsedColumn
from rich.progress import Progress as RichProgress

from trainer.recorder import OuterStepReport


class Progress(Protocol):
    def start_step(self, step: int, inner_steps: int) -> None: ...
    def advance(self) -> None: ...
    def finish_step(self, record: OuterStepReport) -> None: ...
    def close(self) -> None: ...


class SilentProgress:
    """For non-coordinator processes and quiet runs."""

    def start_step(self, step: int, inner_steps: int) -> None:
        """Nothing to show."""

    def advance(self) -> None:
        """Nothing to show."""

    def finish_step(self, record: OuterStepReport) -> None:
        """Nothing to show."""

    def close(self) -> None:
        """Nothing to close."""


class ConsoleProgress:
    def __init__(self, *, outer_steps: int) -> None:
        self.outer_steps = outer_steps
        self.console = Console(highlight=False)
        self._bar = RichProgress(
            TextColumn("step {task.fields[step]} inner"),
            BarColumn(),
            MofNCompleteColumn(),
            TimeElapsedColumn(),
            console=self.console,
            transient=True,
        )
        self._bar.start()
        self._task = self._bar.add_task("inner", total=1, step=0, visible=False)

    def start_step(self, step: int, inner_steps: int) -> None:
        self._bar.reset(self._task, total=inner_steps, step=step, visible=True)

    def advance(self) -> None:
        self._bar.advance(self._task)

    def finish_step(self, record: OuterStepReport) -> None:
        self._bar.update(self._task, visible=False)
        self.console.print(step_line(record, self.outer_steps), soft_wrap=True)

    def close(self) -> None:
        self._bar.stop()


def step_line(record: OuterStepReport, outer_steps: int) -> str:
    """``step 3/8  loss 2.1034  eval 2.2011 (ppl 9.04)  H 20  rank 8  sent 1.2 MB  4.1 s (...)``"""
    m = record.metrics
    parts = [
        f"step {record.step}/{outer_steps - 1}",
        f"loss {m.get('train_loss', float('nan')):.4f}",
    ]
    if "eval_loss" in m:
        parts.append(f"eval {m['eval_loss']:.4f} (ppl {m['perplexity']:.2f})")
    parts.append(f"H {record.inner_steps}")
    if "rank" in m:  # an exchange was applied in this step (not step 0 under the one-step delay)
        parts.append(f"rank {int(m['rank'])} bits {int(m['bits'])}")
    parts.append(f"sent {_bytes(m.get('bytes_sent', 0.0))}")
    quorum = record.quorum
    if quorum.joined or quorum.left:
        changes = [
            f"{what} {','.join(map(str, clusters))}"
            for what, clusters in (("joined", quorum.joined), ("left", quorum.left))
            if clusters
        ]
        parts.append(f"clusters {','.join(map(str, quorum.clusters))} ({'; '.join(changes)})")
    parts.append(
        f"{m.get('wall_seconds', 0.0):.1f} s (compute {m.get('compute_seconds', 0.0):.1f} s, "
        f"comm {m.get('comm_seconds', 0.0):.2f} s, exposed "
        f"{m.get('exposed_comm_seconds', 0.0):.2f} s)"
    )
    if record.anomalies:
        parts.append("FLAGGED clusters " + ",".join(str(c) for c in record.flagged_clusters))
    return "  ".join(parts)


def _bytes(count: float) -> str:
    if count < 1000:
        return f"{count:.0f} B"
    for unit in ("kB", "MB"):
        count /= 1000
        if count < 1000:
            return f"{count:.1f} {unit}"
    return f"{count / 1000:.1f} GB"
