"""What one process saves at the end of an outer step, and how it comes back on resume.

File names and contents are documented in trainer/checkpoint.py. The run's position -- the
*cursor* -- travels in ``trainer_state.json``: the next step, the data cursor (global inner
steps done), the next round's H and, under the one-step delay, which round's exchange is still
in flight together with the signals its ``apply`` will get. Floats there are Python floats,
which JSON round-trips exactly (shortest repr), so a resumed apply sees the same bits.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import asdict, dataclass
from typing import Any

import torch

from trainer.checkpoint import TRAINER_STATE, CheckpointFiles, inner_file, model_file, outer_file
from trainer.errors import CheckpointError
from trainer.model import TIED_HEAD, StageModel
from trainer.outer.protocol import OuterAlgorithm
from trainer.runtime.inner import InnerOptimizer

FORMAT = "veritrain.trainer-state/v1"


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

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Cursor:
        try:
            return cls(**{k: data[k] for k in cls.__dataclass_fields__ if k in data})
        except TypeError as exc:
            raise CheckpointError(f"expected a complete cursor in {TRAINER_STATE}, got {dict(data)}: {exc}") from exc


def trainer_state_document(cursor: Cursor, *, step: int, config_digest: str, method: str,
                           clusters: int, stages: int) -> dict[str, Any]:
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
        raise CheckpointError(f"expected {TRAINER_STATE} of format {FORMAT}, got {document.get('format')!r}")
    if document.get("config_digest") != config_digest:
        raise CheckpointError(
            f"expected a state saved with configuration {config_digest[:12]}, got one saved with "
            f"{str(document.get('config_digest'))[:12]} (resume and re-execution need the same configuration)"
        )
    return Cursor.from_dict(document["cursor"])


def stage_files(
    *,
    module: StageModel,
    inner: InnerOptimizer,
    outer: OuterAlgorithm | None,
    cluster: int,
    stage: int,
    stages: int,
    save_local: bool,
    weights: Mapping[str, torch.Tensor] | None = None,
) -> dict[str, dict[str, torch.Tensor]]:
    """The safetensors files this process owns for one outer step. ``weights`` are the model
    weights to publish (the outer algorithm's global parameters); default: the local ones."""
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


def restore_stage(
    files: CheckpointFiles,
    *,
    module: StageModel,
    inner: InnerOptimizer,
    outer: OuterAlgorithm | None,
    cluster: int,
    stage: int,
    stages: int,
) -> None:
    """Load this process's part of a saved step (the tied copy is re-synced by the caller)."""
    inner_state = files.tensor_file(inner_file(cluster, stage))
    local = {k.removeprefix("local."): v for k, v in inner_state.items() if k.startswith("local.")}
    weights = local or files.tensor_file(model_file(stage, stages))
    with torch.no_grad():
        for name, p in module.named_parameters():
            if name == TIED_HEAD and module.holds_tied_copy and name not in weights:
                continue
            if name not in weights:
                raise CheckpointError(f"expected parameter {name} in the saved state of stage {stage}, it is missing")
            if weights[name].shape != p.shape:
                raise CheckpointError(
                    f"expected {name} of shape {tuple(p.shape)}, got {tuple(weights[name].shape)} (another model?)"
                )
            p.copy_(weights[name])
    inner.load_state_tensors(inner_state)
    if "rng.torch" in inner_state:
        torch.set_rng_state(inner_state["rng.torch"])
    if outer is not None:
        outer.load_state_dict(files.tensor_file(outer_file(cluster, stage)))


def process_subset(files: CheckpointFiles, *, cluster: int, stage: int, stages: int) -> CheckpointFiles:
    """The files one process needs to resume (so each spawned process gets only its share)."""
    wanted = {model_file(stage, stages), inner_file(cluster, stage), outer_file(cluster, stage)}
    return CheckpointFiles(
        {name: tensors for name, tensors in files.tensors.items() if name in wanted},
        dict(files.json),
    )


def _cpu(tensor: torch.Tensor) -> torch.Tensor:
    return tensor.detach().cpu().contiguous().clone()
