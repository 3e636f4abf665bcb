"""storage: content-addressed, write-once object stores (a local folder, S3) and checkpoint
files (safetensors shards, a Hugging Face index, a manifest with a root digest).

Importing this package loads neither boto3 nor torch; ``storage.s3`` and
``storage.checkpoint_files`` do.
"""

from storage.base import ObjectStore
from storage.factory import open_store
from storage.local import LocalStore
from storage.reader import ObjectReader

__all__ = ["LocalStore", "ObjectReader", "ObjectStore", "open_store"]
