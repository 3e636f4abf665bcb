"""Greedy decoding from a whole model state: what the model says at a step, reproducibly.

The recorder calls :func:`greedy_generate` on the global model after each outer step and
reproduce calls it again on the downloaded checkpoint; both must get the same tokens, so the
decoding is the simplest deterministic one: fp32 on the CPU, one prompt at a time (no padding,
so a prompt's continuation does not depend on the others), argmax at every position (ties go
to the lowest token id, as ``torch.argmax`` and transformers' greedy search break them), a
key/value cache so each new token costs one position's forward pass. It is what transformers'
``generate(do_sample=False, max_new_tokens=N)`` computes for the same weights (a unit test
checks it token for token), but bitwise equality is only claimed for this function re-run
on the same machine type and thread count.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import torch

from trainer.errors import CheckpointError, ConfigError
from trainer.model import CausalLM, KVCache, ModelConfig


def greedy_generate(
    config: ModelConfig,
    state: Mapping[str, torch.Tensor],
    prompts: Sequence[Sequence[int]],
    max_new_tokens: int,
    eos_token_id: int | None = None,
) -> list[list[int]]:
    """Greedy continuations of ``prompts`` (token ids) by the model ``state`` (full-model
    parameter names, as a checkpoint's model files hold them).

    Returns each prompt's new tokens only: ``max_new_tokens`` of them, or fewer when the model
    produced ``eos_token_id``, which is then the last one. A prompt and its continuation must
    fit in ``config.context`` positions."""
    if max_new_tokens < 0:
        raise ConfigError(f"expected max_new_tokens >= 0, got {max_new_tokens}")
    for i, prompt in enumerate(prompts):
        if not prompt:
            raise ConfigError(f"expected prompt {i} to hold at least one token, got none")
        if not all(0 <= t < config.vocab_size for t in prompt):
            raise ConfigError(
                f"expected prompt {i}'s token ids in [0, {config.vocab_size}), got {list(prompt)}"
            )
        if len(prompt) + max_new_tokens > config.context:
            raise ConfigError(
                f"expected prompt {i} ({len(prompt)} tokens) plus {max_new_tokens} new tokens "
                f"to fit the model's context of {config.context}"
            )
    model = model_from_state(config, state)
    with torch.no_grad():
        return [_continue(model, list(prompt), max_new_tokens, eos_token_id) for prompt in prompts]


def model_from_state(config: ModelConfig, state: Mapping[str, torch.Tensor]) -> CausalLM:
    """A CausalLM in eval mode holding exactly ``state``: every parameter, no other tensor (a
    tied output projection is the embedding, so it is absent from the state)."""
    # nn.Linear's constructor draws from the global generator: a recorder generating between
    # two outer steps must leave it where training (and its saved RNG state) expects it.
    with torch.random.fork_rng(devices=[]):
        model = CausalLM(config).eval()
    expected = dict(model.named_parameters())
    if set(state) != set(expected):
        missing, extra = sorted(set(expected) - set(state)), sorted(set(state) - set(expected))
        raise CheckpointError(
            f"expected the model's parameters, missing {missing}, unexpected {extra}"
        )
    with torch.no_grad():
        for name, param in expected.items():
            if state[name].shape != param.shape:
                raise CheckpointError(
                    f"expected {name} of shape {tuple(param.shape)}, got {tuple(state[name].shape)}"
                )
            param.copy_(state[name].float())
    return model


def _continue(
    model: CausalLM, prompt: list[int], max_new_tokens: int, eos_token_id: int | None
) -> list[int]:
    cache = KVCache()
    new: list[int] = []
    logits = model(torch.tensor([prompt]), cache)  # (1, T, vocab): the prompt in one pass
    while len(new) < max_new_tokens:
        token = int(logits[0, -1].argmax())
        new.append(token)
        if token == eos_token_id or len(new) == max_new_tokens:
            break
        logits = model(torch.tensor([[token]]), cache)  # (1, 1, vocab): one more position
    return new
