"""The errors of the composition root, one hierarchy. The CLI turns them, like every
package's errors, into one line and exit status 2 (``verify`` and ``reproduce`` report a
failed check with exit status 1 instead).

    VeritrainError
    ├── SettingsError       a VERITRAIN_* setting is malformed
    ├── LaunchError         the options of a training launch contradict each other
    ├── RecorderError       the ledger and the run being trained disagree (e.g. resuming another run)
    ├── SourceError         a run source cannot deliver (unknown run, unreachable or malformed server)
    ├── CorruptObjectError  an object's bytes do not hash to its digest
    ├── RecordedRunError    the log does not hold what the caller needs (no such step, ...)
    ├── DownloadError       what was downloaded is not what the log records
    ├── ReproduceError      a step cannot be re-executed as asked
    └── BenchError          a benchmark cannot run or measure as asked
"""  # noqa: E501

from __future__ import annotations


class VeritrainError(Exception):
    """Base of the errors raised by ``veritrain/`` itself."""


class SettingsError(VeritrainError, ValueError):
    """A ``VERITRAIN_*`` setting is malformed; the message is one line meant for a person."""


class LaunchError(VeritrainError, ValueError):
    """The options of a training launch contradict each other (``veritrain train``)."""

    def __init__(self, message: str, *, option: str | None = None) -> None:
        super().__init__(message)
        self.option = option
        """The one option at fault, where there is one (e.g. ``--verification``)."""


class RecorderError(VeritrainError):
    """The ledger and the run being trained disagree (e.g. resuming a different run)."""


class SourceError(VeritrainError):
    """The source cannot deliver what was asked (unknown run, unreachable server, malformed
    answer)."""


class CorruptObjectError(VeritrainError, ValueError):
    """An object's bytes do not hash to the digest it was fetched by."""


class RecordedRunError(VeritrainError):
    """The log does not hold what the caller needs (no such step, a malformed genesis, ...)."""


class DownloadError(VeritrainError, ValueError):
    """What was downloaded is not what the log records (another root, a malformed manifest)."""


class ReproduceError(VeritrainError):
    """The step cannot be re-executed as asked (no such step or cluster, no state to start from)."""


class BenchError(VeritrainError):
    """A benchmark cannot run or measure as asked."""
