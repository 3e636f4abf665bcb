"""``with`` support for what holds a file, a connection or a client until closed."""

from __future__ import annotations

from abc import abstractmethod
from types import TracebackType
from typing import Self


class Closing:
    """Leaving a ``with`` block closes the object, as it would a file."""

    @abstractmethod
    def close(self) -> None:
        """Release what the object holds."""

    def __enter__(self) -> Self:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()
