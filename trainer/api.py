"""The trainer's library entry points: ``train``, ``train_cluster`` and ``reexecute_outer_step``.

Each prepares the data in the calling process, then runs the processes of its clusters
(spawned on this host, or -- under ``torchrun`` -- as this very process). ``train`` runs every
cluster of a run on this host and starts the lighthouse they meet at; ``train_cluster`` runs one
cluster, which meets the others at a lighthouse of the caller's (DESIGN.md §6).
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import tempfile
import time
from collections.abc import Iterator, Mapping, Sequence
from contextlib import AbstractContextManager
from dataclasses import dataclass, field, replace
from datetime import timedelta
from pathlib import Path

from trainer.checkpoint_layout import CheckpointFiles, write_checkpoint_directory
from trainer.config import TrainConfig
from trainer.data.assignment import AssignmentRule
from trainer.data.build import PreparedData, prepare_data
from trainer.data.manifest import DataManifest
from trainer.data.tokenizer import Tokenizer
from trainer.errors import CheckpointError, ConfigError, DataError, WorkerError
from trainer.execution import Execution
from trainer.hf_repo import TokenizerExport
from trainer.memory_recorder import InMemoryRecorder, MemoryRecording, shared_sink
from trainer.recorder import OuterStepReport, RecorderFactory, RunSummary
from trainer.runtime.channel import ChannelAddress, RunChannel
from trainer.runtime.determinism import check_devices
from trainer.runtime.forgery import Forgery
from trainer.runtime.launch import (
    Links,
    one_cluster,
    one_host,
    spawn,
    torchrun_links,
    under_torchrun,
)
from trainer.runtime.lighthouse import LighthouseSettings
from trainer.runtime.spec import CONNECT_TIMEOUT, START_TIMEOUT, Mode, WorkerSpec
from trainer.runtime.state import process_subset, read_cursor
from trainer.runtime.topology import Topology
from trainer.runtime.worker import spawned_entry, torchrun_entry


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
    lighthouse: LighthouseSettings | None = None,
    forgery: Forgery | None = None,
) -> RunSummary | None:
    """Run (or, given the files of its last recorded step, continue) a training run with every
    cluster on this host, meeting at a lighthouse this process serves (``lighthouse``: its
    settings; default: every cluster must be in every quorum).

    Returns the run summary in the process that coordinated (always, when spawning; the
    coordinator under torchrun) and None in the other torchrun processes."""
    if under_torchrun():
        if config.clusters != 1:
            raise ConfigError(
                f"TrainConfig.clusters is {config.clusters}: "
                "under torchrun each launch is one cluster "
                "(veritrain train --cluster J --lighthouse URL)"
            )
        return train_cluster(
            config,
            recorder_factory,
            cluster=0,
            lighthouse=None,
            resume_state=resume_state,
            data=data,
            data_dir=data_dir,
            quiet=quiet,
        )
    check_devices(config.device, config.stages * config.data_parallel)
    prepared = data or prepare_data(config.data, data_dir or default_data_dir())
    topology = Topology.full(config.clusters, config.stages, config.data_parallel)
    _check_resumable(resume_state, config)
    settings = (
        (lighthouse or LighthouseSettings(min_clusters=config.clusters))
        if config.clusters > 1
        else None
    )
    return _launch(
        config,
        prepared,
        recorder_factory,
        topology,
        one_host(topology.present, config.stages, settings=settings),
        resume_state,
        quiet=quiet,
        forgery=forgery,  # tests and benchmarks only (trainer/runtime/forgery.py)
    )


def train_cluster(
    config: TrainConfig,
    recorder_factory: RecorderFactory,
    *,
    cluster: int,
    lighthouse: str | None,
    resume_state: CheckpointFiles | None = None,
    data: PreparedData | None = None,
    data_dir: Path | None = None,
    quiet: bool = False,
    advertise_host: str | None = None,
) -> RunSummary | None:
    """Run cluster ``cluster`` of a run whose clusters meet at the lighthouse at
    ``lighthouse`` (``http://host:port``; None only for a run of one cluster). Cluster 0
    coordinates and records; any other cluster may start later, stop, and start again: it
    joins at the next round (docs/trainer.md)."""
    if not 0 <= cluster < config.clusters:
        raise ConfigError(f"expected a cluster in [0, {config.clusters}), got {cluster}")
    if lighthouse is None and config.clusters > 1:
        raise ConfigError(
            f"a run of {config.clusters} clusters needs "
            "the lighthouse they meet at (--lighthouse URL)"
        )
    per_cluster = config.stages * config.data_parallel
    # under torchrun a cluster may span hosts: each needs a GPU per process it runs
    on_this_host = int(os.environ.get("LOCAL_WORLD_SIZE", per_cluster)) if under_torchrun() else 0
    check_devices(config.device, on_this_host or per_cluster)
    prepared = data or prepare_data(config.data, data_dir or default_data_dir())
    topology = Topology(
        clusters=config.clusters,
        stages=config.stages,
        present=(cluster,),
        data_parallel=config.data_parallel,
    )
    _check_resumable(resume_state, config)
    if (
        cluster == 0
        and lighthouse is not None
        and (not under_torchrun() or os.environ.get("RANK") == "0")
    ):
        announce_configuration(lighthouse, config)
    hosted: AbstractContextManager[Links] = (
        contextlib.nullcontext(torchrun_links(cluster, lighthouse))
        if under_torchrun()
        else one_cluster(cluster, lighthouse=lighthouse, advertise_host=advertise_host)
        if lighthouse is not None
        else one_host(topology.present, config.stages, settings=None)
    )
    return _launch(
        config,
        prepared,
        recorder_factory,
        topology,
        hosted,
        resume_state,
        quiet=quiet,
        in_this_process=under_torchrun(),
    )


def _launch(
    config: TrainConfig,
    prepared: PreparedData,
    recorder_factory: RecorderFactory,
    topology: Topology,
    hosted: AbstractContextManager[Links],
    resume_state: CheckpointFiles | None,
    *,
    mode: Mode = "train",
    stop_step: int | None = None,
    quiet: bool,
    in_this_process: bool = False,
    executed: TrainConfig | None = None,
    payloads: Mapping[str, bytes] | None = None,
    forgery: Forgery | None = None,
) -> RunSummary | None:
    """Run the processes of ``topology``'s clusters, which meet through ``hosted``: spawned on
    this host, or (``in_this_process``: under torchrun) as this very process, each from its
    share of ``resume_state``. They stop before ``stop_step`` (default: the run's end).
    ``executed``: the configuration the processes run when re-executing at another precision,
    thread count or device (trainer/execution.py); the config digest stays ``config``'s, under
    which the state was recorded. ``payloads`` and ``forgery``: see ``WorkerSpec``."""
    rule = _checked_rule(config, prepared.manifest)
    with hosted as links:
        spec = WorkerSpec(
            config=executed or config,
            config_digest=config_digest(config),
            manifest=prepared.manifest.with_assignment(rule.to_dict()),
            rule=rule,
            shards=prepared.source,
            recorder_factory=recorder_factory,
            topology=topology,
            links=links,
            resume=None,
            stop_step=config.outer_steps if stop_step is None else stop_step,
            mode=mode,
            quiet=quiet,
            tokenizer=_tokenizer_export(prepared),
            payloads=dict(payloads or {}),
            forgery=forgery,
        )
        if in_this_process:
            return torchrun_entry(
                replace(spec, resume=_per_process(resume_state, topology, config))
            )
        with _staged(resume_state, topology, config) as staged:
            summary: RunSummary | None = spawn(
                spawned_entry,
                replace(spec, resume=staged),
                topology.processes,
                preload=_preload(recorder_factory),
            )
        return summary


def _preload(recorder_factory: RecorderFactory) -> tuple[str, ...]:
    """The module of the recorder every process builds, for the forkserver to import once
    (the ledger recorder's imports take most of a second per process on 2 cores)."""
    return (type(recorder_factory).__module__,)


CONFIGURATION_KEY = "configuration"
"""Where cluster 0 posts the run's configuration on the channel, for the clusters joining it."""


def announce_configuration(lighthouse: str, config: TrainConfig) -> None:
    """Cluster 0 posts the run's configuration, so the other clusters train the same run."""
    channel = RunChannel(
        ChannelAddress.of_lighthouse(lighthouse), config.run_id, connect_timeout=CONNECT_TIMEOUT
    )
    channel.put(CONFIGURATION_KEY, {"config": config.to_dict(), "digest": config_digest(config)})


def run_configuration(
    lighthouse: str, run_id: str, *, timeout: timedelta = START_TIMEOUT
) -> TrainConfig:
    """The configuration cluster 0 trains run ``run_id`` with (waiting up to ``timeout`` for
    cluster 0 to post it): what a cluster joining from another host trains."""
    channel = RunChannel(
        ChannelAddress.of_lighthouse(lighthouse), run_id, connect_timeout=CONNECT_TIMEOUT
    )
    deadline = time.monotonic() + timeout.total_seconds()
    while (message := channel.get(CONFIGURATION_KEY)) is None:
        if time.monotonic() > deadline:
            raise WorkerError(
                f"cluster 0 of run {run_id!r} posted no "
                f"configuration at {lighthouse} within {timeout}"
            )
        time.sleep(0.2)
    config = TrainConfig.from_dict(message["config"])
    if config_digest(config) != message["digest"]:
        raise ConfigError(
            f"the configuration of run {run_id!r} at {lighthouse} does not hash to its digest"
        )
    return config


def _check_resumable(resume_state: CheckpointFiles | None, config: TrainConfig) -> None:
    if resume_state is not None and _next_step(resume_state, config) >= config.outer_steps:
        raise CheckpointError(
            f"expected a state before the last step ({config.outer_steps - 1}), got one after it"
        )


@dataclass(frozen=True, kw_only=True)
class Reexecution:
    """The outcome of re-running one outer step."""

    step: int
    record: OuterStepReport
    """The step's record as the re-execution produced it (metrics include its own timings)."""
    files: CheckpointFiles
    """The state after the step, as the original run saved it (empty for a one-cluster re-run,
    which stops at its contribution)."""
    payloads: Mapping[tuple[int, int], bytes] = field(default_factory=dict)
    """(cluster, stage) -> the payload bytes each re-run process sent in the step."""

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
    clusters: Sequence[int] | None = None,
    payloads: Mapping[str, bytes] | None = None,
    data: PreparedData | None = None,
    data_dir: Path | None = None,
    execution: Execution | None = None,
    forgery: Forgery | None = None,
) -> Reexecution:
    """Re-run outer step ``step`` from the state recorded after step ``step - 1`` (None for
    step 0: the seed's initial state), with the recorded data.

    ``clusters``: the clusters that took part in the step (its recorded quorum; default all):
    each starts from its own saved state, or from its donor's when the state before has none of
    it (trainer/runtime/state.py). ``payloads``: payloads by digest of the round still in flight
    that no re-executed cluster holds (those of clusters that left). With ``cluster=J`` only
    cluster J's S stage processes run its H inner steps and stop at its contribution, so one
    cluster's claimed digests can be checked without the others. ``data`` lets the caller serve
    the shards (e.g. downloaded from the object store); the manifest's digests are checked
    against the corpus the configuration names. ``execution`` runs the recorded configuration at
    another precision, thread count or device (the state is still the one recorded under the
    configuration's digest: trainer/execution.py)."""
    if not 0 <= step < config.outer_steps:
        raise ConfigError(f"expected a step in [0, {config.outer_steps}), got {step}")
    if cluster is not None and not 0 <= cluster < config.clusters:
        raise ConfigError(f"expected a cluster in [0, {config.clusters}), got {cluster}")
    if state_before is None and step != 0:
        raise CheckpointError(
            f"expected the state after step {step - 1} to re-execute step {step}, got none"
        )
    executed = execution.applied_to(config) if execution is not None else config
    check_devices(executed.device, config.stages * config.data_parallel)
    prepared = data or prepare_data(config.data, data_dir or default_data_dir())
    present = (
        (cluster,)
        if cluster is not None
        else tuple(sorted(clusters))
        if clusters
        else tuple(range(config.clusters))
    )
    topology = Topology(
        clusters=config.clusters,
        stages=config.stages,
        present=present,
        data_parallel=config.data_parallel,
    )
    mode: Mode = "reexecute" if cluster is None else "contribute"
    if state_before is not None and _next_step(state_before, config) != step:
        found = _next_step(state_before, config) - 1
        raise CheckpointError(
            f"expected the state after step {step - 1}, got the state after step {found}"
        )
    settings = (
        LighthouseSettings(min_clusters=len(present))
        if mode == "reexecute" and len(present) > 1
        else None
    )
    with shared_sink() as sink:
        _launch(
            config,
            prepared,
            InMemoryRecorder.factory(sink),
            topology,
            one_host(present, config.stages, settings=settings),
            state_before,
            mode=mode,
            stop_step=step + 1,
            quiet=True,
            executed=executed,
            payloads=payloads,
            forgery=forgery,
        )
        recording = MemoryRecording(sink.items())
    records = recording.records
    if len(records) != 1:
        raise CheckpointError(
            f"expected one record from re-executing step {step}, got {len(records)}"
        )
    files = recording.state(step) if cluster is None else CheckpointFiles()
    return Reexecution(step=step, record=records[0], files=files, payloads=recording.payloads(step))


def _checked_rule(config: TrainConfig, manifest: DataManifest) -> AssignmentRule:
    """The run's assignment rule, once ``config`` is checked against the corpus it names."""
    if manifest.vocab_size != config.model.vocab_size:
        raise ConfigError(
            "TrainConfig.model.vocab_size must match the "
            f"tokenizer's vocabulary ({manifest.vocab_size}), "
            f"got {config.model.vocab_size}"
        )
    rule = assignment_rule(config, manifest)
    if manifest.assignment is not None and dict(manifest.assignment) != rule.to_dict():
        raise DataError(
            f"expected the manifest's assignment rule {dict(manifest.assignment)} "
            f"to match the configuration's {rule.to_dict()}"
        )
    if config.eval_batches * rule.sequences_per_step > rule.eval_windows:
        raise ConfigError(
            "TrainConfig.eval_batches must be <= "
            f"{rule.eval_windows // rule.sequences_per_step} for "
            f"{len(rule.eval_shards)} held-out shards, got {config.eval_batches}"
        )
    return rule


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
    return tokenizer_export(prepared.tokenizer())


def tokenizer_export(tokenizer: Tokenizer) -> TokenizerExport:
    """The tokenizer files and special ids every checkpoint carries, so that a checkpoint
    folder is a Hugging Face model repo ``AutoTokenizer`` loads (bytes included: a BPE over the
    256 byte symbols with no merges), and a run and its re-execution write the same files.
    Generation stops at the corpus's end-of-text id, which also pads a batch (the id
    tokenizer_config.json names for both, trainer/data/tokenizer.py). ``veritrain verify``
    recomputes every revision's files from it."""
    return TokenizerExport(
        files=tokenizer.hf_files(),
        eos_token_id=tokenizer.end_of_text,
        pad_token_id=tokenizer.end_of_text,
    )


def _next_step(state: CheckpointFiles, config: TrainConfig) -> int:
    """The step a saved state continues with (checking it was saved under this configuration)."""
    return read_cursor(state, config_digest=config_digest(config)).next_step


def _per_process(
    state: CheckpointFiles | None, topology: Topology, config: TrainConfig
) -> tuple[CheckpointFiles, ...] | None:
    """Each process's share of a saved state, by rank."""
    if state is None:
        return None
    return tuple(
        process_subset(state, cluster=c, stage=s, stages=config.stages)
        for c, s in (topology.place(r) for r in range(topology.processes))
    )


@contextlib.contextmanager
def _staged(
    state: CheckpointFiles | None, topology: Topology, config: TrainConfig
) -> Iterator[tuple[Path, ...] | None]:
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
