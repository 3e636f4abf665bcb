"""What a training process is given (``WorkerSpec``, picklable: it crosses the spawn boundary),
the modes it runs in, and how long it waits for the others to start."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import timedelta
from pathlib import Path
from typing import Literal

from trainer.checkpoint_layout import CheckpointFiles
from trainer.config import TrainConfig
from trainer.data.assignment import AssignmentRule
from trainer.data.manifest import DataManifest
from trainer.data.shards import ShardSource
from trainer.hf_repo import TokenizerExport
from trainer.recorder import RecorderFactory
from trainer.runtime.forgery import Forgery
from trainer.runtime.launch import Links
from trainer.runtime.topology import Topology

Mode = Literal["train", "reexecute", "contribute"]
"""``train``: a run, its resumption, or one cluster of it; ``reexecute``: one recorded step
again, with the clusters that took part in it, no begin/end; ``contribute``: one cluster alone,
up to its contribution (no exchange, no eval, no saved files)."""

START_TIMEOUT = timedelta(minutes=10)
"""How long a cluster waits for the others to start (enrolments, the coordinator's begin)."""
CONNECT_TIMEOUT = timedelta(seconds=60)


@dataclass(frozen=True, kw_only=True)
class WorkerSpec:
    """Everything a process needs; picklable (it crosses the spawn boundary)."""

    config: TrainConfig
    config_digest: str
    manifest: DataManifest
    rule: AssignmentRule
    shards: ShardSource
    recorder_factory: RecorderFactory
    topology: Topology
    links: Links
    resume: tuple[CheckpointFiles | Path, ...] | None
    """Per process of the launch: the files of the step to continue from, in memory (torchrun:
    this process) or in a folder (spawned processes); None: start from the seed."""
    stop_step: int
    """Exclusive: the process stops before this outer step."""
    mode: Mode
    quiet: bool
    tokenizer: TokenizerExport = field(default_factory=TokenizerExport)
    """The tokenizer files and special ids every checkpoint carries (trainer/hf_repo.py)."""
    payloads: Mapping[str, bytes] = field(default_factory=dict)
    """Payloads by digest that a re-execution may need and that no process of it sends (those
    of clusters that are not re-executed)."""
    forgery: Forgery | None = None
    """TESTS AND BENCHMARKS ONLY (trainer/runtime/forgery.py): a cluster that cheats unrecorded."""
