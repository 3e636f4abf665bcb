"""``veritrain reproduce``: re-execute one outer step and compare it with the ledger.

1. Read the run from a source (database + store, or the HTTP API) and verify the objects it
   needs as they are downloaded: the state recorded after step T-1 (nothing for T = 0: the
   seed fixes the initial state), the data manifest and the shards.
2. Re-execute step T with the recorded configuration (all clusters), or only cluster J's H
   inner steps up to its contribution (``--cluster J``).
3. Compare under the run's verification policy, fixed in its genesis: ``bitwise`` on the
   hardware class that trained (every checkpoint file and contribution digest must match);
   elsewhere, the policy's metric within its tolerance.

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

from storage.checkpoint import INDEX_FILE, Manifest, write_files, write_model_index
from storage.checkpoint.sharding import is_model_shard, tensor_nbytes
from trainer.api import Reexecution, reexecute_outer_step
from trainer.checkpoint import TRAINER_STATE, CheckpointFiles, load_checkpoint_directory
from trainer.config import TrainConfig
from trainer.data.build import PreparedData
from trainer.data.manifest import DataManifest
from trainer.data.shards import DirectoryShardSource, shard_file_name
from trainer.errors import TrainerError
from veritrain.verify.source import RunSource, read_verified, stream_verified
from veritrain.verify.view import RunView

_TIMING_DEPENDENT = ("next_inner_steps",)


class ReproduceError(TrainerError):
    """The step cannot be re-executed (no such step, corrupt download, ...)."""


@dataclass
class Comparison:
    run_id: str
    step: int
    cluster: int | None
    mode: str
    """``bitwise`` or ``tolerance``."""
    matched: list[str] = field(default_factory=list)
    mismatched: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return bool(self.matched) and not self.mismatched

    def render(self) -> str:
        what = f"cluster {self.cluster}'s contribution to outer step {self.step}" if self.cluster is not None else f"outer step {self.step}"
        lines = [f"reproduced {what} of run {self.run_id!r} ({self.mode} comparison)"]
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
            "ok": self.ok,
            "matched": self.matched,
            "mismatched": self.mismatched,
            "notes": self.notes,
        }


def reproduce_step(source: RunSource, run_id: str | None, step: int, cluster: int | None = None) -> Comparison:
    run_id = run_id or source.latest_run_id()
    view = RunView.from_bodies(run_id, source.entry_bodies(run_id))
    steps = {e.step: e.payload for e in view.outer_steps if e.step is not None}
    if step not in steps:
        recorded = f"{min(steps)}..{max(steps)}" if steps else "none"
        raise ReproduceError(f"run {run_id!r} has no recorded outer step {step} (recorded: {recorded})")
    if step > 0 and step - 1 not in steps:
        raise ReproduceError(f"run {run_id!r} has no recorded state after step {step - 1} to start from")
    genesis = view.genesis
    config = TrainConfig.from_dict(genesis["hyperparameters"])
    recorded_step = steps[step]
    mode = _mode(genesis.get("verification_policy", {}))
    comparison = Comparison(run_id=run_id, step=step, cluster=cluster, mode=mode)

    with tempfile.TemporaryDirectory(prefix="veritrain-reproduce-") as folder:
        work = Path(folder)
        data = _download_data(source, view, work / "shards")
        state = _download_state(source, steps[step - 1], work / "state") if step > 0 else None
        result = reexecute_outer_step(config, state, step, cluster, data=data)

    _compare_contributions(comparison, recorded_step, result, cluster)
    if cluster is None:
        if mode == "bitwise":
            _compare_files(comparison, source, recorded_step, result.files)
        else:
            _compare_metric(comparison, genesis["verification_policy"], recorded_step, result)
    return comparison


def _mode(policy: Mapping[str, Any]) -> str:
    """Bitwise only where the genesis' hardware class and software match this machine."""
    if policy.get("mode") != "bitwise":
        return "tolerance"
    import torch

    hardware = policy.get("hardware", {})
    here = {"device": "cpu", "machine": platform.machine(), "torch": torch.__version__}
    return "bitwise" if all(hardware.get(k) == v for k, v in here.items()) else "tolerance"


def _compare_contributions(comparison: Comparison, recorded: Mapping[str, Any], result: Reexecution, cluster: int | None) -> None:
    expected = {
        (int(c["cluster"]), int(s["stage"])): str(s["digest"])
        for c in recorded.get("contributions", [])
        for s in c["stages"]
        if cluster is None or int(c["cluster"]) == cluster
    }
    actual = result.contribution_digests
    for key in sorted(expected):
        label = f"contribution of cluster {key[0]} stage {key[1]}: {expected[key][:16]}…"
        if comparison.mode == "bitwise" or cluster is not None:
            (comparison.matched if actual.get(key) == expected[key] else comparison.mismatched).append(
                label if actual.get(key) == expected[key] else f"{label} re-executed as {str(actual.get(key))[:16]}…"
            )


def _compare_files(comparison: Comparison, source: RunSource, recorded: Mapping[str, Any], files: CheckpointFiles) -> None:
    manifest = Manifest.from_json(read_verified(source, recorded["checkpoint"]["manifest_object"]))
    expected = {e.name: e.digest for e in manifest.entries}
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


def _compare_metric(comparison: Comparison, policy: Mapping[str, Any], recorded: Mapping[str, Any], result: Reexecution) -> None:
    fallback = policy.get("fallback", policy)
    metric, delta = str(fallback.get("metric", "eval_loss")), float(fallback.get("delta", 1e-3))
    want = recorded.get("metrics", {}).get(metric)
    got = result.record.metrics.get(metric)
    comparison.notes.append("this machine differs from the one that trained: comparing the policy's metric, not bits")
    if want is None or got is None:
        comparison.mismatched.append(f"{metric}: not recorded or not re-computed")
    elif abs(float(got) - float(want)) <= delta:
        comparison.matched.append(f"{metric}: recorded {want:.6f}, re-executed {got:.6f} (|Δ| ≤ {delta})")
    else:
        comparison.mismatched.append(f"{metric}: recorded {want:.6f}, re-executed {got:.6f} (|Δ| > {delta})")


def _download_state(source: RunSource, previous: Mapping[str, Any], directory: Path) -> CheckpointFiles:
    manifest = Manifest.from_json(read_verified(source, previous["checkpoint"]["manifest_object"]))
    if manifest.root != previous["checkpoint"]["manifest_root"]:
        raise ReproduceError(f"the state of step {previous['step']} does not match its recorded manifest root")
    directory.mkdir(parents=True)
    for entry in manifest.entries:
        if entry.name == INDEX_FILE:
            continue
        _download(source, entry.digest, directory / entry.name)
    return load_checkpoint_directory(directory)


def _download_data(source: RunSource, view: RunView, directory: Path) -> PreparedData:
    entry = view.data_manifest
    if entry is None:
        raise ReproduceError(f"run {view.run_id!r} has no data manifest")
    manifest = DataManifest.from_dict(json.loads(read_verified(source, entry.payload["manifest_object"])))
    directory.mkdir(parents=True)
    for shard in manifest.shards:
        _download(source, shard.sha256, directory / shard_file_name(shard.sha256))
    return PreparedData(manifest=manifest, source=DirectoryShardSource(directory))


def _download(source: RunSource, digest: str, target: Path) -> None:
    partial = target.with_name(target.name + ".partial")
    with partial.open("wb") as out:
        stream_verified(source, digest, out.write)
    partial.rename(target)  # only verified bytes get the real name
