"""The ledger's error hierarchy. The web layer maps these to HTTP statuses in one handler,
the CLI to one line and a non-zero exit.

    LedgerError
    ├── VerificationError        a proof, note, tree head or chain does not verify (→ 422 / exit 2)
    ├── NotFoundError            unknown run, entry, tree head or key             (→ 404)
    │   ├── RunNotFoundError
    │   ├── EntryNotFoundError
    │   ├── TreeHeadNotFoundError
    │   └── TileNotFoundError    a tlog-tiles path that names no tile of the log (yet)
    ├── InvalidRequestError      the caller asked for something malformed          (→ 400)
    │   ├── InvalidRunIdError
    │   ├── InvalidEntryError
    │   │   └── EntryTooLargeError
    │   └── InvalidRangeError    index >= size, size > latest, old > new, old == 0
    ├── ConflictError            the request clashes with what the log holds      (→ 409)
    │   ├── RunExistsError
    │   ├── RunFinishedError
    │   ├── DuplicateStepError
    │   └── LogKeyMismatchError
    ├── SchemaMissingError       the database has no ledger tables yet            (→ 503)
    └── WitnessRefusal           a witness refuses an add-checkpoint request (C2SP tlog-witness)
        ├── MalformedSubmissionError     the body is malformed, or old size > size  (→ 400)
        ├── UntrustedCheckpointError     no trusted log signature verifies          (→ 403)
        ├── UnknownLogError              the checkpoint's origin is not a known log (→ 404)
        ├── OldSizeMismatchError         old size != the size last cosigned         (→ 409)
        └── InconsistentCheckpointError  the checkpoint does not extend the cosigned one (→ 422)
"""

from __future__ import annotations


class LedgerError(Exception):
    """Base of every error raised by ``ledger``."""


class VerificationError(LedgerError):
    """A Merkle proof, signed note, tree head or hash chain does not verify.

    Messages say what was expected and what was found. Run-level checks also set
    :attr:`index` to the first entry that is wrong (``None`` when the failure is not tied
    to one entry, e.g. a bad tree-head signature)."""

    def __init__(self, message: str, *, index: int | None = None) -> None:
        super().__init__(message)
        self.index = index


class NotFoundError(LedgerError):
    """A run, entry, tree head or key does not exist."""


class RunNotFoundError(NotFoundError):
    """No run with this id is in the ledger."""


class EntryNotFoundError(NotFoundError):
    """The run has no entry at this index (or for this outer step)."""


class TreeHeadNotFoundError(NotFoundError):
    """No signed tree head of this size is stored for the run."""


class TileNotFoundError(NotFoundError):
    """A tlog-tiles path that is not a tile name, or a tile the log does not reach yet."""


class InvalidRequestError(LedgerError):
    """The caller's arguments are malformed; retrying the same call cannot succeed."""


class InvalidRunIdError(InvalidRequestError):
    """A run id that could not safely appear in URLs, file names and log origins."""


class InvalidEntryError(InvalidRequestError):
    """An entry kind, payload, step or metric that cannot be recorded."""


class EntryTooLargeError(InvalidEntryError):
    """An entry body above the 64 KiB limit (entries hold digests, never blobs)."""


class InvalidRangeError(InvalidRequestError):
    """A proof or listing asked for indices or sizes the log does not have."""


class ConflictError(LedgerError):
    """The request is well formed but clashes with what the log already holds."""


class RunExistsError(ConflictError):
    """``create_run`` for a run id that is already taken."""


class RunFinishedError(ConflictError):
    """An append after the run's ``run.final`` entry."""


class DuplicateStepError(ConflictError):
    """A second ``outer_step`` entry for a step the run already recorded (e.g. a resumed
    trainer replaying a step)."""


class LogKeyMismatchError(ConflictError):
    """The signing key offered for a run's log is not the run's enrolled log key (e.g. a
    resumed run on a machine with another key directory)."""


class SchemaMissingError(LedgerError):
    """The database is reachable but has no ledger tables; run ``veritrain db upgrade``."""


class WitnessRefusal(LedgerError):
    """A witness refuses to cosign a submitted checkpoint. tlog-witness fixes the HTTP status
    of each subclass; ``web/witness_app.py`` maps them."""


class MalformedSubmissionError(WitnessRefusal):
    """The add-checkpoint body does not follow tlog-witness, or its old size exceeds the
    checkpoint's size."""


class UntrustedCheckpointError(WitnessRefusal):
    """No signature from a log key the witness trusts for the origin verifies (or one from
    a trusted key fails to)."""


class UnknownLogError(WitnessRefusal):
    """The checkpoint's origin is not a log the witness is configured for."""


class OldSizeMismatchError(WitnessRefusal):
    """The request's old size is not the size of the latest checkpoint the witness cosigned
    for the origin; :attr:`size` is that size (the 409 answer's body)."""

    def __init__(self, message: str, *, size: int) -> None:
        super().__init__(message)
        self.size = size


class InconsistentCheckpointError(WitnessRefusal):
    """The checkpoint is not consistent with the one the witness last cosigned: a bad
    consistency proof, another root at the same size, or a size-0 tree with a root that is
    not the empty tree's."""
