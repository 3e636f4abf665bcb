"""Checkpoint file names and the in-memory form of one outer step's state.

A checkpoint at outer step t is a set of files (DESIGN.md §4), each handed to the recorder by
the process that owns it -- nothing gathers the whole model in one process:

* ``model-00001-of-0000S.safetensors`` .. one per pipeline stage, Hugging Face style, holding
  transformers' parameter names (``model.layers.3.self_attn.q_proj.weight``); a tied embedding
  is stored once, as ``model.embed_tokens.weight`` in stage 0's file, with no
  ``lm_head.weight`` (transformers re-ties it). Written by cluster 0's process of that stage.
* ``inner-cluster0000C-stage0000S.safetensors``: that process's AdamW state
  (``<param>.exp_avg``, ``<param>.exp_avg_sq``, ``<param>.step``), its torch RNG state
  (``rng.torch``) and, when the outer algorithm overlaps, its local parameters
  (``local.<param>``: with a one-step delay they differ from the model file's).
* ``outer-cluster0000C-stage0000S.safetensors``: the outer algorithm's ``state_dict()`` (global
  fp32 parameters, outer momentum, error feedback, rank state, pending payload). Absent for the
  AllReduce baseline.
* ``exchange-stage0000S.safetensors``: each contributing cluster's payload of that stage for
  each round applied in the step (``round000123.cluster00001``: 1-D uint8, the bytes whose
  SHA-256 the entry records; a round's clusters are its quorum's), so a verifier can recompute
  the round's verdicts and contribution scores.
  Written by cluster 0's process of that stage; absent when the step applied no exchange.
* ``trainer_state.json``: step, data cursor, the next round's H, the pending exchange's round
  and signals, the configuration digest. Written by the coordinator (global rank 0).
* ``config.json``, ``generation_config.json`` and the tokenizer's files (trainer/hf_repo.py):
  with the model files and their index they make the folder a Hugging Face model repo.
  Written by the coordinator.

Tensors are handed over contiguous and on CPU; serialising them (safetensors bytes, the HF
index, the manifest) is the recorder's job.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch
from safetensors.torch import load, save

from trainer.errors import CheckpointError

TRAINER_STATE = "trainer_state.json"
MODEL_INDEX = "model.safetensors.index.json"

TensorFile = Mapping[str, torch.Tensor]
JsonFile = Mapping[str, Any]
TensorFiles = Mapping[str, TensorFile]
"""A step's safetensors files (or a process's share of them): file name -> tensors."""
JsonFiles = Mapping[str, JsonFile]
"""A step's JSON files (or a process's share of them): file name -> document."""
FileDigests = Mapping[str, str]
"""File name -> hex SHA-256 of the file's bytes as stored."""


def model_file(stage: int, stages: int) -> str:
    return f"model-{stage + 1:05d}-of-{stages:05d}.safetensors"


def inner_file(cluster: int, stage: int) -> str:
    return f"inner-cluster{cluster:05d}-stage{stage:05d}.safetensors"


def outer_file(cluster: int, stage: int) -> str:
    return f"outer-cluster{cluster:05d}-stage{stage:05d}.safetensors"


def exchange_file(stage: int) -> str:
    return f"exchange-stage{stage:05d}.safetensors"


def exchange_tensors(payloads: Mapping[int, Mapping[int, torch.Tensor]]) -> dict[str, torch.Tensor]:
    """The exchange file of one stage: round -> contributing cluster -> its payload."""
    return {
        f"round{round_:06d}.cluster{cluster:05d}": payload.detach().cpu().contiguous()
        for round_, gathered in payloads.items()
        for cluster, payload in sorted(gathered.items())
    }


def read_exchange(tensors: Mapping[str, torch.Tensor]) -> dict[int, dict[int, torch.Tensor]]:
    """The inverse of ``exchange_tensors``: round -> cluster -> payload, both ascending."""
    rounds: dict[int, dict[int, torch.Tensor]] = {}
    for name, tensor in tensors.items():
        match = _EXCHANGE_NAME.fullmatch(name)
        if match is None or tensor.dtype != torch.uint8 or tensor.dim() != 1:
            raise CheckpointError(
                f"expected 1-D uint8 tensors named roundNNNNNN.clusterNNNNN, got {name!r}"
            )
        rounds.setdefault(int(match[1]), {})[int(match[2])] = tensor
    return {r: dict(sorted(by_cluster.items())) for r, by_cluster in sorted(rounds.items())}


_EXCHANGE_NAME = re.compile(r"round(\d{6})\.cluster(\d{5})")


@dataclass(frozen=True)
class CheckpointFiles:
    """The files of one outer step: safetensors files as name -> tensors, JSON files as dicts."""

    tensors: TensorFiles = field(default_factory=dict)
    json: JsonFiles = field(default_factory=dict)

    def names(self) -> list[str]:
        return sorted([*self.tensors, *self.json])

    def tensor_file(self, name: str) -> TensorFile:
        if name not in self.tensors:
            raise CheckpointError(
                f"expected checkpoint file {name}, it is missing (have {self.names()})"
            )
        return self.tensors[name]

    def json_file(self, name: str) -> JsonFile:
        if name not in self.json:
            raise CheckpointError(
                f"expected checkpoint file {name}, it is missing (have {self.names()})"
            )
        return self.json[name]

    def pack(self) -> dict[str, bytes]:
        """Plain bytes (safetensors / JSON) for sending between processes."""
        packed = {name: save(dict(tensors)) for name, tensors in self.tensors.items()}
        packed.update({name: json.dumps(data).encode() for name, data in self.json.items()})
        return packed

    @classmethod
    def unpack(cls, packed: Mapping[str, bytes]) -> CheckpointFiles:
        tensors = {n: load(b) for n, b in packed.items() if n.endswith(".safetensors")}
        documents = {n: json.loads(b) for n, b in packed.items() if n.endswith(".json")}
        return cls(tensors, documents)


def saved_payload(
    files: CheckpointFiles, *, cluster: int, stage: int, round_: int
) -> torch.Tensor | None:
    """Cluster ``cluster``'s stage ``stage`` payload of round ``round_`` as its saved outer state
    holds it while the round is in flight (trainer/outer/algorithm.py keeps it as
    ``pending.<round>``); None when ``files`` hold no such state or payload."""
    return files.tensors.get(outer_file(cluster, stage), {}).get(f"pending.{round_}")


def load_checkpoint_directory(directory: Path) -> CheckpointFiles:
    """Every state file of a checkpoint folder (what ``LocalDirectoryRecorder`` writes): each
    ``.safetensors`` file and each JSON file but the model index, which is derived from the
    model files."""
    from safetensors.torch import load_file

    if not (directory / TRAINER_STATE).is_file():
        raise CheckpointError(
            f"expected {TRAINER_STATE} in {directory}, it is missing (not a checkpoint?)"
        )
    tensors = {p.name: load_file(p) for p in sorted(directory.glob("*.safetensors"))}
    documents = {
        p.name: json.loads(p.read_text())
        for p in sorted(directory.glob("*.json"))
        if p.name != MODEL_INDEX
    }
    return CheckpointFiles(tensors, documents)


def write_checkpoint_directory(files: CheckpointFiles, directory: Path) -> None:
    """Write ``files`` so that ``load_checkpoint_directory`` reads them back (no digests, no
    index: a hand-over between processes, not a recording)."""
    directory.mkdir(parents=True, exist_ok=True)
    for name, data in files.pack().items():
        (directory / name).write_bytes(data)
