"""What one process saves at the end of an outer step, and how it comes back on resume.

File names and contents are documented in trainer/checkpoint_layout.py. The run's position -- the
*cursor* -- travels in ``trainer_state.json``: the next step, the data cursor (global inner
steps done), the next round's H, the clusters that took part in the saved step and, under the
one-step delay, which round's exchange is still in flight, with the signals its ``apply`` will
get and the digests of the payloads it combines.

A process that starts from a saved step takes its own cluster's files -- or, when the saved
step has none of its cluster (it joins: it was absent from that step, or died before saving),
those of the *donor*: the lowest-numbered cluster that saved every stage. The rule depends
only on the checkpoint, so a re-execution rebuilds exactly the state a joining cluster
started from. Floats there are Python floats,
which JSON round-trips exactly (shortest repr), so a resumed apply sees the same bits.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping
from dataclasses import asdict, dataclass
from typing import Any

import torch

from trainer.checkpoint_layout import (
    TRAINER_STATE,
    CheckpointFiles,
    inner_file,
    model_file,
    outer_file,
    saved_payload,
)
from trainer.errors import CheckpointError
from trainer.model import TIED_HEAD, StageModel
from trainer.outer.protocol import OuterAlgorithm
from trainer.runtime.inner import InnerOptimizer

FORMAT = "veritrain.trainer-state/v1"
INNER_PREFIX = "inner-cluster"


@dataclass(frozen=True, kw_only=True)
class Cursor:
    """Where a run stands between two outer steps."""

    next_step: int
    inner_steps_done: int
    """Global inner steps completed (the data rule's i of the next inner step)."""
    next_inner_steps: int
    """H of the next outer step."""
    tokens: int
    """Training tokens consumed by all clusters so far."""
    pending_round: int | None = None
    """Under the one-step delay: the round whose exchange is in flight (not yet applied)."""
    pending_mean_train_loss: float | None = None
    """The RoundSignals of the pending round."""
    clusters: tuple[int, ...] = ()
    """The clusters that contributed to the saved step (its quorum)."""
    pending_digests: tuple[tuple[int, int, str], ...] = ()
    """The pending round's payloads as (cluster, stage, digest)."""

    def to_dict(self) -> dict[str, Any]:
        data = asdict(self)
        data["clusters"] = list(self.clusters)
        data["pending_digests"] = [list(d) for d in self.pending_digests]
        return data

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Cursor:
        try:
            values = {k: data[k] for k in cls.__dataclass_fields__ if k in data}
            values["clusters"] = tuple(int(c) for c in values.get("clusters", ()))
            values["pending_digests"] = tuple(
                (int(c), int(s), str(d)) for c, s, d in values.get("pending_digests", ())
            )
            return cls(**values)
        except (TypeError, ValueError) as exc:
            raise CheckpointError(
                f"expected a complete cursor in {TRAINER_STATE}, got {dict(data)}: {exc}"
            ) from exc

    def pending_digests_of(self, stage: int) -> dict[int, str]:
        """The pending round's payload digest of every contributor, for one stage."""
        return {c: d for c, s, d in self.pending_digests if s == stage}


def trainer_state_document(
    cursor: Cursor, *, step: int, config_digest: str, method: str, clusters: int, stages: int
) -> dict[str, Any]:
    return {
        "format": FORMAT,
        "step": step,
        "method": method,
        "config_digest": config_digest,
        "topology": {"clusters": clusters, "stages": stages},
        "cursor": cursor.to_dict(),
    }


def read_cursor(files: CheckpointFiles, *, config_digest: str) -> Cursor:
    document = files.json_file(TRAINER_STATE)
    if document.get("format") != FORMAT:
        raise CheckpointError(
            f"expected {TRAINER_STATE} of format {FORMAT}, got {document.get('format')!r}"
        )
    if document.get("config_digest") != config_digest:
        raise CheckpointError(
            f"expected a state saved with configuration {config_digest[:12]}, got one saved with "
            f"{str(document.get('config_digest'))[:12]} (resume "
            "and re-execution need the same configuration)"
        )
    return Cursor.from_dict(document["cursor"])


@dataclass(frozen=True, kw_only=True)
class StageState:
    """What a process's stage saves and restores at an outer step, and whose files those are."""

    module: StageModel
    inner: InnerOptimizer
    outer: OuterAlgorithm | None
    cluster: int
    """The cluster the files belong to: the process's own when saving; when restoring, the
    cluster whose share it starts from (``share_owner``)."""
    stage: int
    stages: int


def stage_files(
    part: StageState,
    *,
    save_local: bool,
    weights: Mapping[str, torch.Tensor] | None = None,
) -> dict[str, dict[str, torch.Tensor]]:
    """The safetensors files this process owns for one outer step. ``weights`` are the model
    weights to publish (the outer algorithm's global parameters); default: the local ones."""
    module, inner, outer = part.module, part.inner, part.outer
    cluster, stage, stages = part.cluster, part.stage, part.stages
    files: dict[str, dict[str, torch.Tensor]] = {}
    if cluster == 0:
        files[model_file(stage, stages)] = model_file_tensors(module, weights)
    state = inner.state_tensors()
    state["rng.torch"] = torch.get_rng_state()
    if save_local:
        state.update({f"local.{name}": _cpu(p) for name, p in module.named_parameters()})
    files[inner_file(cluster, stage)] = state
    if outer is not None:
        files[outer_file(cluster, stage)] = {k: _cpu(v) for k, v in outer.state_dict().items()}
    return files


def model_file_tensors(
    module: StageModel, weights: Mapping[str, torch.Tensor] | None = None
) -> dict[str, torch.Tensor]:
    """The tensors of a stage's model file: ``weights`` (default: the module's own), under
    transformers' names, without the last stage's copy of a tied embedding -- the matrix is
    stored once, as stage 0's ``model.embed_tokens.weight``, and transformers re-ties
    ``lm_head.weight`` to it."""
    published = weights if weights is not None else dict(module.named_parameters())
    skip = TIED_HEAD if module.holds_tied_copy else None
    return {name: _cpu(p) for name, p in published.items() if name != skip}


def restore_stage(files: CheckpointFiles, part: StageState) -> None:
    """Load this process's part of a saved step (the tied copy is re-synced by the caller)."""
    module, inner, outer = part.module, part.inner, part.outer
    cluster, stage, stages = part.cluster, part.stage, part.stages
    inner_state = files.tensor_file(inner_file(cluster, stage))
    local = {k.removeprefix("local."): v for k, v in inner_state.items() if k.startswith("local.")}
    weights = local or files.tensor_file(model_file(stage, stages))
    with torch.no_grad():
        for name, p in module.named_parameters():
            if name == TIED_HEAD and module.holds_tied_copy and name not in weights:
                continue
            if name not in weights:
                raise CheckpointError(
                    f"expected parameter {name} in the saved state of stage {stage}, it is missing"
                )
            if weights[name].shape != p.shape:
                raise CheckpointError(
                    f"expected {name} of shape {tuple(p.shape)}, got "
                    f"{tuple(weights[name].shape)} (another model?)"
                )
            p.copy_(weights[name])
    inner.load_state_tensors(inner_state)
    if "rng.torch" in inner_state:
        torch.set_rng_state(inner_state["rng.torch"])
    if outer is not None:
        outer.load_state_dict(files.tensor_file(outer_file(cluster, stage)))


PENDING_PAYLOADS = "pending-payloads.safetensors"
"""Not a checkpoint file: what a resumed process gets besides its own files -- the payloads of
the round still in flight, taken from every contributor's saved outer state (``str(cluster)``
-> payload). Payloads whose cluster saved nothing are fetched by digest instead."""


def state_owner(names: Collection[str], *, cluster: int, stages: int) -> int:
    """Whose files a process of ``cluster`` starts from, given a checkpoint's file names: its
    own cluster's when every stage of them is there, else the donor's (the module docstring)."""

    def complete(c: int) -> bool:
        return all(inner_file(c, s) in names for s in range(stages))

    if complete(cluster):
        return cluster
    saved = sorted(
        {int(name[len(INNER_PREFIX) :][:5]) for name in names if name.startswith(INNER_PREFIX)}
    )
    donors = [c for c in saved if complete(c)]
    if not donors:
        raise CheckpointError(
            "expected the inner state of at least one "
            f"cluster in the checkpoint, got {sorted(names)}"
        )
    return donors[0]


def share_owner(files: CheckpointFiles, *, stage: int) -> int:
    """The cluster whose state a process's share (``process_subset``) holds."""
    owners = [
        int(n[len(INNER_PREFIX) :][:5])
        for n in files.tensors
        if n.startswith(INNER_PREFIX) and n.endswith(f"stage{stage:05d}.safetensors")
    ]
    if len(owners) != 1:
        raise CheckpointError(
            f"expected the inner state of one cluster for stage {stage}, got {files.names()}"
        )
    return owners[0]


def process_subset(
    files: CheckpointFiles, *, cluster: int, stage: int, stages: int
) -> CheckpointFiles:
    """The files one process needs to resume (so each spawned process gets only its share):
    its stage's model file, its own (or its donor's) inner and outer state, and the payloads
    of the round still in flight."""
    owner = state_owner(files.names(), cluster=cluster, stages=stages)
    wanted = {model_file(stage, stages), inner_file(owner, stage), outer_file(owner, stage)}
    tensors = {name: t for name, t in files.tensors.items() if name in wanted}
    cursor = files.json_file(TRAINER_STATE).get("cursor", {})
    pending = cursor.get("pending_round")
    if pending is not None:
        payloads = {}
        for c in sorted({c for c, s, _ in Cursor.from_dict(cursor).pending_digests if s == stage}):
            saved = saved_payload(files, cluster=c, stage=stage, round_=pending)
            if saved is not None:
                payloads[str(c)] = saved
        tensors[PENDING_PAYLOADS] = payloads
    return CheckpointFiles(tensors, dict(files.json))


def pending_payloads(files: CheckpointFiles) -> dict[int, torch.Tensor]:
    """The in-flight round's payloads a process's share carries, by cluster."""
    return {int(c): t for c, t in files.tensors.get(PENDING_PAYLOADS, {}).items()}


def _cpu(tensor: torch.Tensor) -> torch.Tensor:
    return tensor.detach().cpu().contiguous().clone()
