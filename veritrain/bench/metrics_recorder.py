"""A trainer Recorder that keeps only what the benchmark reads: each outer step's metrics.

Checkpoint files are neither hashed nor kept (``save_state`` answers with no digests), so a
benchmark run spends its time training, not serialising. The coordinator appends one JSON line
per outer step to a file, which works the same for spawned processes and for ranks started
one by one in network namespaces (where no multiprocessing manager can be shared).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

from trainer.checkpoint_layout import FileDigests, JsonFiles, TensorFiles
from trainer.recorder import OuterStepReport, ProcessInfo, RunStart, RunSummary, SignsNothing


@dataclass(frozen=True)
class StepMetrics:
    """One outer step as the benchmark sees it."""

    step: int
    inner_steps: int
    method: str
    metrics: dict[str, float]
    payload_bytes: list[int]
    """Per applied round: bytes one cluster put on the wire for it (all its stages)."""

    def to_json(self) -> str:
        return json.dumps(
            {
                "step": self.step,
                "inner_steps": self.inner_steps,
                "method": self.method,
                "metrics": self.metrics,
                "payload_bytes": self.payload_bytes,
            },
            sort_keys=True,
        )

    @classmethod
    def from_json(cls, line: str) -> StepMetrics:
        data = json.loads(line)
        return cls(
            step=data["step"],
            inner_steps=data["inner_steps"],
            method=data["method"],
            metrics=dict(data["metrics"]),
            payload_bytes=list(data["payload_bytes"]),
        )


def read_steps(path: Path) -> list[StepMetrics]:
    """The steps recorded in ``path``, in step order (empty if none were)."""
    if not path.is_file():
        return []
    steps = [StepMetrics.from_json(line) for line in path.read_text().splitlines() if line.strip()]
    return sorted(steps, key=lambda s: s.step)


@dataclass(frozen=True)
class MetricsRecorderFactory:
    """Picklable: crosses the spawn boundary and is rebuilt in every process."""

    path: Path

    def __call__(self, process: ProcessInfo) -> MetricsRecorder:
        return MetricsRecorder(self.path, process)


class MetricsRecorder(SignsNothing):
    def __init__(self, path: Path, process: ProcessInfo) -> None:
        self.path = path
        self.process = process

    def begin(self, run: RunStart) -> None:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self.path.write_text("")

    def save_state(self, step: int, files: TensorFiles, json_files: JsonFiles) -> FileDigests:
        return {}

    def record_outer_step(self, report: OuterStepReport) -> None:
        line = StepMetrics(
            step=report.step,
            inner_steps=report.inner_steps,
            method=report.method,
            metrics={k: float(v) for k, v in report.metrics.items()},
            payload_bytes=[a.payload_bytes for a in report.applied],
        ).to_json()
        with self.path.open("a") as sink:
            sink.write(line + "\n")

    def end(self, summary: RunSummary) -> None:
        """Nothing beyond the steps is kept."""

    def close(self) -> None:
        """Nothing to release."""
