"""Checkpoint files: safetensors shards with a Hugging Face index, other tensor files,
``trainer_state.json``, and the manifest that names them all by SHA-256 (DESIGN.md §4).

Never pickle: everything here is safetensors or JSON.

Manifests and transfers need no torch, and a reader of manifests (the web app, a verifier)
should not pay for importing it: the tensor-handling names load their modules on first use.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from storage.checkpoint_files.manifest import (
    Manifest,
    ManifestEntry,
    manifest_root,
    validate_file_name,
)
from storage.checkpoint_files.transfer import (
    download_checkpoint,
    read_manifest,
    upload_files,
    upload_manifest,
)

if TYPE_CHECKING:
    from storage.checkpoint_files.files import write_files
    from storage.checkpoint_files.sharding import (
        INDEX_FILE,
        is_model_shard,
        model_index,
        tensor_nbytes,
        write_model_index,
    )
    from storage.checkpoint_files.tensors import save_tensors

_LAZY = {
    "storage.checkpoint_files.files": ("write_files",),
    "storage.checkpoint_files.sharding": (
        "INDEX_FILE",
        "is_model_shard",
        "model_index",
        "tensor_nbytes",
        "write_model_index",
    ),
    "storage.checkpoint_files.tensors": ("save_tensors",),
}
_MODULE_OF = {name: module for module, names in _LAZY.items() for name in names}


def __getattr__(name: str) -> Any:
    module = _MODULE_OF.get(name)
    if module is None:
        raise AttributeError(f"module 'storage.checkpoint_files' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value


__all__ = [
    "INDEX_FILE",
    "Manifest",
    "ManifestEntry",
    "download_checkpoint",
    "is_model_shard",
    "manifest_root",
    "model_index",
    "read_manifest",
    "save_tensors",
    "tensor_nbytes",
    "upload_files",
    "upload_manifest",
    "validate_file_name",
    "write_files",
    "write_model_index",
]
