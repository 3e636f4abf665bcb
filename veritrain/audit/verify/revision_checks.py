"""Check 7c: every file of every revision is what the genesis and the data manifest fix, not
only the weights.

A revision (``/{run}/resolve/step-NNNNNN/...``) is a Hugging Face model repo: what
``AutoTokenizer`` and ``AutoModelForCausalLM.from_pretrained`` read besides the weights decides
what the model says, and the checkpoint's signatures (the manifest root, ``model.sig``) only
prove that the operator signed those bytes. So the verifier recomputes them
(trainer/hf_repo.py writes them; this module never trusts the stored copy):

1. the file names: exactly the ones a run of this topology writes -- the model shards of its
   S stages and their index, ``trainer_state.json``, the model-repo files below, and the
   optimizer, error-feedback and exchange files of clusters and stages that exist; no file
   another loader would pick up (``special_tokens_map.json``, ``chat_template.jinja``, ...);
2. ``config.json`` and ``generation_config.json``: recomputed from the genesis' model
   configuration and the tokenizer's special ids;
3. the tokenizer files: recomputed from the tokenizer the data manifest names -- by the SHA-256
   of its ``tokenizer.json``, fetched from the corpus -- or, for the byte tokenizer, from what it
   is;
4. ``model.safetensors.index.json``: the tensor names every stage of this model holds, each in
   its stage's shard, with their float32 sizes;
5. ``trainer_state.json``: the format, the step, the method, the config digest and topology of
   the genesis, and a cursor that continues with the next step.

Files with identical digests are fetched and checked once. JSON files are compared as
documents (parsed), not bytes: the manifest digest already binds the bytes.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from records import DataManifest, Genesis, OuterStep
from storage.checkpoint_files import Manifest
from storage.checkpoint_files.sharding import model_index
from storage.errors import StorageError
from trainer.api import tokenizer_export
from trainer.checkpoint_layout import MODEL_INDEX, TRAINER_STATE, model_file
from trainer.config import TrainConfig
from trainer.data.tokenizer import corpus_tokenizer
from trainer.errors import TrainerError
from trainer.hf_repo import REPO_METADATA, as_format_1, repo_json_files
from trainer.model import TIED_HEAD
from trainer.planner import stage_parameter_shapes
from trainer.runtime.state import FORMAT as TRAINER_STATE_FORMAT
from trainer.runtime.state import Cursor
from veritrain.audit.verify.report import CheckResult, Report
from veritrain.errors import VeritrainError
from veritrain.sources import RunSource, read_verified
from veritrain.sources.recorded_run import LogEntry, RecordedRun

REPO_FILE_LIMIT = 64 << 20
"""The largest model-repo JSON file read (a large vocabulary's tokenizer.json is ~10 MB)."""
FLOAT32_BYTES = 4
"""Published weights are float32 (config.json's ``torch_dtype``)."""
_STATE_FILE = re.compile(r"(inner|outer)-cluster(\d{5})-stage(\d{5})\.safetensors")
_EXCHANGE_FILE = re.compile(r"exchange-stage(\d{5})\.safetensors")
_ERRORS = (StorageError, VeritrainError, TrainerError, ValueError)


@dataclass(frozen=True)
class RevisionFiles:
    """What every revision of a run must hold besides its tensors."""

    documents: Mapping[str, Any]
    """File name -> the JSON document it must be (model-repo files and the model index)."""
    format_1: Mapping[str, Any]
    """The model-repo documents a genesis-v1 run, recorded before model-repo format 2, may
    hold instead (trainer/hf_repo.py ``as_format_1``); empty for a later run, whose revisions
    are format 2 (it came out with genesis v2)."""
    model_shards: frozenset[str]
    clusters: int
    stages: int


class _CorpusObjects:
    """The corpus's files (a tokenizer's ``tokenizer.json``) from the run's source, re-hashed."""

    def __init__(self, source: RunSource) -> None:
        self._source = source

    def read(self, sha256: str) -> bytes:
        return read_verified(self._source, sha256, REPO_FILE_LIMIT)


def revision_files(
    genesis: Genesis, config: TrainConfig, manifest: DataManifest, source: RunSource
) -> RevisionFiles:
    """Recompute the files the run's genesis and data manifest fix."""
    tokenizer = corpus_tokenizer(manifest.tokenizer, _CorpusObjects(source))
    stages = genesis.topology.stages
    shards = {model_file(s, stages): _stage_sizes(config, s, stages) for s in range(stages)}
    documents = {
        **repo_json_files(config.model, tokenizer_export(tokenizer)),
        MODEL_INDEX: model_index(shards),
    }
    older = (
        as_format_1({n: d for n, d in documents.items() if n in REPO_METADATA})
        if genesis.version == 1
        else {}
    )
    # As the writer's JSON reads back (tuples become lists).
    return RevisionFiles(
        documents=json.loads(json.dumps(documents)),
        format_1=json.loads(json.dumps(older)),
        model_shards=frozenset(shards),
        clusters=genesis.topology.clusters,
        stages=stages,
    )


def _stage_sizes(config: TrainConfig, stage: int, stages: int) -> dict[str, int]:
    """Tensor name -> float32 bytes of one stage's model file, without the last stage's copy of
    a tied embedding (trainer/runtime/state.py)."""
    # From the planner's table of shapes, not a stage built on the meta device: its initialisers
    # would run there, and that loads torch's compiler (seconds in every `veritrain verify`).
    tied = config.model.tie_word_embeddings
    return {
        name: math.prod(shape) * FLOAT32_BYTES
        for name, shape in stage_parameter_shapes(config.model, stage=stage, stages=stages)
        if not (tied and name == TIED_HEAD)
    }


def check_revision_files(
    report: Report,
    run: RecordedRun,
    genesis: Genesis | None,
    config: TrainConfig | None,
    manifest: DataManifest | None,
    source: RunSource,
    revisions: Mapping[int, tuple[LogEntry, Manifest]],
) -> None:
    """7c. Every revision's files against what the genesis and the data manifest fix."""
    result = report.check(7)
    if not revisions:
        return
    if genesis is None or config is None or manifest is None:
        result.fail(
            "revision files not checked: no readable genesis, configuration or data manifest"
        )
        return
    try:
        expected = revision_files(genesis, config, manifest, source)
    except _ERRORS as exc:
        result.fail(f"revision files not checked: the data manifest's tokenizer: {exc}")
        return
    steps = {entry.index: step for entry, step in run.outer_steps}
    checked: dict[str, str | None] = {}  # digest -> problem (None: as expected)
    for entry, checkpoint in revisions.values():
        step = steps[entry.index]
        files = {file.name: file.digest for file in checkpoint.entries}
        for problem in _names(files, expected):
            result.fail(f"revision file {problem}", index=entry.index, step=step.step)
        for name, document in expected.documents.items():
            if name in files:
                accepted = (document, expected.format_1.get(name, document))
                _document(result, entry, step, source, name, files[name], accepted, checked)
        if TRAINER_STATE in files:
            _trainer_state(result, entry, step, genesis, source, files[TRAINER_STATE])
    result.notes.append(
        f"{len(revisions)} revision(s): every file but the tensors recomputed from the genesis "
        f"and the data manifest ({len(checked)} distinct model-repo files), and no other file"
    )


def _names(files: Mapping[str, str], expected: RevisionFiles) -> list[str]:
    wanted = set(expected.documents) | expected.model_shards | {TRAINER_STATE}
    problems = [f"{name}: missing (every revision has it)" for name in sorted(wanted - set(files))]
    for name in sorted(set(files) - wanted):
        state = _STATE_FILE.fullmatch(name)
        exchange = _EXCHANGE_FILE.fullmatch(name)
        if state is not None and (
            int(state.group(2)) < expected.clusters and int(state.group(3)) < expected.stages
        ):
            continue
        if exchange is not None and int(exchange.group(1)) < expected.stages:
            continue
        problems.append(
            f"{name}: not a file a run of {expected.clusters} cluster(s) x {expected.stages} "
            "stage(s) writes (a loader could pick it up)"
        )
    return problems


def _document(
    result: CheckResult,
    entry: LogEntry,
    step: OuterStep,
    source: RunSource,
    name: str,
    digest: str,
    accepted: tuple[Any, Any],
    checked: dict[str, str | None],
) -> None:
    """``accepted``: the document as written now, and as model-repo format 1 wrote it."""
    result.checked += 1
    if digest not in checked:
        try:
            stored = json.loads(read_verified(source, digest, REPO_FILE_LIMIT))
            checked[digest] = (
                None if stored == accepted[1] else _differences(name, stored, accepted[0])
            )
        except (*_ERRORS, json.JSONDecodeError, UnicodeDecodeError) as exc:
            checked[digest] = f"{name}: {exc}"
    problem = checked[digest]
    if problem is not None:
        result.fail(f"revision file {problem}", index=entry.index, step=step.step)


def _differences(name: str, stored: Any, expected: Any) -> str | None:
    """None when ``stored`` is ``expected``; else what differs, key by key (the first few)."""
    if stored == expected:
        return None
    why = (
        "the data manifest's tokenizer"
        if name.startswith("tokenizer")
        else "the genesis' model configuration"
    )
    if not isinstance(stored, dict) or not isinstance(expected, dict):
        return f"{name}: differs from the file {why} gives"
    keys = sorted(k for k in set(stored) | set(expected) if stored.get(k) != expected.get(k))
    shown = "; ".join(
        f"{key} {_short(expected.get(key, '(absent)'))} expected, got "
        f"{_short(stored.get(key, '(absent)'))}"
        for key in keys[:3]
    )
    more = f"; and {len(keys) - 3} more" if len(keys) > 3 else ""
    return f"{name}: differs from the file {why} gives: {shown}{more}"


def _short(value: Any) -> str:
    text = json.dumps(value, sort_keys=True)
    return text if len(text) <= 60 else text[:57] + "..."


def _trainer_state(
    result: CheckResult,
    entry: LogEntry,
    step: OuterStep,
    genesis: Genesis,
    source: RunSource,
    digest: str,
) -> None:
    result.checked += 1
    try:
        document = json.loads(read_verified(source, digest, REPO_FILE_LIMIT))
        if not isinstance(document, dict):
            raise ValueError(f"expected a JSON object, got {type(document).__name__}")
        fixed = {
            "format": TRAINER_STATE_FORMAT,
            "step": step.step,
            "method": genesis.method,
            "config_digest": genesis.config_digest,
            "topology": {"clusters": genesis.topology.clusters, "stages": genesis.topology.stages},
        }
        problem = _differences(TRAINER_STATE, {k: document.get(k) for k in fixed}, fixed)
        if problem is not None:
            raise ValueError(problem.removeprefix(f"{TRAINER_STATE}: "))
        cursor = document.get("cursor")
        if not isinstance(cursor, dict):
            raise ValueError(f"expected a cursor object, got {cursor!r}")
        next_step = Cursor.from_dict(cursor).next_step
        if next_step != step.step + 1:
            raise ValueError(
                f"expected the cursor to continue with step {step.step + 1}, got {next_step}"
            )
    except (*_ERRORS, json.JSONDecodeError, UnicodeDecodeError) as exc:
        result.fail(f"revision file {TRAINER_STATE}: {exc}", index=entry.index, step=step.step)
