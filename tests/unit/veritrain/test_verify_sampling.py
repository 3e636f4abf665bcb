"""The re-hash sample is drawn from local randomness mixed with the signed root: the operator
cannot predict it, and repeated verifications cover different objects."""

from __future__ import annotations

from veritrain.audit.verify.sampling import sample


def test_draws_are_subsets_of_the_asked_size_and_differ_between_verifications() -> None:
    population = list(range(100))
    draws = {tuple(sample(b"root", population, 4, "checkpoints")) for _ in range(20)}

    assert all(len(d) == 4 and set(d) <= set(population) and list(d) == sorted(d) for d in draws)
    assert len(draws) > 1


def test_a_small_population_is_checked_entirely() -> None:
    assert sample(b"root", [3, 1, 2], 4, "shards") == [1, 2, 3]
