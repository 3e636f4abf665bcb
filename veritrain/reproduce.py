"""``veritrain reproduce``: re-execute one outer step and compare it with the ledger.

1. Verify the log before anything is re-executed: the signed tree head, every entry's place in
   the hash chain and the signed root, their typed records, and the genesis (config digest,
   policy bounds). A log that does not verify is not re-executed: there would be nothing
   trustworthy to compare with.
2. Download what the step needs, verified as it arrives: the state recorded after step T-1
   (nothing for T = 0: the seed fixes the initial state), the data manifest and the shards.
3. Re-execute step T with the recorded configuration and the clusters of its recorded quorum
   (each from its own saved state, or its donor's when it joined at T), or only cluster J's H
   inner steps up to its contribution (``--cluster J``). Payloads of the round still in flight
   whose clusters saved no state (they left) are fetched by digest, verified.
4. Compare under the run's verification policy, fixed in its genesis, and say which rule is
   applied and why: ``bitwise`` on the recorded hardware class (every checkpoint file and
   contribution digest must match); elsewhere (or under a ``tolerance`` policy) the policy's
   metric within its delta *and* every model tensor within the published parameter distance
   of the recorded checkpoint (veritrain/policy.py).

Timing-dependent decisions are reported but not compared bitwise: with adaptive H the H
chosen for the *next* step depends on measured compute and communication times; the H used
in step T is read from the recorded state, so step T itself is exact.
"""

from __future__ import annotations

import json
import platform
import tempfile
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch

from records import Genesis, OuterStep
from records.generations import Generations
from records.genesis import VerificationPolicy
from storage.checkpoint import write_files, write_model_index
from storage.checkpoint.sharding import is_model_shard, tensor_nbytes
from trainer.api import Reexecution, reexecute_outer_step
from trainer.checkpoint import TRAINER_STATE, CheckpointFiles, outer_file
from trainer.config import TrainConfig
from trainer.recorder import TIMING_METRICS
from veritrain.downloads import (
    download_checkpoint,
    download_data,
    read_checkpoint_manifest,
    read_data_manifest,
)
from veritrain.errors import ReproduceError
from veritrain.generations import generate, model_state
from veritrain.policy import PARAMETER_DISTANCE_BOUND
from veritrain.recorded_run import RecordedRun
from veritrain.sources import RunSource, read_verified
from veritrain.verify.commitment_checks import check_genesis
from veritrain.verify.log_checks import check_chain, check_tree_head
from veritrain.verify.report import Report

_TIMING_DEPENDENT = ("next_inner_steps",)
PAYLOAD_LIMIT = 1 << 40
"""A payload is read whole: what one cluster sent for one stage shard."""


@dataclass
class Comparison:
    run_id: str
    step: int
    cluster: int | None
    mode: str
    """``bitwise`` or ``tolerance``."""
    reason: str = ""
    """Why this mode: the policy, and whether this machine is in its hardware class."""
    matched: list[str] = field(default_factory=list)
    mismatched: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return bool(self.matched) and not self.mismatched

    def render(self) -> str:
        what = f"cluster {self.cluster}'s contribution to outer step {self.step}" if self.cluster is not None else f"outer step {self.step}"
        lines = [f"reproduced {what} of run {self.run_id!r} ({self.mode} comparison)", f"  policy    {self.reason}"]
        lines += [f"  match     {m}" for m in self.matched]
        lines += [f"  MISMATCH  {m}" for m in self.mismatched]
        lines += [f"  note      {n}" for n in self.notes]
        lines.append("MATCH" if self.ok else "NO MATCH")
        return "\n".join(lines)

    def to_json(self) -> dict[str, Any]:
        return {
            "run": self.run_id,
            "step": self.step,
            "cluster": self.cluster,
            "mode": self.mode,
            "reason": self.reason,
            "ok": self.ok,
            "matched": self.matched,
            "mismatched": self.mismatched,
            "notes": self.notes,
        }


def verified_run(source: RunSource, run_id: str | None) -> tuple[RecordedRun, TrainConfig]:
    """The run, after its log verified (checks 1, 2 and 10 of ``veritrain verify``)."""
    run_id = run_id or source.latest_run_id()
    run = RecordedRun.load(source, run_id)
    report = Report(run_id=run_id, source=source.description)
    note = source.tree_head(run_id)
    head = check_tree_head(report, run, note, pinned_vkey=None, seen_heads=None, source=source)
    check_chain(report, run, note, head)
    config = check_genesis(report, run)
    if report.failures or config is None:
        shown = "; ".join(f"{f.where()}{f.message}" for f in report.failures[:5])
        raise ReproduceError(
            f"run {run_id!r}: the log does not verify, so there is nothing trustworthy to re-execute against "
            f"({len(report.failures)} problem(s): {shown}); run `veritrain verify {run_id}` for the full report"
        )
    return run, config


def reproduce_step(source: RunSource, run_id: str | None, step: int, cluster: int | None = None) -> Comparison:
    run, config = verified_run(source, run_id)
    recorded = run.step(step)
    if step > 0:
        run.step(step - 1)  # the state to start from must be recorded
    if cluster is not None and cluster not in recorded.quorum.clusters:
        raise ReproduceError(
            f"cluster {cluster} did not take part in step {step} of run {run.run_id!r} "
            f"(its quorum: clusters {list(recorded.quorum.clusters)})"
        )
    mode, reason = choose_mode(run.genesis, config)
    comparison = Comparison(run_id=run.run_id, step=step, cluster=cluster, mode=mode, reason=reason)

    with tempfile.TemporaryDirectory(prefix="veritrain-reproduce-") as folder:
        work = Path(folder)
        manifest = read_data_manifest(source, run.data_manifest)
        data = download_data(source, manifest, work / "shards")
        before = download_checkpoint(source, run.step(step - 1).checkpoint, work / "before") if step > 0 else None
        payloads = _payloads_in_flight(source, run.step(step - 1), before) if before is not None else {}
        result = reexecute_outer_step(
            config, before, step, cluster, clusters=recorded.quorum.clusters, payloads=payloads, data=data
        )
        _compare_contributions(comparison, recorded, result, cluster)
        if cluster is None:
            _compare_generations(comparison, source, recorded, generate(config, data.tokenizer(), model_state(result.files.tensors)))
            if mode == "bitwise":
                _compare_files(comparison, source, recorded, result.files)
                _compare_metrics(comparison, recorded, result)
            else:
                policy = run.genesis.verification_policy
                _compare_metric(comparison, policy, recorded, result)
                after = download_checkpoint(source, recorded.checkpoint, work / "after")
                _compare_parameters(comparison, before, after, result.files)
    return comparison


def _payloads_in_flight(source: RunSource, previous: OuterStep, before: CheckpointFiles) -> dict[str, bytes]:
    """The payloads of the previous step's round (in flight under the one-step delay) whose
    clusters saved no outer state with them -- they left the run during that step -- read
    from the store by digest, verified. Every other payload is in the state before."""
    wanted = {
        digest for (cluster, stage), digest in previous.signed_contributions().items()
        if outer_file(cluster, stage) not in before.tensors
    }
    return {digest: read_verified(source, digest, PAYLOAD_LIMIT) for digest in sorted(wanted)}


def choose_mode(genesis: Genesis, config: TrainConfig) -> tuple[str, str]:
    """Bitwise only where the genesis' policy says bitwise and this machine is in the recorded
    hardware class; tolerance otherwise. Returns (mode, why)."""
    policy = genesis.verification_policy
    if policy.mode != "bitwise":
        return "tolerance", f"the genesis fixed a tolerance policy ({_tolerance(policy)})"
    here = {"device": _device(config), "machine": platform.machine(), "torch": torch.__version__}
    hardware = policy.hardware.to_payload()
    differing = [f"{k} {hardware[k]!r} there, {here[k]!r} here" for k in here if hardware[k] != here[k]]
    if differing:
        return "tolerance", (
            f"the genesis fixed bitwise on {hardware}, but this machine differs ({'; '.join(differing)}): "
            f"falling back to its tolerance ({_tolerance(policy)})"
        )
    return "bitwise", f"the genesis fixed bitwise, and this machine is in its hardware class {hardware}"


def _tolerance(policy: VerificationPolicy) -> str:
    return (
        f"{policy.fallback.metric} within {policy.fallback.delta}, every model tensor within a relative "
        f"distance of {PARAMETER_DISTANCE_BOUND}"
    )


def _device(config: TrainConfig) -> str:
    if config.device == "cpu":
        return "cpu"
    return "cuda" if torch.cuda.is_available() else "cpu"


def _compare_contributions(comparison: Comparison, recorded: OuterStep, result: Reexecution, cluster: int | None) -> None:
    if comparison.mode != "bitwise" and cluster is None:
        comparison.notes.append("contribution digests are compared bitwise only on the recorded hardware class")
        return
    expected = {key: digest for key, digest in recorded.signed_contributions().items() if cluster is None or key[0] == cluster}
    actual = result.contribution_digests
    for key in sorted(expected):
        label = f"contribution of cluster {key[0]} stage {key[1]}: {expected[key][:16]}…"
        if actual.get(key) == expected[key]:
            comparison.matched.append(label)
        else:
            comparison.mismatched.append(f"{label} re-executed as {str(actual.get(key))[:16]}…")


def _compare_files(comparison: Comparison, source: RunSource, recorded: OuterStep, files: CheckpointFiles) -> None:
    manifest = read_checkpoint_manifest(source, recorded.checkpoint)
    expected = manifest.digests
    saved = {c for n in expected if (c := _cluster_of(n)) is not None}
    left = sorted({c for n in files.tensors if (c := _cluster_of(n)) is not None} - saved)
    if left:
        # A cluster of the step that stopped before it saved: the step is recorded without its files.
        comparison.notes.append(f"cluster(s) {left} took part in the step but saved no files (they left during it)")
        files = CheckpointFiles({n: t for n, t in files.tensors.items() if _cluster_of(n) not in left}, files.json)
    with tempfile.TemporaryDirectory(prefix="veritrain-reproduced-") as folder:
        digests = write_files(folder, tensor_files=files.tensors, json_files=files.json)
        shards = {n: tensor_nbytes(files.tensors[n]) for n in files.tensors if is_model_shard(n)}
        if shards:
            digests.update(write_model_index(folder, shards))
        for name in sorted(set(expected) | set(digests)):
            if name == TRAINER_STATE and name in digests and digests[name] != expected.get(name):
                _compare_trainer_state(comparison, source, expected[name], Path(folder) / name)
            elif digests.get(name) == expected.get(name):
                comparison.matched.append(f"{name}: {expected[name][:16]}…")
            else:
                comparison.mismatched.append(
                    f"{name}: recorded {str(expected.get(name))[:16]}…, re-executed {str(digests.get(name))[:16]}…"
                )


def _compare_generations(comparison: Comparison, source: RunSource, recorded: OuterStep, again: Generations) -> None:
    """What the re-executed model says against what the step recorded it saying: token for
    token under bitwise; reported, not required, under tolerance (issue: another machine may
    flip a near-tie of the argmax)."""
    said = Generations.from_payload(json.loads(read_verified(source, recorded.generations.object)))
    differing = [g.prompt for g, h in zip(said.generations, again.generations, strict=True) if g != h]
    if said.prompts != again.prompts or said.max_new_tokens != again.max_new_tokens:
        comparison.mismatched.append("generations: the recorded object was made for other prompts or lengths")
    elif not differing:
        comparison.matched.append(f"generations: {len(said.generations)} greedy continuations equal token for token")
    elif comparison.mode == "bitwise":
        comparison.mismatched.append(f"generations differ for prompts {differing!r}")
    else:
        comparison.notes.append(f"generations differ for prompts {differing!r} (allowed under tolerance)")


def _cluster_of(name: str) -> int | None:
    """The cluster a per-cluster state file belongs to (``inner-cluster00002-stage00001...``)."""
    for prefix in ("inner-cluster", "outer-cluster"):
        if name.startswith(prefix):
            return int(name[len(prefix) :][:5])
    return None


def _compare_metrics(comparison: Comparison, recorded: OuterStep, result: Reexecution) -> None:
    """Under bitwise, every metric computed from data and state equals the recorded one."""
    again = {k: float(v) for k, v in result.record.metrics.items() if k not in TIMING_METRICS}
    signed = {k: v for k, v in recorded.metrics.items() if k not in TIMING_METRICS}
    differing = sorted(k for k in set(again) | set(signed) if again.get(k) != signed.get(k) and k not in recorded.nonfinite_metrics)
    if differing:
        comparison.mismatched.extend(
            f"metric {k}: recorded {signed.get(k)!r}, re-executed {again.get(k)!r}" for k in differing
        )
    else:
        comparison.matched.append(f"{len(signed)} metrics equal (all but the measured times {sorted(TIMING_METRICS)})")


def _compare_trainer_state(comparison: Comparison, source: RunSource, recorded_digest: str, reproduced: Path) -> None:
    recorded = json.loads(read_verified(source, recorded_digest))
    again = json.loads(reproduced.read_text())
    differing = [k for k in set(recorded["cursor"]) | set(again["cursor"]) if recorded["cursor"].get(k) != again["cursor"].get(k)]
    rest_equal = {k: v for k, v in recorded.items() if k != "cursor"} == {k: v for k, v in again.items() if k != "cursor"}
    if rest_equal and differing and all(k in _TIMING_DEPENDENT for k in differing):
        comparison.matched.append(f"{TRAINER_STATE}: equal except timing-dependent fields")
        for key in differing:
            comparison.notes.append(
                f"{key} (adaptive H, chosen from measured timings) recorded {recorded['cursor'][key]}, "
                f"re-executed {again['cursor'][key]}"
            )
    else:
        comparison.mismatched.append(f"{TRAINER_STATE}: differs in {sorted(differing) or 'its header'}")


def _compare_metric(comparison: Comparison, policy: VerificationPolicy, recorded: OuterStep, result: Reexecution) -> None:
    metric, delta = policy.fallback.metric, policy.fallback.delta
    want = recorded.metrics.get(metric)
    got = result.record.metrics.get(metric)
    if want is None or got is None:
        comparison.mismatched.append(f"{metric}: not recorded or not re-computed")
    elif abs(float(got) - want) <= delta:
        comparison.matched.append(f"{metric}: recorded {want:.6f}, re-executed {got:.6f} (|Δ| ≤ {delta})")
    else:
        comparison.mismatched.append(f"{metric}: recorded {want:.6f}, re-executed {got:.6f} (|Δ| > {delta})")


def _compare_parameters(
    comparison: Comparison, before: CheckpointFiles | None, after: CheckpointFiles, again: CheckpointFiles
) -> None:
    """Each recorded model tensor θ_t against its re-execution θ': ‖θ' − θ_t‖ / ‖θ_t − θ_{t−1}‖
    (against ‖θ_t‖ for step 0, whose starting point is not stored) within the bound."""
    recorded = _model_tensors(after)
    previous = _model_tensors(before) if before is not None else {}
    reexecuted = _model_tensors(again)
    worst, worst_name, problems = 0.0, "", []
    for name, theta in sorted(recorded.items()):
        other = reexecuted.get(name)
        if other is None or other.shape != theta.shape:
            problems.append(f"{name}: missing or reshaped in the re-execution")
            continue
        update = theta - previous[name] if name in previous else theta
        scale = float(torch.linalg.vector_norm(update.double()))
        distance = float(torch.linalg.vector_norm((other - theta).double())) / scale if scale else float(not torch.equal(other, theta))
        if distance > worst:
            worst, worst_name = distance, name
        if distance > PARAMETER_DISTANCE_BOUND:
            problems.append(f"{name}: relative distance {distance:.3g} > {PARAMETER_DISTANCE_BOUND}")
    if problems:
        comparison.mismatched.extend(problems[:10])
        if len(problems) > 10:
            comparison.mismatched.append(f"... and {len(problems) - 10} more tensors")
    else:
        comparison.matched.append(
            f"{len(recorded)} model tensors within a relative distance of {PARAMETER_DISTANCE_BOUND} of the recorded "
            f"checkpoint (largest {worst:.3g}, {worst_name or 'none'})"
        )


def _model_tensors(files: CheckpointFiles) -> Mapping[str, torch.Tensor]:
    tensors: dict[str, torch.Tensor] = {}
    for name, file in files.tensors.items():
        if is_model_shard(name):
            tensors.update(file)
    return tensors
