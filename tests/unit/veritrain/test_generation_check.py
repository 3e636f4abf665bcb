"""The tolerance rule for what the model says (veritrain/generations.py): every recorded
token, teacher-forced through the model, is its greedy choice within the published margin."""

from __future__ import annotations

from dataclasses import replace

import torch

from records.generations import Generation, Generations
from trainer.data.tokenizer import ByteTokenizer
from trainer.generate import model_from_state
from trainer.model import CausalLM
from trainer.presets import run_preset
from veritrain.generations import check_continuations, generate
from veritrain.policy import GENERATION_LOGIT_MARGIN

CONFIG = run_preset("tiny")
TOKENIZER = ByteTokenizer()


def _state() -> dict[str, torch.Tensor]:
    torch.manual_seed(0)
    return {n: p.detach() for n, p in CausalLM(CONFIG.model).named_parameters()}


def _with_first(said: Generations, first: Generation) -> Generations:
    return replace(said, generations=(first, *said.generations[1:]))


def _problems(said: Generations, state: dict[str, torch.Tensor]) -> list[str | None]:
    checks = check_continuations(CONFIG, TOKENIZER, state, said, margin=GENERATION_LOGIT_MARGIN)
    return [c.problem for c in checks]


def test_the_models_own_continuations_pass_with_no_gap() -> None:
    state = _state()
    said = generate(CONFIG, TOKENIZER, state)

    checks = check_continuations(CONFIG, TOKENIZER, state, said, margin=GENERATION_LOGIT_MARGIN)
    assert [c.problem for c in checks] == [None] * len(said.generations)
    assert max(c.largest_gap for c in checks) <= 1e-5  # one pass against a cached decode
    assert sum(c.tokens for c in checks) > 0


def test_a_token_the_model_does_not_choose_is_named() -> None:
    state = _state()
    said = generate(CONFIG, TOKENIZER, state)
    first = said.generations[0]
    # the least likely token at position 3 of the first continuation
    model_input = torch.tensor([TOKENIZER.encode(first.prompt) + list(first.token_ids[:3])])
    worst = int(model_from_state(CONFIG.model, state)(model_input)[0, -1].argmin())
    ids = (*first.token_ids[:3], worst, *first.token_ids[4:])
    faked = Generation(prompt=first.prompt, text=TOKENIZER.decode(ids), token_ids=ids)

    [problem, *rest] = _problems(_with_first(said, faked), state)
    assert problem is not None and problem.startswith(f"token 3 ({worst}) is ")
    assert "below the model's best logit" in problem
    assert rest == [None] * len(rest)


def test_text_that_is_not_its_tokens_and_a_premature_stop_are_refused() -> None:
    state = _state()
    said = generate(CONFIG, TOKENIZER, state)
    first = said.generations[0]
    other_text = replace(first, text="something else entirely")
    cut = replace(first, token_ids=first.token_ids[:5], text=TOKENIZER.decode(first.token_ids[:5]))

    assert _problems(_with_first(said, other_text), state)[0] == (
        "its text is not its tokens decoded"
    )
    stopped = _problems(_with_first(said, cut), state)[0]
    assert stopped is not None and stopped.startswith("greedy decoding stops at end-of-text")
