"""The one computation of what the model says after a step (records/generations.py): the
recorder runs it on the stored checkpoint of every outer step, ``veritrain reproduce`` on the
re-executed one, and compares."""

from __future__ import annotations

from collections.abc import Mapping

import torch
from safetensors.torch import load

from records.generations import Generation, Generations
from storage import ObjectStore
from storage.checkpoint.sharding import is_model_shard
from trainer.config import TrainConfig
from trainer.data.tokenizer import Tokenizer
from trainer.generate import greedy_generate


def generate(
    config: TrainConfig, tokenizer: Tokenizer, state: Mapping[str, torch.Tensor]
) -> Generations:
    """Greedy continuations of the run's prompts by the model ``state`` (its full set of
    parameters, as a checkpoint's model files hold them)."""
    settings = config.generation
    prompt_ids = [tokenizer.encode(prompt) for prompt in settings.prompts]
    outputs = greedy_generate(
        config.model, state, prompt_ids, settings.max_new_tokens, eos_token_id=tokenizer.end_of_text
    )
    return Generations(
        prompts=settings.prompts,
        max_new_tokens=settings.max_new_tokens,
        generations=tuple(
            Generation(prompt=prompt, text=tokenizer.decode(ids), token_ids=tuple(ids))
            for prompt, ids in zip(settings.prompts, outputs, strict=True)
        ),
    )


def model_state(tensor_files: Mapping[str, Mapping[str, torch.Tensor]]) -> dict[str, torch.Tensor]:
    """The model's parameters, from a checkpoint's model shards (its other files left out)."""
    state: dict[str, torch.Tensor] = {}
    for name, tensors in tensor_files.items():
        if is_model_shard(name):
            state.update(tensors)
    return state


def stored_model_state(store: ObjectStore, files: Mapping[str, str]) -> dict[str, torch.Tensor]:
    """The model's parameters, read from the stored model shards among ``files`` (name ->
    digest); each read is verified against its digest as it streams."""
    shards: dict[str, Mapping[str, torch.Tensor]] = {}
    for name, digest in files.items():
        if is_model_shard(name):
            with store.open(digest) as reader:
                shards[name] = load(reader.read())
    return model_state(shards)
