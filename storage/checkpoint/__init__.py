"""Checkpoint files: safetensors shards with a Hugging Face index, other tensor files,
``trainer_state.json``, and the manifest that names them all by SHA-256 (DESIGN.md §4).

Never pickle: everything here is safetensors or JSON.
"""

from storage.checkpoint.files import (
    TRAINER_STATE_FILE,
    Checkpoint,
    load_checkpoint,
    write_checkpoint,
    write_files,
)
from storage.checkpoint.manifest import Manifest, ManifestEntry, manifest_root, validate_file_name
from storage.checkpoint.sharding import (
    INDEX_FILE,
    load_model,
    model_index,
    shard_file_name,
    tensor_nbytes,
    write_model,
    write_model_index,
)
from storage.checkpoint.tensors import (
    flatten_tensors,
    load_tensors,
    save_tensors,
    unflatten_tensors,
)
from storage.checkpoint.transfer import (
    download_checkpoint,
    read_manifest,
    upload_checkpoint,
    upload_files,
    upload_manifest,
)

__all__ = [
    "INDEX_FILE",
    "TRAINER_STATE_FILE",
    "Checkpoint",
    "Manifest",
    "ManifestEntry",
    "download_checkpoint",
    "flatten_tensors",
    "load_checkpoint",
    "load_model",
    "load_tensors",
    "manifest_root",
    "model_index",
    "read_manifest",
    "save_tensors",
    "shard_file_name",
    "tensor_nbytes",
    "unflatten_tensors",
    "upload_checkpoint",
    "upload_files",
    "upload_manifest",
    "validate_file_name",
    "write_checkpoint",
    "write_files",
    "write_model",
    "write_model_index",
]
