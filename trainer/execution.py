"""How a re-execution may run differently from the recorded configuration.

An auditor re-executes a step with the run's recorded ``TrainConfig`` (its digest names the
state the step starts from), but may choose *how* the arithmetic runs: another precision,
another intra-op thread count, another device. That is how other hardware is emulated
(``veritrain reproduce --precision bf16 --threads 4``) and how the audit benchmark produces
legitimately different executions. Nothing else of the configuration can be overridden: a
different learning rate or data order is a different computation, not a different machine.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Literal

from trainer.config import PRECISIONS, Precision, TrainConfig
from trainer.errors import ConfigError

Device = Literal["auto", "cpu", "cuda"]


@dataclass(frozen=True, kw_only=True)
class Execution:
    """Overrides of the recorded execution settings (None: as recorded)."""

    precision: Precision | None = None
    threads: int | None = None
    device: Device | None = None

    def __post_init__(self) -> None:
        if self.precision is not None and self.precision not in PRECISIONS:
            choices = ", ".join(PRECISIONS)
            raise ConfigError(
                f"Execution.precision must be one of {choices}, got {self.precision!r}"
            )
        if self.threads is not None and self.threads < 1:
            raise ConfigError(f"Execution.threads must be >= 1, got {self.threads}")
        if self.device is not None and self.device not in ("auto", "cpu", "cuda"):
            raise ConfigError(
                f"Execution.device must be 'auto', 'cpu' or 'cuda', got {self.device!r}"
            )

    def applied_to(self, config: TrainConfig) -> TrainConfig:
        """``config`` as this execution runs it."""
        return replace(
            config,
            precision=self.precision or config.precision,
            threads=self.threads or config.threads,
            device=self.device or config.device,
        )

    def differences(self, config: TrainConfig) -> list[str]:
        """What this execution changes in ``config``, for a person ("precision bf16 -> fp32")."""
        changed = self.applied_to(config)
        return [
            f"{name} {getattr(config, name)} -> {getattr(changed, name)}"
            for name in ("precision", "threads", "device")
            if getattr(config, name) != getattr(changed, name)
        ]
