"""What the model says: the greedy generations recorded after every outer step.

After each step the recorder continues the run's fixed prompts (``TrainConfig.generation``)
with the global model, greedily, and stores the result as one object::

    {"prompts": ["def ", ...], "max_new_tokens": 24,
     "generations": [{"prompt": "def ", "text": "...", "token_ids": [..]}, ...]}

(canonical JSON), named in the step's entry as ``generations: {"object": <digest>}``.
``veritrain reproduce`` re-generates them from the re-executed model and compares them bit for
bit; ``transformers``' greedy ``generate`` on a downloaded checkpoint gives the same tokens.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from records.fields import Fields


@dataclass(frozen=True, kw_only=True)
class Generation:
    prompt: str
    text: str
    """The continuation, decoded (the prompt not repeated)."""
    token_ids: tuple[int, ...]
    """The continuation's token ids (ending with end-of-text when the model ended the text)."""

    def to_payload(self) -> dict[str, Any]:
        return {"prompt": self.prompt, "text": self.text, "token_ids": list(self.token_ids)}

    @classmethod
    def read(cls, f: Fields) -> Generation:
        value = cls(
            prompt=f.string("prompt"),
            text=f.string("text"),
            token_ids=f.integers("token_ids", minimum=0),
        )
        f.exactly()
        return value


@dataclass(frozen=True, kw_only=True)
class Generations:
    """The generations object of one outer step."""

    prompts: tuple[str, ...]
    max_new_tokens: int
    generations: tuple[Generation, ...]

    def to_payload(self) -> dict[str, Any]:
        return {
            "prompts": list(self.prompts),
            "max_new_tokens": self.max_new_tokens,
            "generations": [g.to_payload() for g in self.generations],
        }

    @classmethod
    def from_payload(cls, payload: Any, *, where: str = "generations object") -> Generations:
        f = Fields(payload, where=where)
        value = cls(
            prompts=f.strings("prompts"),
            max_new_tokens=f.integer("max_new_tokens", minimum=0),
            generations=f.items("generations", Generation.read),
        )
        f.exactly()
        if tuple(g.prompt for g in value.generations) != value.prompts:
            raise f.fail(
                "generations",
                "one generation per prompt, in the prompts' order",
                [g.prompt for g in value.generations],
            )
        for i, generation in enumerate(value.generations):
            if len(generation.token_ids) > value.max_new_tokens:
                raise f.fail(
                    f"generations[{i}].token_ids",
                    f"at most {value.max_new_tokens} tokens",
                    len(generation.token_ids),
                )
        return value


@dataclass(frozen=True, kw_only=True)
class GenerationsRef:
    """How an ``outer_step`` entry names its generations object."""

    object: str

    def to_payload(self) -> dict[str, Any]:
        return {"object": self.object}

    @classmethod
    def read(cls, f: Fields) -> GenerationsRef:
        value = cls(object=f.digest("object"))
        f.exactly()
        return value
