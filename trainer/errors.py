"""The trainer's error hierarchy."""

from __future__ import annotations


class TrainerError(Exception):
    """Base of every error raised by ``trainer``."""


class ConfigError(TrainerError, ValueError):
    """A training configuration field is invalid; the message names the field."""


class DataError(TrainerError):
    """The training data is missing, malformed or does not match its recorded digest."""


class CheckpointError(TrainerError):
    """A state to resume or re-execute from is missing a file or does not fit the configuration."""


class WorkerError(TrainerError):
    """A training process failed; the message names its rank and the first line of its error."""
