"""The trainer's library entry points: ``train`` and ``reexecute_outer_step``.

Both prepare the data in the calling process, then run the processes of the topology
(spawned on this host, or -- for ``train`` under ``torchrun`` -- as this very process).
"""

from __future__ import annotations

import contextlib
import hashlib
import multiprocessing
import os
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass, replace
from pathlib import Path

from trainer.checkpoint import CheckpointFiles, write_checkpoint_directory
from trainer.config import TrainConfig
from trainer.data.assignment import AssignmentRule
from trainer.data.build import PreparedData, prepare_data
from trainer.data.manifest import DataManifest
from trainer.errors import CheckpointError, ConfigError, DataError
from trainer.execution import Execution
from trainer.hf_repo import TokenizerExport
from trainer.memory_recorder import InMemoryRecorder, MemoryRecording
from trainer.recorder import OuterStepRecord, RecorderFactory, RunSummary
from trainer.runtime.forgery import Forgery
from trainer.runtime.launch import spawn, under_torchrun
from trainer.runtime.state import process_subset, read_cursor
from trainer.runtime.topology import Topology
from trainer.runtime.worker import Mode, WorkerSpec, spawned_entry, torchrun_entry


def default_data_dir() -> Path:
    """Where corpora are built when the caller does not say: the user's cache folder."""
    cache = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(cache) / "veritrain" / "data"


def config_digest(config: TrainConfig) -> str:
    return hashlib.sha256(config.digest_text().encode()).hexdigest()


def train(
    config: TrainConfig,
    recorder_factory: RecorderFactory,
    resume_state: CheckpointFiles | None = None,
    *,
    data: PreparedData | None = None,
    data_dir: Path | None = None,
    quiet: bool = False,
    forgery: Forgery | None = None,
) -> RunSummary | None:
    """Run (or, given the files of its last recorded step, continue) a training run.

    Returns the run summary in the process that coordinated (always, when spawning; rank 0
    under torchrun) and None in the other torchrun processes."""
    prepared = data or prepare_data(config.data, data_dir or default_data_dir())
    topology = Topology.full(config.clusters, config.stages)
    spec = _spec(config, prepared, recorder_factory, topology, stop_step=config.outer_steps, mode="train", quiet=quiet)
    spec = replace(spec, forgery=forgery)  # tests and benchmarks only (trainer/runtime/forgery.py)
    if resume_state is not None and _next_step(resume_state, config) >= config.outer_steps:
        raise CheckpointError(f"expected a state before the last step ({config.outer_steps - 1}), got one after it")
    if under_torchrun():
        return torchrun_entry(replace(spec, resume=_per_process(resume_state, topology, config)))
    with _staged(resume_state, topology, config) as staged:
        summary: RunSummary | None = spawn(spawned_entry, replace(spec, resume=staged), topology.world_size)
    return summary


@dataclass(frozen=True, kw_only=True)
class Reexecution:
    """The outcome of re-running one outer step."""

    step: int
    record: OuterStepRecord
    """The step's record as the re-execution produced it (metrics include its own timings)."""
    files: CheckpointFiles
    """The state after the step, as the original run saved it (empty for a one-cluster re-run,
    which stops at its contribution)."""

    @property
    def contribution_digests(self) -> dict[tuple[int, int], str]:
        """(cluster, stage) -> payload digest of this step's contributions."""
        return {(c.cluster, c.stage): c.digest for c in self.record.contribution_digests}


def reexecute_outer_step(
    config: TrainConfig,
    state_before: CheckpointFiles | None,
    step: int,
    cluster: int | None = None,
    *,
    data: PreparedData | None = None,
    data_dir: Path | None = None,
    execution: Execution | None = None,
    forgery: Forgery | None = None,
) -> Reexecution:
    """Re-run outer step ``step`` from the state recorded after step ``step - 1`` (None for
    step 0: the seed's initial state), with the recorded data.

    With ``cluster=J`` only cluster J's S stage processes run its H inner steps and stop at
    its contribution, so one cluster's claimed digests can be checked without the others.
    ``data`` lets the caller serve the shards (e.g. downloaded from the object store); the
    manifest's digests are checked against the corpus the configuration names. ``execution``
    runs the recorded configuration at another precision, thread count or device (the state
    is still the one recorded under the configuration's digest: trainer/execution.py)."""
    if not 0 <= step < config.outer_steps:
        raise ConfigError(f"expected a step in [0, {config.outer_steps}), got {step}")
    if cluster is not None and not 0 <= cluster < config.clusters:
        raise ConfigError(f"expected a cluster in [0, {config.clusters}), got {cluster}")
    if state_before is None and step != 0:
        raise CheckpointError(f"expected the state after step {step - 1} to re-execute step {step}, got none")
    prepared = data or prepare_data(config.data, data_dir or default_data_dir())
    topology = Topology.full(config.clusters, config.stages) if cluster is None else Topology(
        clusters=config.clusters, stages=config.stages, present=(cluster,)
    )
    mode: Mode = "reexecute" if cluster is None else "contribute"
    if state_before is not None and _next_step(state_before, config) != step:
        found = _next_step(state_before, config) - 1
        raise CheckpointError(f"expected the state after step {step - 1}, got the state after step {found}")
    context = multiprocessing.get_context("spawn")
    with context.Manager() as manager, _staged(state_before, topology, config) as staged:
        sink = manager.list()
        spec = _spec(config, prepared, InMemoryRecorder.factory(sink), topology, stop_step=step + 1, mode=mode, quiet=True)
        executed = execution.applied_to(config) if execution is not None else config
        spec = replace(spec, resume=staged, config=executed, forgery=forgery)
        spawn(spawned_entry, spec, topology.world_size)
        recording = MemoryRecording(list(sink))
    records = recording.records
    if len(records) != 1:
        raise CheckpointError(f"expected one record from re-executing step {step}, got {len(records)}")
    files = recording.state(step) if cluster is None else CheckpointFiles()
    return Reexecution(step=step, record=records[0], files=files)


def _spec(
    config: TrainConfig,
    prepared: PreparedData,
    recorder_factory: RecorderFactory,
    topology: Topology,
    *,
    stop_step: int,
    mode: Mode,
    quiet: bool,
) -> WorkerSpec:
    manifest = prepared.manifest
    if manifest.vocab_size != config.model.vocab_size:
        raise ConfigError(
            f"TrainConfig.model.vocab_size must match the tokenizer's vocabulary ({manifest.vocab_size}), "
            f"got {config.model.vocab_size}"
        )
    rule = assignment_rule(config, manifest)
    if manifest.assignment is not None and dict(manifest.assignment) != rule.to_dict():
        raise DataError(
            f"expected the manifest's assignment rule {dict(manifest.assignment)} to match the configuration's {rule.to_dict()}"
        )
    if config.eval_batches * rule.sequences_per_step > rule.eval_windows:
        raise ConfigError(
            f"TrainConfig.eval_batches must be <= {rule.eval_windows // rule.sequences_per_step} for "
            f"{len(rule.eval_shards)} held-out shards, got {config.eval_batches}"
        )
    return WorkerSpec(
        config=config,
        config_digest=config_digest(config),
        manifest=manifest.with_assignment(rule.to_dict()),
        rule=rule,
        shards=prepared.source,
        recorder_factory=recorder_factory,
        topology=topology,
        resume=None,
        stop_step=stop_step,
        mode=mode,
        quiet=quiet,
        tokenizer=_tokenizer_export(prepared),
    )


def assignment_rule(config: TrainConfig, manifest: DataManifest) -> AssignmentRule:
    """The rule that assigns ``manifest``'s windows to the clusters of a run of ``config``:
    what a run attaches to its data manifest, and what a verifier recomputes."""
    return AssignmentRule(
        context=config.model.context,
        sequences_per_step=config.sequences_per_step,
        clusters=config.clusters,
        seed=config.seed,
        shard_tokens=manifest.shard_tokens,
        train_shards=manifest.train_shards,
        eval_shards=tuple(manifest.eval_shards),
    )


def _tokenizer_export(prepared: PreparedData) -> TokenizerExport:
    """The tokenizer files and special ids every checkpoint carries, so that a checkpoint
    folder is a Hugging Face model repo ``AutoTokenizer`` loads (bytes included: a BPE over the
    256 byte symbols with no merges), and a run and its re-execution write the same files.
    Generation stops at the corpus's end-of-text id."""
    tokenizer = prepared.tokenizer()
    return TokenizerExport(files=tokenizer.hf_files(), eos_token_id=tokenizer.end_of_text)


def _next_step(state: CheckpointFiles, config: TrainConfig) -> int:
    """The step a saved state continues with (checking it was saved under this configuration)."""
    return read_cursor(state, config_digest=config_digest(config)).next_step


def _per_process(state: CheckpointFiles | None, topology: Topology, config: TrainConfig) -> tuple[CheckpointFiles, ...] | None:
    """Each process's share of a saved state, by rank."""
    if state is None:
        return None
    return tuple(
        process_subset(state, cluster=c, stage=s, stages=config.stages)
        for c, s in (topology.place(r) for r in range(topology.world_size))
    )


@contextlib.contextmanager
def _staged(state: CheckpointFiles | None, topology: Topology, config: TrainConfig) -> Iterator[tuple[Path, ...] | None]:
    """Each process's share written to a temporary folder for the launch: a spawned process reads
    only its own files (tensors passed as arguments would travel as one descriptor each)."""
    shares = _per_process(state, topology, config)
    if shares is None:
        yield None
        return
    with tempfile.TemporaryDirectory(prefix="veritrain-resume-") as folder:
        paths = []
        for rank, share in enumerate(shares):
            path = Path(folder) / f"rank-{rank:05d}"
            write_checkpoint_directory(share, path)
            paths.append(path)
        yield tuple(paths)
