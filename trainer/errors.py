"""The trainer's error hierarchy."""

from __future__ import annotations


class TrainerError(Exception):
    """Base of every error raised by ``trainer``."""


class ConfigError(TrainerError, ValueError):
    """A training configuration field is invalid; the message names the field."""
