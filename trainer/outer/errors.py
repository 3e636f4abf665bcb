"""Errors of the outer algorithm; part of the ``trainer.errors`` hierarchy."""

from __future__ import annotations

from trainer.errors import TrainerError


class OuterError(TrainerError):
    """Base of the errors raised by ``trainer.outer``."""


class PayloadError(OuterError, ValueError):
    """A gathered payload or a local parameter list does not have the expected layout."""


class OuterStateError(OuterError, ValueError):
    """A state dict given to ``load_state_dict`` does not match this algorithm."""


class CallOrderError(OuterError, RuntimeError):
    """``contribution``/``apply`` were called out of the order documented in protocol.py."""
