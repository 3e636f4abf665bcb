"""Configuration of the outer algorithm (plain DiLoCo or DiLoCoX).

One flat, keyword-only dataclass so that a run's outer hyperparameters serialise to one JSON
object for the ledger's ``run.genesis`` entry. Fields that only DiLoCoX reads (compression,
overlap, adaptive rank) are ignored when ``kind == "diloco"``: plain DiLoCo is always blocking,
uncompressed fp32 (Douillard et al. 2023, "DiLoCo", arXiv 2311.08105). The DiLoCoX defaults
below were chosen from the measurements in docs/outer-algorithm.md.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, replace
from typing import Any, ClassVar, Literal

from trainer.errors import ConfigError

OuterKind = Literal["diloco", "dilocox"]
QuantBits = Literal[2, 4, 8, 16, 32]
DenseBits = Literal[8, 16]
DelayProxy = Literal["none", "own", "eager", "anchored"]
ErrorFeedback = Literal["local", "buffer", "none"]
VerdictRuleName = Literal["veritrain.verdict/v1", "veritrain.verdict/v2"]
ExchangeName = Literal["all-gather", "owner-reduce"]
ExchangeSetting = Literal["auto", "all-gather", "owner-reduce"]
RECORDED_WITHOUT_EXCHANGE: ExchangeName = "all-gather"
"""How a configuration that names no ``exchange`` combined its payloads: it was written before
there was a choice, or it all-gathered (``to_dict`` leaves the all-gather unnamed, so an old
genesis reads back as itself; ``TrainConfig.from_dict`` reads an absent name so)."""
OWNER_REDUCE_FROM_CLUSTERS = 3
"""The fewest clusters at which ``exchange="auto"`` combines by owners: at C = 2 both exchanges
send one payload per cluster per round and the owner-reduce only adds the mean's
re-quantisation (docs/benchmarks.md, "Four clusters, owner-reduce")."""
VERDICT_RULES: tuple[VerdictRuleName, ...] = ("veritrain.verdict/v1", "veritrain.verdict/v2")
RECORDED_WITHOUT_RULE: VerdictRuleName = "veritrain.verdict/v1"
"""The rules a configuration that names none was judged by: it was written before the rules had
versions (``TrainConfig.from_dict`` reads it so, and ``to_dict`` leaves v1 unnamed, so an old
genesis reads back as itself)."""


@dataclass(frozen=True, kw_only=True, eq=False)
class OuterConfig:
    """Hyperparameters of the outer loop; validated on construction."""

    kind: OuterKind = "diloco"
    """``"diloco"``: blocking, uncompressed fp32 pseudo-gradients. ``"dilocox"``: low-rank +
    quantised pseudo-gradients with error feedback, optionally overlapped with a one-step delay."""

    outer_lr: float | None = None
    """Outer learning rate. None: 0.7 (DiLoCo) when blocking, 0.5 with the one-step-delay
    overlap (measured: docs/outer-algorithm.md). Read the resolved value from ``lr``."""
    outer_momentum: float | None = None
    """Outer momentum. None: 0.9 (DiLoCo) when blocking, 0.8 with the one-step-delay overlap.
    Read the resolved value from ``momentum``."""
    nesterov: bool = True
    """Nesterov momentum in the outer SGD step (DiLoCo uses it; False gives heavy-ball SGD)."""

    # --- compression (DiLoCoX only) -------------------------------------------------------
    compression: bool = True
    """Compress pseudo-gradients (False sends fp32 like DiLoCo: for ablations of the overlap)."""
    rank: int = 28
    """Low-rank rank of the first round (of every round when ``adaptive_rank`` is off)."""
    bits: QuantBits = 4
    """Bits per low-rank factor element: 8 or 4 (block absmax quantisation), 2 (a four-level
    grid scaled to each block's RMS; quantize.py), 16 (bf16) or 32."""
    quant_block: int = 64
    """Elements per quantisation block; each block carries one bf16 scale."""
    error_feedback: ErrorFeedback = "local"
    """What happens to what compression dropped (docs/outer-algorithm.md): ``"local"`` keeps it
    in the cluster's parameters (the next round starts from ``θ − e`` and its pseudo-gradient,
    measured from ``θ``, carries it); ``"buffer"`` adds it to the next pseudo-gradient (classic
    error feedback, Seide et al. 2014; Karimireddy et al. 2019); ``"none"`` drops it."""
    two_sided: bool = False
    """Project on a left and a right basis every round (``(n+m)·r`` elements per matrix, both
    sides of the power iteration advance each round); False alternates one side per round."""
    min_compress_dim: int = 32
    """Matrices whose smaller side is below this, and all 1-D tensors, are sent whole
    (``dense_bits``): their factors would not be smaller than the tensor itself."""
    dense_bits: DenseBits = 16
    """Bits per element of the tensors sent whole: 16 (bf16) or 8 (int8 blocks of
    ``quant_block``, error-fed like the factors)."""

    # --- adaptive rank (DiLoCoX only) -----------------------------------------------------
    adaptive_rank: bool = False
    """Let the rank follow the pseudo-gradients' spectral energy (off by default: on the
    measured model a fixed rank gave the better loss per byte, docs/outer-algorithm.md)."""
    min_rank: int = 8
    """Lower bound of the adaptive rank."""
    max_rank: int = 64
    """Upper bound of the adaptive rank (it only grows when the loss stalls)."""
    rank_energy: float = 0.995
    """Keep the smallest rank whose leading directions hold this fraction of the captured
    spectral energy."""
    stall_rounds: int = 3
    """Rounds without a ``stall_tolerance`` relative loss improvement that count as a stall."""
    stall_tolerance: float = 0.002
    """Relative improvement of the mean training loss below which a round counts as stalled."""

    # --- overlap (DiLoCoX only) -----------------------------------------------------------
    overlap: bool = True
    """One-step-delay overlap: round t's exchange runs while round t+1 computes."""
    delay_proxy: DelayProxy = "anchored"
    """Where a round starts while the previous exchange is in flight (docs/outer-algorithm.md):
    ``"none"`` from the global parameters, which lag one round; ``"own"`` from a look-ahead
    outer step that stands this cluster's own fresh pseudo-gradient in for the missing mean;
    ``"eager"`` from one that uses the last mean with this cluster's part replaced by its
    fresh one (Kale et al. 2025, "Eager updates"); ``"anchored"`` (default) from ``"own"``'s
    look-ahead minus half of the cluster's current offset from θ, which keeps the clusters from
    drifting apart."""
    sync_rounds: int = 0
    """Warm-up of the overlap: the first ``sync_rounds`` rounds are applied before the next round
    computes (blocking), so the clusters start round ``sync_rounds`` from a common θ instead of
    each from its own end point; the one-step delay starts after them (0: from round 0, as runs
    recorded before this field). Ignored when not ``overlapped``."""

    apply_delay: int | None = None
    """The short overlap (Streaming DiLoCo, arXiv 2501.18512 §2.3; docs/outer-algorithm.md §3):
    round t's exchange is applied ``apply_delay`` inner steps into round t+1 instead of at its
    end, and each cluster keeps the progress of those steps on top of θₜ₊₁ (minus its
    error-feedback residual). Rounds start from θ, not from a look-ahead, so ``delay_proxy`` is
    not used. A round shorter than the delay takes it after its H − 1st inner step (before its
    first when H = 1). None: the one-step delay (as runs recorded before this field). Ignored
    when not ``overlapped`` and with data-parallel replicas (read the delay in use from
    ``delay_in_use``; the genesis records that one)."""

    exchange: ExchangeSetting = "all-gather"
    """How the clusters combine a round's payloads (docs/outer-algorithm.md §7); read the one in
    use from ``exchange_in_use``. ``"all-gather"``: every cluster receives every payload,
    ``(C−1)`` payloads per cluster per round. ``"owner-reduce"`` (DiLoCoX only): each
    contributing cluster owns a share of the payload's tensors, receives every cluster's bytes
    of its share, averages them in cluster order and re-encodes the mean with the codec; the
    mean shares are then all-gathered -- about ``2(C−1)/C`` payloads per cluster per round,
    which does not grow with C (ignored by plain DiLoCo and with ``compression`` off, which
    all-gather). The mean is quantised once more (not error-fed), and no cluster holds another's
    whole contribution, so verdicts use the statistics alone (no contribution scores); every
    payload is still signed whole and kept, and ``veritrain verify`` recomputes the mean from
    them (trainer/outer/owner_reduce.py). ``"auto"``: the owner-reduce for compressed DiLoCoX
    with ``OWNER_REDUCE_FROM_CLUSTERS`` (3) or more clusters, one replica per stage and
    ``anomaly_scores`` not set to True; the all-gather otherwise -- at C = 2 both send one
    payload and the owner-reduce would only add its re-quantisation. Resolved from the run's
    topology, which ``TrainConfig`` binds (``for_run``; unbound, ``"auto"`` all-gathers), and
    recorded resolved in the genesis, never as ``"auto"``. The all-gather is the default: a
    cluster that restarts cannot rejoin an owner-reduce run yet (it listens to a round whose
    phases 2 and 3 the contributors run when they apply it, after the quorum has moved on, so
    it falls a round behind at every try: docs/outer-algorithm.md §7); ``bench comm`` asks
    for ``"auto"``."""

    # --- verdicts on contributions (both kinds; trainer/outer/verdict.py) -----------------
    anomaly_checks: bool = True
    """Judge every cluster's contribution to every round (one verdict per cluster, the same in
    every stage); off: no verdicts, every contribution is averaged."""
    anomaly_rule: VerdictRuleName = "veritrain.verdict/v2"
    """Which version of the rules judges the contributions (trainer/outer/verdict.py), fixed at
    genesis so that a run is verified by the rules it was trained under. ``v2`` (new runs):
    rule 4 (``direction``) compares a cluster's cosine with this round's other clusters' cosines,
    not with the recent rounds' -- honest pseudo-gradients decorrelate together as the loss
    flattens, and v1's reference from earlier rounds flagged both honest clusters of ``veritrain
    demo`` at its last step. ``v1``: runs recorded before v2."""
    anomaly_exclude: bool = True
    """Leave flagged contributions out of the average when ``anomaly_exclude_min_clusters`` or
    more clusters are present and the unflagged ones are a majority (non-finite contributions
    are always left out)."""
    anomaly_exclude_min_clusters: int = 3
    """Fewest clusters present for an exclusion: with two, a disagreement does not say which
    cluster is wrong, so flags are recorded and nothing is excluded."""
    anomaly_norm_ratio: float = 10.0
    """A norm more than this many times the reference norm is flagged."""
    anomaly_min_norm_ratio: float = 0.6
    """... and so is one below this share of the median norm of the other clusters' this round
    (honest clusters of one round were within 15 % of each other in ``veritrain bench poison``;
    one that took H/4 inner steps sent 0.4-0.55 of their norm)."""
    anomaly_min_cosine: float = 0.02
    """A contribution whose cosine with the other clusters' mean is below this is flagged."""
    anomaly_cosine_ratio: float = 0.3
    """... and so is one below this share of the typical (median of recent accepted) cosine."""
    anomaly_history: int = 8
    """Rounds of accepted norms and cosines that make the references (and of payloads a new one
    must not repeat)."""
    anomaly_scores: bool | None = None
    """Score every contribution by what it does to the loss when applied alone to the global
    parameters (trainer/outer/contribution_score.py); needs the runtime's model, so an outer
    algorithm built without one judges on the statistics alone. None (default): wherever the
    exchange allows it -- on with the all-gather, off with the owner-reduce, where no cluster
    holds a whole contribution; True also keeps ``exchange="auto"`` on the all-gather. Read the
    value in use from ``contribution_scores`` (the genesis records it)."""
    anomaly_held_out_ratio: float = 0.5
    """A contribution whose held-out loss gain is below this share of the other clusters'
    median gain is flagged ..."""
    anomaly_held_out_margin: float = 0.02
    """... when it is also this many nats below that median: late in a run honest gains shrink
    towards the noise of one probe batch (honest clusters of one round differed by up to 0.012
    nats there in ``veritrain bench poison``), and a relative rule alone flags them."""
    anomaly_own_data_check: bool = False
    """Flag a contribution by its own-data score (rule ``own_data``). Off by default: on the
    tiny preset an honest cluster's extra gain on its own windows is within the noise of the
    held-out and own-data batches -- the rule flagged 15 % of honest contributions and caught no
    cluster that trained on other data (``veritrain bench poison``, docs/outer-algorithm.md
    §4). The scores are recorded either way."""
    anomaly_own_data_ratio: float = 0.0
    """With the check on: a contribution whose extra gain on its own data (over held-out data)
    is below this share of the other clusters' median is flagged (0: one that gains less on its
    own data than on held-out data while the others gain more)."""
    anomaly_probe_batches: int = 1
    """Held-out batches (the first ones) every contribution is scored on."""
    anomaly_own_batches: int = 2
    """Batches of the cluster's own assigned data, drawn from the round's inner steps, that it
    is scored on."""

    # --- adaptive inner steps (runtime reads these; see trainer/outer/adaptive.py) --------
    adaptive_inner_steps: bool = False
    """Let the runtime change H between rounds so the exchange stays hidden behind compute."""
    min_inner_steps: int = 10
    """Lower bound of the adaptive H."""
    max_inner_steps: int = 500
    """Upper bound of the adaptive H."""

    def __post_init__(self) -> None:
        if self.kind not in ("diloco", "dilocox"):
            raise ConfigError(f"OuterConfig.kind must be 'diloco' or 'dilocox', got {self.kind!r}")
        _require(self, "outer_lr", math.isfinite(self.lr) and self.lr > 0, "> 0")
        _require(
            self,
            "delay_proxy",
            self.delay_proxy in ("none", "own", "eager", "anchored"),
            "'none', 'own', 'eager' or 'anchored'",
        )
        _require(
            self,
            "error_feedback",
            self.error_feedback in ("local", "buffer", "none"),
            "'local', 'buffer' or 'none'",
        )
        _require(self, "outer_momentum", 0.0 <= self.momentum < 1.0, "in [0, 1)")
        _require(self, "rank", self.rank >= 1, ">= 1")
        _require(self, "bits", self.bits in (2, 4, 8, 16, 32), "one of 2, 4, 8, 16, 32")
        _require(self, "dense_bits", self.dense_bits in (8, 16), "8 or 16")
        _require(
            self,
            "quant_block",
            self.quant_block >= 2 and self.quant_block % 2 == 0,
            "an even number >= 2",
        )
        _require(self, "min_compress_dim", self.min_compress_dim >= 1, ">= 1")
        _require(self, "min_rank", self.min_rank >= 1, ">= 1")
        _require(self, "max_rank", self.max_rank >= self.min_rank, f">= min_rank ({self.min_rank})")
        _require(
            self,
            "rank",
            self.min_rank <= self.rank <= self.max_rank,
            f"between min_rank ({self.min_rank}) and max_rank ({self.max_rank})",
        )
        _require(self, "rank_energy", 0.0 < self.rank_energy <= 1.0, "in (0, 1]")
        _require(self, "stall_rounds", self.stall_rounds >= 1, ">= 1")
        _require(self, "stall_tolerance", self.stall_tolerance >= 0.0, ">= 0")
        _require(
            self,
            "anomaly_rule",
            self.anomaly_rule in VERDICT_RULES,
            " or ".join(repr(r) for r in VERDICT_RULES),
        )
        _require(
            self,
            "exchange",
            self.exchange in ("auto", "all-gather", "owner-reduce"),
            "'auto', 'all-gather' or 'owner-reduce'",
        )
        if self.owner_reduce:
            _require(
                self,
                "anomaly_scores",
                self.anomaly_scores is not True,
                "False or None with exchange 'owner-reduce' "
                "(no cluster holds a whole contribution)",
            )
        _require(self, "anomaly_norm_ratio", self.anomaly_norm_ratio > 1.0, "> 1")
        _require(
            self, "anomaly_min_norm_ratio", 0.0 <= self.anomaly_min_norm_ratio < 1.0, "in [0, 1)"
        )
        _require(self, "anomaly_min_cosine", -1.0 <= self.anomaly_min_cosine < 1.0, "in [-1, 1)")
        _require(self, "anomaly_cosine_ratio", 0.0 <= self.anomaly_cosine_ratio < 1.0, "in [0, 1)")
        _require(self, "anomaly_history", self.anomaly_history >= 1, ">= 1")
        _require(
            self, "anomaly_exclude_min_clusters", self.anomaly_exclude_min_clusters >= 2, ">= 2"
        )
        _require(
            self, "anomaly_held_out_ratio", 0.0 <= self.anomaly_held_out_ratio < 1.0, "in [0, 1)"
        )
        _require(self, "anomaly_held_out_margin", self.anomaly_held_out_margin >= 0.0, ">= 0")
        _require(
            self, "anomaly_own_data_ratio", 0.0 <= self.anomaly_own_data_ratio < 1.0, "in [0, 1)"
        )
        _require(self, "anomaly_probe_batches", self.anomaly_probe_batches >= 1, ">= 1")
        _require(self, "anomaly_own_batches", self.anomaly_own_batches >= 1, ">= 1")
        _require(self, "sync_rounds", self.sync_rounds >= 0, ">= 0")
        if self.apply_delay is not None:
            _require(self, "apply_delay", self.apply_delay >= 1, ">= 1 (or None)")
        _require(self, "min_inner_steps", self.min_inner_steps >= 1, ">= 1")
        _require(
            self,
            "max_inner_steps",
            self.max_inner_steps >= self.min_inner_steps,
            f">= min_inner_steps ({self.min_inner_steps})",
        )

    @property
    def lr(self) -> float:
        """The outer learning rate in use (``outer_lr`` or its kind-dependent default). Left
        unresolved in the field so that ``dataclasses.replace(config, overlap=...)`` picks the
        default of the new mode."""
        if self.outer_lr is not None:
            return self.outer_lr
        return 0.5 if self.overlapped else 0.7

    @property
    def momentum(self) -> float:
        """The outer momentum in use (``outer_momentum`` or its kind-dependent default)."""
        if self.outer_momentum is not None:
            return self.outer_momentum
        return 0.8 if self.overlapped else 0.9

    @property
    def delay_in_use(self) -> int | None:
        """τ of the short overlap when the run uses it: ``apply_delay`` on an overlapped run of
        one replica per stage (data-parallel replicas take their leader's parameters at the
        step's end, so their runs keep the one-step delay)."""
        if not self.overlapped or self.apply_delay is None:
            return None
        if self._run is not None and self._run[1] > 1:
            return None
        return self.apply_delay

    @property
    def look_ahead(self) -> bool:
        """True when a round starts from a look-ahead of θ while the previous exchange is in
        flight (the one-step delay); False when blocking or with the short overlap
        (``apply_delay``), where every round's pseudo-gradient is measured from θ."""
        return self.overlapped and self.delay_in_use is None

    def synchronous(self, round: int) -> bool:
        """True when round ``round``'s exchange is applied before the next round computes:
        every round of a blocking run, the warm-up rounds (``sync_rounds``) of an overlapped
        one."""
        return not self.overlapped or round < self.sync_rounds

    @property
    def compressed(self) -> bool:
        """True when pseudo-gradients go through low-rank compression."""
        return self.kind == "dilocox" and self.compression

    _run: ClassVar[tuple[int, int] | None] = None
    # The run's (clusters, data_parallel) that ``exchange="auto"`` and ``anomaly_scores=None``
    # resolve from, bound on an instance by ``for_run`` (TrainConfig does it). Not a field: it
    # is the run's topology, recorded by TrainConfig, and ``dataclasses.replace`` leaves a copy
    # unbound until a TrainConfig binds it to its own cluster count again.

    def for_run(self, *, clusters: int, data_parallel: int = 1) -> OuterConfig:
        """This configuration bound to a run of ``clusters`` clusters of ``data_parallel``
        replicas per stage: ``exchange_in_use``, ``owner_reduce`` and ``contribution_scores``
        resolve ``"auto"`` / None from them. The fields keep the settings, so that
        ``dataclasses.replace(run, clusters=...)`` resolves again for the new count."""
        bound = replace(self)
        object.__setattr__(bound, "_run", (clusters, data_parallel))
        return bound

    @property
    def exchange_in_use(self) -> ExchangeName:
        """The exchange the run uses: ``exchange``, with ``"auto"`` resolved (its docstring)."""
        if self.exchange != "auto":
            return self.exchange
        if self._run is None or not self.compressed or self.anomaly_scores is True:
            return "all-gather"
        clusters, data_parallel = self._run
        if clusters >= OWNER_REDUCE_FROM_CLUSTERS and data_parallel == 1:
            return "owner-reduce"
        return "all-gather"

    @property
    def owner_reduce(self) -> bool:
        """True when the clusters combine their payloads by owners (``exchange_in_use``;
        compressed DiLoCoX only: plain DiLoCo always all-gathers)."""
        return self.compressed and self.exchange_in_use == "owner-reduce"

    @property
    def contribution_scores(self) -> bool:
        """True when every contribution is scored (``anomaly_scores``, None resolved: on unless
        the payloads are combined by owners)."""
        if self.anomaly_scores is not None:
            return self.anomaly_scores
        return not self.owner_reduce

    @property
    def overlapped(self) -> bool:
        """True when the runtime should use the one-step-delay call order."""
        return self.kind == "dilocox" and self.overlap

    def with_rank(self, rank: int) -> OuterConfig:
        """This configuration at a fixed ``rank``, the adaptive-rank bounds widened to admit it
        (a rank asked for outright, by a command-line option, is not refused by the bounds)."""
        return replace(
            self, rank=rank, min_rank=min(rank, self.min_rank), max_rank=max(rank, self.max_rank)
        )

    def __eq__(self, other: object) -> bool:
        # Two configs are equal when they run the same algorithm: an unset outer lr equals the
        # value it resolves to, so ``OuterConfig(**c.to_dict()) == c``.
        return isinstance(other, OuterConfig) and self._algorithm() == other._algorithm()

    def __hash__(self) -> int:
        return hash(tuple(sorted(self._algorithm().items())))

    def _algorithm(self) -> dict[str, Any]:
        return {
            **self.to_dict(),
            "anomaly_rule": self.anomaly_rule,
            "exchange": self.exchange_in_use,
        }

    def to_dict(self) -> dict[str, Any]:
        """JSON-able form for the run's genesis entry, with the outer lr and momentum, the
        exchange and the contribution scores that are actually used written out (never
        ``"auto"`` or None: ``OuterConfig(**d)`` gives the same algorithm back; except that v1
        verdict rules and the all-gather are left unnamed, which ``TrainConfig.from_dict`` reads
        as v1 and the all-gather)."""
        data = {
            **asdict(self),
            "outer_lr": self.lr,
            "outer_momentum": self.momentum,
            "exchange": self.exchange_in_use,
            "anomaly_scores": self.contribution_scores,
        }
        if self.anomaly_rule == RECORDED_WITHOUT_RULE:
            del data["anomaly_rule"]  # as runs before rule versions recorded it
        if data["exchange"] == RECORDED_WITHOUT_EXCHANGE:
            del data["exchange"]  # as runs before the choice recorded it
        if self.sync_rounds == 0:
            del data["sync_rounds"]  # as runs before the warm-up recorded it
        data["apply_delay"] = self.delay_in_use  # what the run does, as with the exchange
        if data["apply_delay"] is None:
            del data["apply_delay"]  # as runs before the short overlap recorded it
        return data


def _require(config: OuterConfig, name: str, ok: bool, expected: str) -> None:
    if not ok:
        raise ConfigError(f"OuterConfig.{name} must be {expected}, got {getattr(config, name)!r}")
