"""What ``veritrain train`` launches, decided from its options before anything runs.

The decision table (``decide_launch``; the CLI parses, this decides, ``launch`` runs it):

| ``--resume``   | ``--workdir`` | launch                                                       |
|----------------|---------------|--------------------------------------------------------------|
| a run id       | (refused)     | ``ResumeLedgerRun``: configuration, data and state from the  |
|                |               | ledger; every other training option is refused                |
| a folder       | any           | ``FolderRun`` continuing the folder's last recorded step       |
| --             | a folder      | ``FolderRun``: a new run recorded as plain files               |
| --             | --            | ``NewLedgerRun``: a new run recorded in the ledger (signed)    |

``--cluster J`` places any of them on this host as one cluster of a run whose clusters meet
at ``--lighthouse`` (``ClusterPlacement``); without it every cluster runs here. The new run's
base configuration comes, first match wins, from: the lighthouse (a cluster J > 0 with
neither ``--config`` nor ``--preset`` joins the run cluster 0 started), ``--config``,
``--preset`` (default ``tiny``), the resumed folder's ``run.json``; the other options
override it. A new ledger run without ``--run-id`` or ``--config`` is named after the time,
which the clusters of a run on several hosts could not agree on: they must name it.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from datetime import UTC, datetime
from pathlib import Path

from trainer.api import run_configuration
from trainer.config import TrainConfig, load_config_file, with_overrides
from trainer.presets import run_preset
from trainer.recorder import RunSummary
from veritrain.errors import LaunchError
from veritrain.policy import PolicyChoice
from veritrain.record.local_run import recorded_config, run_directory_of, train_into_directory
from veritrain.record.placement import ClusterPlacement
from veritrain.record.training import resume_recorded, train_recorded
from veritrain.settings import Settings


@dataclass(frozen=True, kw_only=True)
class ConfigOverrides:
    """The training options given on the command line (None / empty / False: not given)."""

    clusters: int | None = None
    stages: int | None = None
    data_parallel: int | None = None
    outer_steps: int | None = None
    inner_steps: int | None = None
    data: tuple[Path, ...] = ()
    text_field: str | None = None
    run_id: str | None = None
    method: str | None = None
    seed: int | None = None
    precision: str | None = None
    activation_checkpointing: bool = False

    def given(self) -> bool:
        """Whether any of them was given."""
        scalars = (
            self.clusters,
            self.stages,
            self.data_parallel,
            self.outer_steps,
            self.inner_steps,
            self.text_field,
            self.run_id,
            self.method,
            self.seed,
            self.precision,
        )
        return (
            any(v is not None for v in scalars) or bool(self.data) or self.activation_checkpointing
        )

    def applied_to(self, base: TrainConfig) -> TrainConfig:
        """``base`` with these options; ``TrainConfig`` refuses a bad value, naming the field."""
        chosen = with_overrides(
            base,
            clusters=self.clusters,
            stages=self.stages,
            data_parallel=self.data_parallel,
            outer_steps=self.outer_steps,
            inner_steps=self.inner_steps,
            data_paths=tuple(str(p) for p in self.data),
            text_field=self.text_field,
            run_id=self.run_id,
            method=self.method,
            seed=self.seed,
        )
        if self.precision is not None:
            chosen = replace(chosen, precision=self.precision)  # type: ignore[arg-type]  # TrainConfig checks the value
        if self.activation_checkpointing:
            chosen = replace(chosen, activation_checkpointing=True)
        return chosen


@dataclass(frozen=True, kw_only=True)
class LaunchRequest:
    """The options of ``veritrain train`` that decide what runs (None: not given)."""

    preset: str | None = None
    config: Path | None = None
    overrides: ConfigOverrides = field(default_factory=ConfigOverrides)
    workdir: Path | None = None
    """Record plain files into this folder instead of the ledger."""
    resume: str | None = None
    """A run id (ledger) or a run or step folder."""
    cluster: int | None = None
    lighthouse: str | None = None
    advertise: str | None = None
    verification: str = "bitwise"


@dataclass(frozen=True)
class PresetConfig:
    """A named run preset (``trainer/presets.py``)."""

    name: str


@dataclass(frozen=True)
class FileConfig:
    """A JSON or TOML file laid out like ``TrainConfig.to_dict()``."""

    path: Path


@dataclass(frozen=True)
class JoinedRunConfig:
    """The configuration cluster 0 serves for ``run_id`` through the lighthouse."""

    lighthouse: str
    run_id: str


@dataclass(frozen=True)
class FolderConfig:
    """The configuration a run folder recorded (``run.json``); ``folder`` may be a step's."""

    folder: Path


ConfigSource = PresetConfig | FileConfig | JoinedRunConfig | FolderConfig


@dataclass(frozen=True)
class ResumeLedgerRun:
    """Continue a ledger run after its last recorded step, exactly as it was recorded."""

    run_id: str
    placement: ClusterPlacement | None


@dataclass(frozen=True, kw_only=True)
class NewLedgerRun:
    """Start a run recorded in the ledger and the object store, signed and attested."""

    config: ConfigSource
    overrides: ConfigOverrides
    policy: PolicyChoice
    placement: ClusterPlacement | None
    named_after_time: bool
    """No run id was given: the run is named ``run-<UTC time>`` when it starts."""


@dataclass(frozen=True, kw_only=True)
class FolderRun:
    """Train into a folder of plain files (no ledger, no signatures), new or resumed."""

    config: ConfigSource
    overrides: ConfigOverrides
    placement: ClusterPlacement | None
    workdir: Path | None
    """Where to record; None: the resumed run's own folder."""
    resume: Path | None
    """The run or step folder to continue from."""

    def out(self) -> Path:
        """The run folder the steps are recorded in."""
        if self.workdir is not None:
            return self.workdir
        assert self.resume is not None, "decide_launch gives a folder run a workdir or a resume"
        return run_directory_of(self.resume)


LaunchPlan = ResumeLedgerRun | NewLedgerRun | FolderRun


def decide_launch(request: LaunchRequest) -> LaunchPlan:
    """What ``request`` launches (the table in this module's docstring); raises
    ``LaunchError`` for options that contradict each other, before anything is read or run
    (only whether ``--resume`` names an existing folder is looked up)."""
    r = request
    if r.verification not in ("bitwise", "tolerance"):
        raise LaunchError(
            f"expected 'bitwise' or 'tolerance', got {r.verification!r}", option="--verification"
        )
    if r.lighthouse is not None and r.cluster is None:
        raise LaunchError("--lighthouse URL needs --cluster J: the cluster this host runs")
    placement = (
        ClusterPlacement(cluster=r.cluster, lighthouse=r.lighthouse, advertise=r.advertise)
        if r.cluster is not None
        else None
    )
    folder = Path(r.resume) if r.resume is not None and Path(r.resume).is_dir() else None
    if r.resume is not None and folder is None:
        # A run id: the ledger holds its configuration, data and state.
        if r.config is not None or bool(r.preset) or r.overrides.given():
            raise LaunchError(
                "--resume RUN_ID continues the run as recorded; drop the other options"
            )
        return ResumeLedgerRun(r.resume, placement)
    source = _config_source(r, placement, folder)
    if r.workdir is None and folder is None:
        named_after_time = r.overrides.run_id is None and r.config is None
        if named_after_time and placement is not None:
            raise LaunchError("every cluster of a run on several hosts must name it: pass --run-id")
        return NewLedgerRun(
            config=source,
            overrides=r.overrides,
            policy=PolicyChoice(mode=r.verification),
            placement=placement,
            named_after_time=named_after_time,
        )
    return FolderRun(
        config=source,
        overrides=r.overrides,
        placement=placement,
        workdir=r.workdir,
        resume=folder,
    )


def _config_source(
    r: LaunchRequest, placement: ClusterPlacement | None, folder: Path | None
) -> ConfigSource:
    if (
        placement is not None
        and placement.cluster != 0
        and r.config is None
        and r.preset is None
        and folder is None
    ):
        # A cluster other than the coordinator takes the run's configuration from cluster 0.
        if r.overrides.run_id is None or placement.lighthouse is None:
            raise LaunchError(
                "a cluster joining a run names it and its lighthouse: --run-id ID --lighthouse URL"
            )
        return JoinedRunConfig(placement.lighthouse, r.overrides.run_id)
    if r.config is not None:
        return FileConfig(r.config)
    if r.preset is not None or folder is None:
        return PresetConfig(r.preset or "tiny")
    return FolderConfig(folder)


def launch(
    plan: LaunchPlan, settings: Settings, *, cluster_keys: Path | None, quiet: bool
) -> RunSummary | None:
    """Run ``plan`` on this host. Returns the run summary in the process that coordinated,
    None elsewhere (and when a resumed ledger run only needed its final entry)."""
    if isinstance(plan, ResumeLedgerRun):
        return resume_recorded(
            settings, plan.run_id, cluster_keys=cluster_keys, placement=plan.placement, quiet=quiet
        )
    config = plan.overrides.applied_to(_base_config(plan.config))
    if isinstance(plan, NewLedgerRun):
        if plan.named_after_time:
            config = with_overrides(config, run_id=default_run_id())
        return train_recorded(
            settings,
            config,
            policy=plan.policy,
            cluster_keys=cluster_keys,
            placement=plan.placement,
            quiet=quiet,
        )
    return train_into_directory(
        config,
        plan.out(),
        resume=plan.resume,
        data_dir=settings.data_dir / "corpus",
        placement=plan.placement,
        quiet=quiet,
    )


def launched_line(plan: LaunchPlan, summary: RunSummary) -> str:
    """The line that tells a person what ``plan`` recorded and where."""
    if isinstance(plan, ResumeLedgerRun):
        return f"run {summary.run_id!r}: {summary.steps} outer steps recorded in the ledger"
    if isinstance(plan, NewLedgerRun):
        return (
            f"run {summary.run_id!r}: {summary.steps} outer steps recorded in the ledger; "
            f"check it with `veritrain verify {summary.run_id}`"
        )
    return f"recorded {summary.steps} outer steps of run {summary.run_id!r} in {plan.out()}"


def default_run_id() -> str:
    return "run-" + datetime.now(UTC).strftime("%Y%m%d-%H%M%S")


def _base_config(source: ConfigSource) -> TrainConfig:
    if isinstance(source, JoinedRunConfig):
        return run_configuration(source.lighthouse, source.run_id)
    if isinstance(source, FileConfig):
        return load_config_file(source.path)
    if isinstance(source, PresetConfig):
        return run_preset(source.name)
    return recorded_config(run_directory_of(source.folder))
