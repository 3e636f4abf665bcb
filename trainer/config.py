"""The configuration of a training run: one frozen tree of dataclasses, JSON-able both ways.

Everything that changes what is computed lives here (so the ledger records it and a
re-execution reproduces it); how a run is observed (progress bars, where caches live) does not.
"""

from __future__ import annotations

import json
import math
import tomllib
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field, fields, replace
from pathlib import Path
from typing import Any, Literal

import rfc8785

from trainer.data.config import DataConfig
from trainer.errors import ConfigError
from trainer.model import ModelConfig, stage_layout
from trainer.outer.config import RECORDED_WITHOUT_EXCHANGE, RECORDED_WITHOUT_RULE, OuterConfig

Method = Literal["allreduce", "diloco", "dilocox"]
METHODS: tuple[Method, ...] = ("allreduce", "diloco", "dilocox")
Schedule = Literal["1f1b", "gpipe"]
Precision = Literal["fp32", "bf16", "fp64"]
PRECISIONS: tuple[Precision, ...] = ("fp32", "bf16", "fp64")


@dataclass(frozen=True, kw_only=True)
class InnerConfig:
    """The inner optimiser: AdamW with linear warm-up and cosine decay (Loshchilov & Hutter 2019;
    the schedule of DiLoCo, Douillard et al. 2023, §4)."""

    lr: float = 3e-3
    """Peak learning rate."""
    min_lr_ratio: float = 0.1
    """The cosine decays to ``lr * min_lr_ratio`` at the planned last inner step."""
    warmup_steps: int = 10
    """Inner steps of linear warm-up from 0."""
    weight_decay: float = 0.1
    """Decoupled weight decay on 2-D weights (matrices and embeddings); biases and norm gains
    do not decay (nanoGPT's convention)."""
    beta1: float = 0.9
    beta2: float = 0.95
    eps: float = 1e-8
    grad_clip: float = 1.0
    """Clip the global gradient norm (over every stage of the cluster) to this; 0 disables."""

    def __post_init__(self) -> None:
        _check(self, "lr", math.isfinite(self.lr) and self.lr > 0, "> 0")
        _check(self, "min_lr_ratio", 0.0 <= self.min_lr_ratio <= 1.0, "in [0, 1]")
        _check(self, "warmup_steps", self.warmup_steps >= 0, ">= 0")
        _check(self, "weight_decay", self.weight_decay >= 0, ">= 0")
        _check(self, "beta1", 0.0 <= self.beta1 < 1.0, "in [0, 1)")
        _check(self, "beta2", 0.0 <= self.beta2 < 1.0, "in [0, 1)")
        _check(self, "eps", self.eps > 0, "> 0")
        _check(self, "grad_clip", self.grad_clip >= 0, ">= 0")


DEFAULT_PROMPTS = ("def ", "import ", "class ", "    return ")
"""Python openings, for the default corpus (the standard library's sources)."""


@dataclass(frozen=True, kw_only=True)
class GenerationConfig:
    """What the model is asked to say after every outer step (recorded at genesis, and the
    generations of every step with it): greedy continuations of fixed prompts."""

    prompts: tuple[str, ...] = DEFAULT_PROMPTS
    """Texts the model continues; each is tokenized with the run's tokenizer."""
    max_new_tokens: int = 24
    """Tokens generated after each prompt (fewer when the model ends the text)."""

    def __post_init__(self) -> None:
        object.__setattr__(self, "prompts", tuple(self.prompts))
        _check(
            self,
            "prompts",
            all(isinstance(p, str) and p for p in self.prompts),
            "non-empty strings",
        )
        _check(self, "max_new_tokens", self.max_new_tokens >= 0, ">= 0")


@dataclass(frozen=True, kw_only=True)
class PoisonForTesting:
    """TESTS AND BENCHMARKS ONLY: make one cluster misbehave in one outer step, to check that
    the anomaly checks flag it. Never set in a real run (the ledger records it if it is)."""

    cluster: int
    """The cluster whose contribution is poisoned."""
    step: int
    """The outer step (round) in which it is poisoned."""
    kind: Literal["scale", "noise"] = "scale"
    """``scale``: its pseudo-gradient is multiplied by ``factor``; ``noise``: replaced by
    Gaussian noise ``factor`` times the pseudo-gradient's own RMS."""
    factor: float = 100.0

    def __post_init__(self) -> None:
        _check(self, "kind", self.kind in ("scale", "noise"), "'scale' or 'noise'")
        _check(self, "cluster", self.cluster >= 0, ">= 0")
        _check(self, "step", self.step >= 0, ">= 0")


@dataclass(frozen=True, kw_only=True)
class TrainConfig:
    """A whole run: model, data, topology, optimisers, budget."""

    run_id: str = "run"
    """Name of the run (the ledger's log origin ends with it)."""
    preset: str | None = None
    """The preset this configuration started from, if any (informational)."""
    method: Method = "diloco"
    """``allreduce``: data-parallel AdamW with a gradient all-reduce every inner step (the
    baseline); ``diloco``: blocking, uncompressed DiLoCo; ``dilocox``: compressed, overlapped."""
    model: ModelConfig = field(default_factory=ModelConfig)
    data: DataConfig = field(default_factory=DataConfig)
    inner: InnerConfig = field(default_factory=InnerConfig)
    outer: OuterConfig = field(default_factory=OuterConfig)
    """Outer algorithm settings; ``outer.kind`` must equal ``method`` unless method is allreduce.
    Bound to this run's ``clusters`` and ``data_parallel`` on construction
    (``OuterConfig.for_run``), which ``outer.exchange="auto"`` resolves from."""
    clusters: int = 2
    """C: outer replicas (DiLoCo workers)."""
    stages: int = 2
    """S: pipeline stages per cluster."""
    data_parallel: int = 1
    """D: data-parallel replicas of each stage inside a cluster (a cluster runs S * D
    processes). The replicas split the cluster's batch and average gradients every inner step;
    ``micro_batch_size`` must be a multiple of D (docs/trainer.md, "Topology")."""
    outer_steps: int = 5
    """T: outer steps (rounds) of the run."""
    inner_steps: int = 20
    """H: inner steps per outer step (the first round's H when ``outer.adaptive_inner_steps``)."""
    warmup_round: bool = False
    """The first outer step spans the inner warm-up: it takes ``min(inner.warmup_steps, T·H/2)``
    inner steps, and the other T − 1 share the rest of T·H, the earlier ones a step longer where
    they do not divide evenly (``round_inner_steps``). The token budget and the learning-rate
    schedule stay T·H; no payload is spent on the warm-up's small steps (docs/benchmarks.md,
    "spend no round on the warm-up"). Recorded in the genesis when set."""
    micro_batches: int = 2
    """Micro-batches per inner step through the pipeline."""
    micro_batch_size: int = 4
    """Sequences per micro-batch; a cluster's batch is micro_batches * micro_batch_size."""
    schedule: Schedule = "1f1b"
    """Pipeline schedule: ``1f1b`` (PipeDream-flush, Narayanan et al. 2021) or ``gpipe``."""
    eval_batches: int = 4
    """Held-out batches evaluated after every outer step."""
    seed: int = 0
    """Seeds the initial weights, the data order and the outer algorithm's random bases."""
    device: Literal["auto", "cpu", "cuda"] = "auto"
    """``auto``: CUDA (NCCL) when available, else CPU (gloo)."""
    precision: Precision = "fp32"
    """Arithmetic of the inner steps' forward and backward passes: ``fp32``; ``bf16`` autocast
    (matrix products in bfloat16, parameters, gradients and optimiser states in fp32:
    trainer/runtime/inner.py); ``fp64`` (every parameter and activation in float64: the
    reference a re-execution can be held against, docs/auditing.md)."""
    activation_checkpointing: bool = False
    """Recompute each decoder layer's activations during the backward pass instead of keeping
    them (trainer/model.py ``StageModel``): less memory, one more forward pass of compute,
    the same bits. Written into ``to_dict`` only when on, so the configurations recorded
    before the option existed keep their digests."""
    threads: int = 1
    """Intra-op CPU threads per process. 1 is what bitwise reproduction on CPU is stated for:
    another count splits reductions differently, a legitimate difference only a tolerance
    accepts (trainer/runtime/determinism.py)."""
    generation: GenerationConfig = field(default_factory=GenerationConfig)
    """Greedy generations recorded after every outer step (what the model says)."""
    poison_for_testing: PoisonForTesting | None = None
    """TESTS AND BENCHMARKS ONLY; see PoisonForTesting."""

    def __post_init__(self) -> None:
        _check(self, "method", self.method in METHODS, f"one of {', '.join(METHODS)}")
        _check(
            self,
            "run_id",
            bool(self.run_id) and "/" not in self.run_id,
            "a non-empty name without '/'",
        )
        for name in (
            "clusters",
            "stages",
            "data_parallel",
            "outer_steps",
            "inner_steps",
            "micro_batches",
            "micro_batch_size",
        ):
            _check(self, name, getattr(self, name) >= 1, ">= 1")
        _check(self, "eval_batches", self.eval_batches >= 1, ">= 1")
        _check(self, "schedule", self.schedule in ("1f1b", "gpipe"), "'1f1b' or 'gpipe'")
        _check(self, "device", self.device in ("auto", "cpu", "cuda"), "'auto', 'cpu' or 'cuda'")
        _check(self, "precision", self.precision in PRECISIONS, "'fp32', 'bf16' or 'fp64'")
        _check(self, "threads", self.threads >= 1, ">= 1")
        # The outer settings resolve from this run's topology (``exchange="auto"``): bind them
        # here, so that every reader of ``config.outer`` sees the exchange the run uses.
        bound = self.outer.for_run(clusters=self.clusters, data_parallel=self.data_parallel)
        object.__setattr__(self, "outer", bound)
        stage_layout(self.model.num_hidden_layers, self.stages)  # raises when S exceeds the depth
        if self.micro_batch_size % self.data_parallel:
            raise ConfigError(
                "TrainConfig.micro_batch_size must be a multiple "
                f"of data_parallel ({self.data_parallel}), "
                f"got {self.micro_batch_size}"
            )
        if self.data_parallel > 1 and self.method == "allreduce":
            raise ConfigError(
                "TrainConfig.data_parallel > 1 needs an outer "
                "method (diloco or dilocox), got 'allreduce'"
            )
        if self.data_parallel > 1 and self.outer.owner_reduce:
            raise ConfigError(
                "TrainConfig.data_parallel must be 1 with outer.exchange 'owner-reduce' (its "
                f"replicas do not split the owners' shares yet), got {self.data_parallel}"
            )
        if self.schedule == "1f1b" and self.micro_batches < self.stages:
            raise ConfigError(
                "TrainConfig.micro_batches must be >= stages "
                f"({self.stages}) for the 1F1B schedule, "
                f"got {self.micro_batches}"
            )
        if self.warmup_round and self.outer.adaptive_inner_steps:
            raise ConfigError(
                "TrainConfig.warmup_round plans every round's H, outer.adaptive_inner_steps "
                "decides them from timings: expected one of them, got both"
            )
        if self.method != "allreduce" and self.outer.kind != self.method:
            raise ConfigError(
                "TrainConfig.outer.kind must equal method "
                f"({self.method!r}), got {self.outer.kind!r}"
            )
        if self.poison_for_testing is not None:
            poison = self.poison_for_testing
            if poison.cluster >= self.clusters or poison.step >= self.outer_steps:
                raise ConfigError(
                    "TrainConfig.poison_for_testing must name "
                    f"a cluster < {self.clusters} and a step "
                    f"< {self.outer_steps}, got cluster {poison.cluster}, step {poison.step}"
                )
            if self.method == "allreduce":
                raise ConfigError(
                    "TrainConfig.poison_for_testing needs an outer method, got 'allreduce'"
                )

    @property
    def sequences_per_step(self) -> int:
        """B: sequences each cluster trains on per inner step."""
        return self.micro_batches * self.micro_batch_size

    @property
    def world_size(self) -> int:
        return self.clusters * self.stages * self.data_parallel

    @property
    def planned_inner_steps(self) -> int:
        """The length of the learning-rate schedule: T * H (the token budget)."""
        return self.outer_steps * self.inner_steps

    def round_inner_steps(self) -> tuple[int, ...]:
        """The planned H of every outer step, in order; they add up to ``planned_inner_steps``.
        (Adaptive H replaces all but the first at run time.)"""
        T, H = self.outer_steps, self.inner_steps
        total = T * H
        first = (
            min(self.inner.warmup_steps, total // 2, total - (T - 1))
            if self.warmup_round and T > 1
            else 0
        )
        if first < 1:
            return (H,) * T
        share, longer = divmod(total - first, T - 1)
        return (first, *(share + 1 if t < longer else share for t in range(T - 1)))

    def inner_steps_of(self, step: int) -> int:
        """The planned H of outer step ``step`` (``round_inner_steps``); a step outside the
        T planned ones has no plan of its own and gets H."""
        if not self.warmup_round or not 0 <= step < self.outer_steps:
            return self.inner_steps
        return self.round_inner_steps()[step]

    def to_dict(self) -> dict[str, Any]:
        data = asdict(self)
        data["data"] = self.data.to_dict()
        data["outer"] = self.outer.to_dict()
        data["generation"]["prompts"] = list(self.generation.prompts)
        if self.data_parallel == 1:
            # Absent means 1: the configurations (and digests) of runs without data
            # parallelism stay what they were before D existed.
            del data["data_parallel"]
        if not self.activation_checkpointing:
            del data["activation_checkpointing"]
        if not self.warmup_round:
            del data["warmup_round"]  # as runs before the choice recorded it
        return data

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> TrainConfig:
        """The inverse of ``to_dict``; unknown keys are an error (a typo must not be ignored).
        When ``outer.kind`` is not given it follows ``method``."""
        values = dict(_known(cls, data, "TrainConfig"))
        sections: dict[str, type[Any]] = {
            "model": ModelConfig,
            "data": DataConfig,
            "inner": InnerConfig,
            "outer": OuterConfig,
            "generation": GenerationConfig,
        }
        for name, section in sections.items():
            if name in values:
                values[name] = section(**_known(section, values[name], f"TrainConfig.{name}"))
        outer = dict(data.get("outer") or {})
        if "anomaly_rule" not in outer:  # written before the rules had versions
            values["outer"] = replace(
                values.get("outer", OuterConfig()), anomaly_rule=RECORDED_WITHOUT_RULE
            )
        if "exchange" not in outer:  # written before the choice, or an all-gather
            values["outer"] = replace(
                values.get("outer", OuterConfig()), exchange=RECORDED_WITHOUT_EXCHANGE
            )
        method = values.get("method", "diloco")
        if method in ("diloco", "dilocox") and "kind" not in dict(data.get("outer") or {}):
            values["outer"] = replace(values.get("outer", OuterConfig()), kind=method)
        if values.get("poison_for_testing") is not None:
            values["poison_for_testing"] = PoisonForTesting(
                **_known(
                    PoisonForTesting, values["poison_for_testing"], "TrainConfig.poison_for_testing"
                )
            )
        try:
            return cls(**values)
        except TypeError as exc:
            raise ConfigError(f"TrainConfig: {exc}") from exc

    def digest_text(self) -> str:
        """RFC 8785 canonical JSON of the configuration (what a config digest is taken over).

        Canonical, so that the configuration read back from a ledger entry (itself canonical
        JSON, where 1.0 is written 1) has the digest the run was trained under."""
        return rfc8785.dumps(self.to_dict()).decode()


def load_config_file(path: Path) -> TrainConfig:
    """A TrainConfig from a ``.json`` or ``.toml`` file laid out like ``TrainConfig.to_dict()``."""
    if not path.is_file():
        raise ConfigError(f"expected a configuration file at {path}, found nothing there")
    text = path.read_text()
    try:
        data = tomllib.loads(text) if path.suffix == ".toml" else json.loads(text)
    except (tomllib.TOMLDecodeError, json.JSONDecodeError) as exc:
        raise ConfigError(
            f"expected valid {path.suffix.lstrip('.').upper() or 'JSON'} in {path}: {exc}"
        ) from exc
    if not isinstance(data, dict):
        raise ConfigError(f"expected an object at the top of {path}, got {type(data).__name__}")
    outer = data.setdefault("outer", {})
    if isinstance(outer, dict):  # a new run: the current defaults unless the file names others
        outer.setdefault("anomaly_rule", OuterConfig().anomaly_rule)
        outer.setdefault("exchange", OuterConfig().exchange)
    return TrainConfig.from_dict(data)


def _known(cls: type[Any], data: Any, where: str) -> dict[str, Any]:
    if not isinstance(data, Mapping):
        raise ConfigError(f"{where} must be an object, got {type(data).__name__}")
    names = {f.name for f in fields(cls)}
    unknown = sorted(set(data) - names)
    if unknown:
        raise ConfigError(
            f"{where} has unknown field(s) {', '.join(unknown)}; "
            f"expected some of {', '.join(sorted(names))}"
        )
    # JSON (and canonical JSON especially) writes 1.0 as 1: give float fields their floats back.
    floats = {f.name for f in fields(cls) if str(f.type).split(" | ")[0] == "float"}
    return {
        k: float(v) if k in floats and isinstance(v, int) and not isinstance(v, bool) else v
        for k, v in data.items()
    }


def _check(config: object, name: str, ok: bool, expected: str) -> None:
    if not ok:
        raise ConfigError(
            f"{type(config).__name__}.{name} must be {expected}, got {getattr(config, name)!r}"
        )


def with_overrides(
    config: TrainConfig,
    *,
    clusters: int | None = None,
    stages: int | None = None,
    data_parallel: int | None = None,
    outer_steps: int | None = None,
    inner_steps: int | None = None,
    data_paths: tuple[str, ...] = (),
    text_field: str | None = None,
    run_id: str | None = None,
    method: str | None = None,
    seed: int | None = None,
) -> TrainConfig:
    """``config`` with the command-line overrides that were given (None / empty: keep)."""
    changes: dict[str, Any] = {
        name: value
        for name, value in (
            ("clusters", clusters),
            ("stages", stages),
            ("data_parallel", data_parallel),
            ("outer_steps", outer_steps),
            ("inner_steps", inner_steps),
            ("run_id", run_id),
            ("seed", seed),
        )
        if value is not None
    }
    if data_paths or text_field is not None:
        changes["data"] = replace(
            config.data,
            paths=data_paths or config.data.paths,
            text_field=config.data.text_field if text_field is None else text_field,
        )
    if method is not None:
        if method not in METHODS:
            raise ConfigError(
                f"TrainConfig.method must be one of {', '.join(METHODS)}, got {method!r}"
            )
        changes["method"] = method
        if method != "allreduce":
            changes["outer"] = replace(config.outer, kind=method)
    return replace(config, **changes)
