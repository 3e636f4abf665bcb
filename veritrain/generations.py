"""The one computation of what the model says after a step (records/generations.py): the
recorder runs it on the stored checkpoint of every outer step, ``veritrain reproduce`` on the
re-executed one, and compares token for token (bitwise).

On other hardware a near-tie of the argmax may flip and the rest of a free-running
continuation with it, so under tolerance ``reproduce`` checks the recorded tokens instead
(:func:`check_continuations`): the recorded prompt and continuation are run through the
recorded checkpoint in one pass (teacher forcing), and every recorded token must be the greedy
choice at its position up to a published margin on the logits (veritrain/policy.py,
``GENERATION_LOGIT_MARGIN``); the continuation must stop where greedy decoding stops (at
end-of-text or after ``max_new_tokens``) and its text must be its tokens decoded. A faked
token is one the model does not choose; only a token tied with the model's choice within the
margin can differ from an honest run. This is the idea behind TOPLOC (Ong et al. 2025,
"TOPLOC: A Locality Sensitive Hashing Scheme for Trustless Verifiable Inference"), which
commits to the top-k of the last hidden state so that a check survives hardware drift;
here the recorded checkpoint is public, so the verifier recomputes the logits and needs no
commitment."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

import torch
from safetensors.torch import load

from records.generations import Generation, Generations
from storage import ObjectStore
from storage.checkpoint_files.sharding import is_model_shard
from trainer.config import TrainConfig
from trainer.data.tokenizer import Tokenizer
from trainer.generate import greedy_generate, model_from_state
from trainer.model import CausalLM


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


@dataclass(frozen=True)
class ContinuationCheck:
    """One recorded continuation, teacher-forced through a model."""

    prompt: str
    tokens: int
    largest_gap: float
    """The largest, over the continuation's positions, of (the best logit − the recorded
    token's logit); 0 when every recorded token is the model's argmax."""
    problem: str | None = None
    """Why the continuation is not the model's greedy one (None: it is, within the margin)."""


def check_continuations(
    config: TrainConfig,
    tokenizer: Tokenizer,
    state: Mapping[str, torch.Tensor],
    said: Generations,
    *,
    margin: float,
) -> list[ContinuationCheck]:
    """Whether each recorded continuation of ``said`` is what greedy decoding of the model
    ``state`` says, each token within ``margin`` (logits) of the model's best (module
    docstring)."""
    model = model_from_state(config.model, state)
    end = tokenizer.end_of_text
    checks = []
    with torch.no_grad():
        for generation in said.generations:
            prompt, new = tokenizer.encode(generation.prompt), list(generation.token_ids)
            checks.append(
                _check_one(model, generation.prompt, prompt, new, margin, end, said.max_new_tokens)
                if new
                else ContinuationCheck(
                    prompt=generation.prompt,
                    tokens=0,
                    largest_gap=0.0,
                    problem=None if said.max_new_tokens == 0 else "no tokens recorded",
                )
            )
            if checks[-1].problem is None and tokenizer.decode(new) != generation.text:
                checks[-1] = ContinuationCheck(
                    prompt=generation.prompt,
                    tokens=len(new),
                    largest_gap=checks[-1].largest_gap,
                    problem="its text is not its tokens decoded",
                )
    return checks


def _check_one(
    model: CausalLM,
    text: str,
    prompt: list[int],
    new: list[int],
    margin: float,
    end: int,
    max_new_tokens: int,
) -> ContinuationCheck:
    if any(t == end for t in new[:-1]) or (len(new) < max_new_tokens and new[-1] != end):
        return ContinuationCheck(
            prompt=text,
            tokens=len(new),
            largest_gap=0.0,
            problem=f"greedy decoding stops at end-of-text or after {max_new_tokens} tokens, "
            f"not after {len(new)}",
        )
    if not all(0 <= t < model.config.vocab_size for t in new):
        return ContinuationCheck(
            prompt=text, tokens=len(new), largest_gap=0.0, problem="a token id out of range"
        )
    # (1, T, vocab): position p predicts token p + 1, so the continuation's tokens are
    # predicted by positions len(prompt) - 1 .. T - 2.
    logits = model(torch.tensor([prompt + new]))[0, len(prompt) - 1 : -1].double()
    chosen = logits.gather(1, torch.tensor(new).unsqueeze(1)).squeeze(1)
    gaps = logits.max(dim=1).values - chosen
    largest = float(gaps.max())
    first = next((i for i, g in enumerate(gaps.tolist()) if g > margin), None)
    problem = (
        None
        if first is None
        else f"token {first} ({new[first]}) is {gaps[first].item():.3g} below the model's best "
        f"logit (token {int(logits[first].argmax())}), more than the margin {margin}"
    )
    return ContinuationCheck(prompt=text, tokens=len(new), largest_gap=largest, problem=problem)
