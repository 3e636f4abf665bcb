"""Turning boto3/botocore failures into the storage error hierarchy, in one place."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

from botocore.exceptions import BotoCoreError, ClientError

from storage.errors import (
    InvalidRangeError,
    ObjectExistsError,
    ObjectNotFoundError,
    StorageError,
)

_NOT_FOUND = {"NoSuchKey", "NotFound", "404"}
_PRECONDITION_FAILED = {"PreconditionFailed", "412"}
_INVALID_RANGE = {"InvalidRange", "416"}


def error_code(exc: ClientError) -> str:
    """The S3 error code, or the HTTP status for bodiless (HEAD) responses."""
    code = exc.response.get("Error", {}).get("Code")
    if code:
        return str(code)
    return str(exc.response.get("ResponseMetadata", {}).get("HTTPStatusCode", "unknown"))


@contextlib.contextmanager
def s3_errors(action: str, location: str) -> Iterator[None]:
    """Re-raise S3 failures of ``action`` on ``location`` (``s3://bucket/key``) as
    :class:`StorageError` subclasses: a missing key as :class:`ObjectNotFoundError`, a failed
    ``If-None-Match: *`` as :class:`ObjectExistsError`, an unsatisfiable range as
    :class:`InvalidRangeError`."""
    try:
        yield
    except ClientError as exc:
        code = error_code(exc)
        message = exc.response.get("Error", {}).get("Message", "")
        if code in _NOT_FOUND:
            raise ObjectNotFoundError(f"no object at {location}") from exc
        if code in _PRECONDITION_FAILED:
            raise ObjectExistsError(
                f"expected no object at {location}, found one (objects are write-once)"
            ) from exc
        if code in _INVALID_RANGE:
            raise InvalidRangeError(f"{action} {location}: range not satisfiable") from exc
        raise StorageError(f"{action} {location} failed: {code} {message}".rstrip()) from exc
    except BotoCoreError as exc:
        raise StorageError(f"{action} {location} failed: {exc}") from exc
