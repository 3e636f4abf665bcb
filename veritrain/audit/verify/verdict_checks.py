"""Check 12: every applied exchange's verdicts and contribution scores (docs/outer-algorithm.md
§4, docs/auditing.md).

12a. From the records, every step: each applied round judges exactly the clusters of the quorum
     recorded by the step that contributed it (the rules, medians and majority count those
     only), and the rules of trainer/outer/verdict.py in the version and with the thresholds
     of the genesis (``outer.anomaly_rule``; absent: v1), replayed
     round by round on the numbers each verdict records (norm, cosines, scores; which payloads
     repeat an earlier round's comes from the recorded digests), give exactly the recorded
     flags, reasons and exclusions -- a flag dropped, added or not acted on fails here.
12b. From the contributions, for a sample of steps (every step with a flag, the newest, and a
     random draw; all of them with ``--deep`` or for a run of at most ``ALL_STEPS`` steps): the
     payloads stored with the checkpoint (one per cluster of the round's quorum) hash to the
     recorded digests; cluster 0's outer
     algorithm of every stage, rebuilt from the previous checkpoint, recomputes the statistics
     and the scores (the whole model in this process, on the recorded data: trainer/outer/
     replay.py) and so the verdicts; and the global parameters it reaches with the recorded
     verdicts are the step's checkpoint weights. Bitwise where the genesis fixed bitwise and
     this machine is in its hardware class; otherwise norms and cosines within a relative
     ``MEASURE_TOLERANCE``, scores within the policy's metric delta, weights within the
     published parameter distance (veritrain/policy.py).
"""

from __future__ import annotations

import tempfile
from collections.abc import Mapping, Sequence
from pathlib import Path

import torch
from safetensors.torch import load_file

from records import Genesis, OuterStep
from records.outer_step import AppliedExchange, CheckpointRef, ClusterVerdict
from storage.errors import StorageError
from trainer.api import assignment_rule
from trainer.checkpoint_layout import exchange_file, model_file, outer_file, read_exchange
from trainer.config import TrainConfig
from trainer.data.reader import BatchReader
from trainer.errors import TrainerError
from trainer.outer import payload_digest
from trainer.outer.errors import OuterError
from trainer.outer.replay import RecordedRound, ReplayedStep, replay_step
from trainer.outer.verdict import Measures, VerdictHistory, VerdictRule, decide
from veritrain.audit.modes import choose_mode
from veritrain.audit.verify.data_checks import DataIndex
from veritrain.audit.verify.expect import Mismatch
from veritrain.audit.verify.report import CheckResult, Report
from veritrain.audit.verify.sampling import sample
from veritrain.errors import VeritrainError
from veritrain.policy import PARAMETER_DISTANCE_BOUND
from veritrain.sources import RunSource, read_verified
from veritrain.sources.downloads import download_object, read_checkpoint_manifest
from veritrain.sources.recorded_run import LogEntry, RecordedRun

PAYLOAD_LIMIT = 1 << 32
"""The largest contribution payload verify reads into memory (4 GiB: a stage of a 100B-parameter
model at rank 64 is ~100 MB)."""

CHECK = 12
ALL_STEPS = 8
"""Runs of at most this many steps have every step recomputed (12b)."""
SAMPLED_STEPS = 3
MEASURE_TOLERANCE = 1e-6
"""Relative tolerance of norms and cosines recomputed on other hardware (float64 sums of the
same fp32 coordinates differ in their last bits, not in the sixth digit)."""
SHARD_LIMIT = 1 << 30
_ERRORS = (StorageError, VeritrainError, TrainerError, OuterError, ValueError)


def check_verdicts(
    report: Report,
    run: RecordedRun,
    source: RunSource,
    config: TrainConfig | None,
    data: DataIndex | None,
    *,
    deep: bool,
    signed_root: bytes,
) -> None:
    """12a and 12b (module docstring)."""
    result = report.check(CHECK)
    if config is None:
        result.fail("verdicts not checked: the configuration cannot be read (check 10)")
        return
    # Rounds no earlier step contributed are check 6's to report; the rest are judged here.
    contributed = {s.step for _, s in run.outer_steps}
    steps = [
        (e, s)
        for e, s in run.outer_steps
        if s.applied and all(a.round in contributed and a.round <= s.step for a in s.applied)
    ]
    _replay_rules(result, steps, config, _round_clusters(run))
    if not config.outer.anomaly_checks or not steps:
        return
    if data is None:
        result.fail(
            "verdicts not recomputed from the contributions: "
            "the data manifest cannot be read (check 8)"
        )
        return
    flagged = [e.index for e, s in steps if s.anomalies]
    indices = [e.index for e, _ in steps]
    chosen = (
        set(indices)
        if deep or len(indices) <= ALL_STEPS
        else {
            *flagged,
            indices[-1],
            *sample(
                signed_root, [i for i in indices if i not in flagged], SAMPLED_STEPS, "verdicts"
            ),
        }
    )
    mode, why = _mode(run, config)
    reader = _reader(source, config, data)
    for entry, step in steps:
        if entry.index in chosen:
            try:
                _recompute(
                    result, run, source, config, reader, entry, step, bitwise=mode == "bitwise"
                )
            except _ERRORS as exc:
                result.fail(f"verdicts not recomputed: {exc}", index=entry.index, step=step.step)
    result.notes.append(
        f"rules {config.outer.anomaly_rule} (the genesis') replayed on every round; "
        f"{len(chosen)} of {len(steps)} steps recomputed from their "
        f"contributions ({mode}: {why})"
    )


# -- 12a ------------------------------------------------------------------------------------


def _round_clusters(run: RecordedRun) -> dict[int, tuple[int, ...]]:
    """Round -> the clusters that contributed to it: the quorum its step recorded."""
    return {s.step: s.quorum.clusters for _, s in run.outer_steps}


def _replay_rules(
    result: CheckResult,
    steps: Sequence[tuple[LogEntry, OuterStep]],
    config: TrainConfig,
    round_clusters: Mapping[int, Sequence[int]],
) -> None:
    rule = VerdictRule.from_config(config.outer)
    history = VerdictHistory(rule.history)
    recent: list[dict[int, set[str]]] = []  # per earlier round: stage -> its payload digests
    for entry, step in steps:
        for applied in step.applied:
            result.checked += 1
            if not config.outer.anomaly_checks:
                if applied.verdicts:
                    result.fail(
                        f"round {applied.round} records verdicts, the genesis turns the checks off",
                        index=entry.index,
                        step=step.step,
                    )
                continue
            if not applied.verdicts:
                result.fail(
                    f"round {applied.round} records no verdicts, the genesis turns the checks on",
                    index=entry.index,
                    step=step.step,
                )
                continue
            clusters = list(round_clusters[applied.round])
            judged = [v.cluster for v in applied.verdicts]
            if judged != clusters:
                result.fail(
                    f"round {applied.round}: expected verdicts on the clusters of its quorum "
                    f"{clusters}, got verdicts on {judged}",
                    index=entry.index,
                    step=step.step,
                )
                continue
            by_stage = _digests_by_stage(applied)
            earlier = {s: set().union(*(r.get(s, set()) for r in recent)) for s in by_stage}
            measures = [
                Measures(
                    norm=v.norm,
                    agreement=v.agreement,
                    previous=v.previous,
                    repeated=any(by_stage[s].get(v.cluster) in earlier[s] for s in by_stage),
                )
                for v in applied.verdicts
            ]
            scores = (
                [v.score for v in applied.verdicts] if config.outer.contribution_scores else None
            )
            expected = decide(rule, measures, scores, history, clusters=clusters)
            for want, got in zip(expected, applied.verdicts, strict=True):
                if (want.flags, want.reason, want.excluded) != (
                    got.flags,
                    got.reason,
                    got.excluded,
                ):
                    result.fail(
                        f"round {applied.round} cluster {got.cluster}: "
                        f"the rules give flags {list(want.flags)}, "
                        f"{'excluded' if want.excluded else 'kept'}; "
                        f"the entry records {list(got.flags)}, "
                        f"{'excluded' if got.excluded else 'kept'}",
                        index=entry.index,
                        step=step.step,
                    )
            history.accept(applied.verdicts)
            recent = [*recent, {s: set(d.values()) for s, d in by_stage.items()}][-rule.history :]


def _digests_by_stage(applied: AppliedExchange) -> dict[int, dict[int, str]]:
    out: dict[int, dict[int, str]] = {}
    for c in applied.contribution_digests:
        out.setdefault(c.stage, {})[c.cluster] = c.digest
    return out


# -- 12b ------------------------------------------------------------------------------------


def _recompute(
    result: CheckResult,
    run: RecordedRun,
    source: RunSource,
    config: TrainConfig,
    reader: BatchReader,
    entry: LogEntry,
    step: OuterStep,
    *,
    bitwise: bool,
) -> None:
    with tempfile.TemporaryDirectory(prefix="veritrain-verdicts-") as folder:
        work = Path(folder)
        states = None
        if step.step > 0:
            before = run.step(step.step - 1).checkpoint
            states = [
                _tensor_file(source, before, outer_file(0, s), work / "before")
                for s in range(config.stages)
            ]
        exchanged = (
            # No cluster holds every payload of an owner-reduce round: each is read from the
            # store by the digest its cluster signed.
            _signed_payloads(source, step)
            if config.outer.owner_reduce
            else [
                read_exchange(
                    _tensor_file(source, step.checkpoint, exchange_file(s), work / "after")
                )
                for s in range(config.stages)
            ]
        )
        rounds = [_recorded_round(run, step, applied, exchanged) for applied in step.applied]
        replayed = replay_step(config, states, rounds, reader)
        weights = _model_weights(source, step, config, work / "after")
    for applied, again in zip(step.applied, replayed.rounds, strict=True):
        result.checked += 1
        for problem in _compare_verdicts(
            applied.verdicts,
            again.verdicts,
            bitwise=bitwise,
            delta=run.genesis.verification_policy.fallback.delta,
        ):
            result.fail(f"round {applied.round}: {problem}", index=entry.index, step=step.step)
    wrong_weights = _compare_weights(replayed, weights, bitwise=bitwise)
    if wrong_weights:
        result.fail(wrong_weights, index=entry.index, step=step.step)


def _signed_payloads(
    source: RunSource, step: OuterStep
) -> list[dict[int, dict[int, torch.Tensor]]]:
    """Per stage: round -> cluster -> payload, for every contribution the step applied, read
    by its recorded digest (and re-hashed)."""
    stages: dict[int, dict[int, dict[int, torch.Tensor]]] = {}
    for applied in step.applied:
        for c in applied.contribution_digests:
            data = read_verified(source, c.digest, max_size=PAYLOAD_LIMIT)
            stages.setdefault(c.stage, {}).setdefault(applied.round, {})[c.cluster] = (
                torch.frombuffer(bytearray(data), dtype=torch.uint8)
            )
    return [stages.get(s, {}) for s in range(max(stages, default=-1) + 1)]


def _recorded_round(
    run: RecordedRun,
    step: OuterStep,
    applied: AppliedExchange,
    exchanged: Sequence[Mapping[int, Mapping[int, torch.Tensor]]],
) -> RecordedRound:
    """One applied round: the clusters of its quorum, their payloads (checked against the
    recorded digests), its data and signals from the step that contributed it."""
    contributed = run.step(applied.round)
    clusters = list(contributed.quorum.clusters)
    by_stage = _digests_by_stage(applied)
    payloads = []
    for stage, rounds in enumerate(exchanged):
        if applied.round not in rounds:
            raise Mismatch(
                f"the checkpoint stores no payloads of round {applied.round} for stage {stage}"
            )
        gathered = rounds[applied.round]
        expected = by_stage.get(stage, {})
        actual = {c: payload_digest(p) for c, p in gathered.items()}
        if actual != expected:
            wrong = sorted(
                c for c in set(actual) | set(expected) if actual.get(c) != expected.get(c)
            )
            raise Mismatch(
                f"stored payloads of round {applied.round}, stage {stage}: "
                f"clusters {wrong} do not hash to the recorded digests"
            )
        if sorted(gathered) != clusters:
            raise Mismatch(
                f"stored payloads of round {applied.round}, "
                f"stage {stage}: expected the clusters of "
                f"its quorum {clusters}, got {sorted(gathered)}"
            )
        payloads.append([gathered[c] for c in clusters])
    return RecordedRound.of(contributed, applied, payloads)


def _compare_verdicts(
    recorded: Sequence[ClusterVerdict],
    again: Sequence[ClusterVerdict],
    *,
    bitwise: bool,
    delta: float,
) -> list[str]:
    if len(recorded) != len(again):
        return [f"{len(recorded)} verdicts recorded, {len(again)} recomputed"]
    problems = []
    for want, got in zip(recorded, again, strict=True):
        label = f"cluster {want.cluster}"
        if bitwise:
            differing = [
                f
                for f in ("norm", "agreement", "previous", "score", "flags", "reason", "excluded")
                if getattr(want, f) != getattr(got, f)
            ]
            if differing:
                shown = "; ".join(
                    f"{f} recorded {getattr(want, f)!r}, recomputed {getattr(got, f)!r}"
                    for f in differing
                )
                problems.append(f"{label}: {shown}")
            continue
        for name in ("norm", "agreement", "previous"):
            a, b = getattr(want, name), getattr(got, name)
            if (a is None) != (b is None) or (
                a is not None
                and b is not None
                and abs(a - b) > MEASURE_TOLERANCE * max(abs(a), abs(b), 1e-12)
            ):
                problems.append(
                    f"{label}: {name} recorded {a!r}, recomputed "
                    f"{b!r} (relative tolerance {MEASURE_TOLERANCE})"
                )
        if (want.score is None) != (got.score is None):
            problems.append(f"{label}: score recorded {want.score!r}, recomputed {got.score!r}")
        elif want.score is not None and got.score is not None:
            for name in ("held_out", "own_data"):
                a, b = getattr(want.score, name), getattr(got.score, name)
                if abs(a - b) > delta:
                    problems.append(
                        f"{label}: {name} score recorded {a:.6g}, "
                        f"recomputed {b:.6g} (|Δ| > {delta})"
                    )
    return problems


def _compare_weights(
    replayed: ReplayedStep, weights: Mapping[str, torch.Tensor], *, bitwise: bool
) -> str | None:
    """The recorded verdicts applied to the stored payloads give the checkpoint's weights."""
    if set(weights) != set(replayed.after):
        return (
            f"checkpoint weights name {sorted(set(weights) ^ set(replayed.after))[:5]} "
            "differently from the model's parameters"
        )
    for name, theta in sorted(replayed.after.items()):
        stored = weights[name].to(theta.dtype)
        if bitwise:
            if not torch.equal(stored, theta):
                return (
                    f"{name}: the recorded verdicts applied to the "
                    "stored payloads do not give the checkpoint's weights"
                )
            continue
        update = float(torch.linalg.vector_norm((theta - replayed.before[name]).double()))
        distance = float(torch.linalg.vector_norm((stored - theta).double()))
        if distance > PARAMETER_DISTANCE_BOUND * max(update, 1e-12):
            return (
                f"{name}: the checkpoint's weights are "
                f"{distance / max(update, 1e-12):.3g} of the step's update away "
                f"from the recomputed ones (bound {PARAMETER_DISTANCE_BOUND})"
            )
    return None


# -- objects --------------------------------------------------------------------------------


def _tensor_file(
    source: RunSource, checkpoint: CheckpointRef, name: str, directory: Path
) -> dict[str, torch.Tensor]:
    digests = read_checkpoint_manifest(source, checkpoint).digests
    if name not in digests:
        raise Mismatch(f"the checkpoint {checkpoint.manifest_root[:16]}… has no {name}")
    directory.mkdir(parents=True, exist_ok=True)
    target = directory / name
    if not target.is_file():
        download_object(source, digests[name], target)
    return load_file(str(target))


def _model_weights(
    source: RunSource, step: OuterStep, config: TrainConfig, directory: Path
) -> dict[str, torch.Tensor]:
    weights: dict[str, torch.Tensor] = {}
    for stage in range(config.stages):
        weights.update(
            _tensor_file(source, step.checkpoint, model_file(stage, config.stages), directory)
        )
    return weights


class _SourceShards:
    """The run's shards, read from the source and re-hashed as they arrive (``ShardSource``)."""

    def __init__(self, source: RunSource) -> None:
        self.source = source

    def read(self, sha256: str) -> bytes:
        return read_verified(self.source, sha256, SHARD_LIMIT)


def _reader(source: RunSource, config: TrainConfig, data: DataIndex) -> BatchReader:
    return BatchReader(data.manifest, assignment_rule(config, data.manifest), _SourceShards(source))


def _mode(run: RecordedRun, config: TrainConfig) -> tuple[str, str]:
    genesis = run.genesis
    assert isinstance(genesis, Genesis)
    choice = choose_mode(genesis, config)
    return choice.mode, choice.reason
