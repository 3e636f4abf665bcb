"""An operator holding every key rewrites a real recorded run (tests/e2e/forger.py): which
rewrites ``veritrain verify`` catches, and which only a returning verifier, witnesses or
independent cluster keys can catch (docs/auditing.md, "What an operator holding every key can
still do").

Each case rebuilds the whole log as consistently as the operator can: a new hash chain and
tree heads signed with the run's log key, fresh statements, quotes and contribution
signatures over the edited payloads. What still fails is what verify *recomputes* from
signed data instead of trusting."""

from __future__ import annotations

from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from e2e.forger import Forger, Payloads

from veritrain.audit.verify import Report, SeenHeads, verify_run
from veritrain.settings import Settings
from veritrain.sources import DirectSource

STEP = 2


def verify(settings: Settings, seen: Path | None = None) -> Report:
    with DirectSource(settings) as source:
        return verify_run(source, None, seen_heads=SeenHeads(seen) if seen else None)


def run_id(settings: Settings) -> str:
    with DirectSource(settings) as source:
        return source.latest_run_id()


def edit_payload(
    kind: str, change: Callable[[dict[str, Any]], None], *, step: int | None = None
) -> Callable[[Payloads], Payloads]:
    def edit(payloads: Payloads) -> Payloads:
        for entry_kind, payload in payloads:
            if entry_kind == kind and (step is None or payload.get("step") == step):
                change(payload)
        return payloads

    return edit


def ten_times_the_learning_rate(genesis: dict[str, Any]) -> None:
    genesis["hyperparameters"]["inner"]["lr"] *= 10


def claim_other_shards(step: dict[str, Any]) -> None:
    step["data_ranges"][0]["shards"] = [[0, 0]]


def inflate_the_final_entry(final: dict[str, Any]) -> None:
    final["tokens"] *= 2
    final["final_metrics"]["eval_loss"] = 0.1


def apply_round_99(step: dict[str, Any]) -> None:
    made_up = {"cluster": 0, "stage": 0, "digest": "ab" * 32}
    step["applied"].append(
        {
            "round": 99,
            "contribution_digests": [made_up],
            "payload_bytes": 1,
            "rank": 28,
            "bits": 2,
            "verdicts": [],
        }
    )
    step["compression"] = {"rank": 28, "bits": 2}


def loosen_the_tolerance(genesis: dict[str, Any]) -> None:
    policy = genesis["verification_policy"]
    genesis["verification_policy"] = {
        **policy,
        "mode": "tolerance",
        "fallback": {**policy["fallback"], "delta": 1e9},
    }


def name_hardware_nobody_has(genesis: dict[str, Any]) -> None:
    hardware = genesis["verification_policy"]["hardware"]
    genesis["verification_policy"]["hardware"] = {
        **hardware,
        "device": "quantum",
        "machine": "vax",
        "torch": "any",
    }


Z9000 = {
    "device": "cuda",
    "gpu": "Z9000",
    "cuda": "99.9",
    "cudnn": "99900",
    "deterministic": {
        "algorithms": True,
        "cudnn_benchmark": False,
        "cublas_workspace_config": ":4096:8",
    },
}
"""A GPU class within every published bound that nobody has: it would put every auditor into
tolerance mode."""


def name_a_gpu_nobody_has(genesis: dict[str, Any]) -> None:
    hardware = genesis["verification_policy"]["hardware"]
    genesis["verification_policy"]["hardware"] = {**hardware, **Z9000}
    genesis["topology"]["device"] = "cuda"


def lower_the_eval_loss(step: dict[str, Any]) -> None:
    step["metrics"]["eval_loss"] -= 0.5


def lower_the_eval_loss_and_call_it_non_finite(step: dict[str, Any]) -> None:
    """Kept in ``metrics`` and listed as non-finite: reproduce used to skip it."""
    lower_the_eval_loss(step)
    step["nonfinite_metrics"] = sorted({*step["nonfinite_metrics"], "eval_loss", "perplexity"})


def call_the_eval_loss_non_finite(step: dict[str, Any]) -> None:
    """Left out of ``metrics`` and listed as non-finite: consistent, but not what it was."""
    for name in ("eval_loss", "perplexity"):
        del step["metrics"][name]
    step["nonfinite_metrics"] = sorted({*step["nonfinite_metrics"], "eval_loss", "perplexity"})


CAUGHT: dict[str, tuple[Callable[[Payloads], Payloads], int, str]] = {
    # rewrite: (edit, the check that fails, what its message says)
    "lr x10, config digest kept": (
        edit_payload("run.genesis", ten_times_the_learning_rate),
        10,
        "config digest",
    ),
    "data ranges claim other shards": (
        edit_payload("outer_step", claim_other_shards, step=STEP),
        8,
        "assignment rule gives",
    ),
    "run.final inflated": (edit_payload("run.final", inflate_the_final_entry), 11, "tokens"),
    "round 99 applied with a made-up digest": (
        edit_payload("outer_step", apply_round_99, step=STEP),
        6,
        "round 99",
    ),
    "tolerance delta 1e9": (
        edit_payload("run.genesis", loosen_the_tolerance),
        10,
        "published bound",
    ),
    "hardware class nobody has": (
        edit_payload("run.genesis", name_hardware_nobody_has),
        10,
        "hardware device",
    ),
    # The clusters' processes signed the class they measured when they enrolled: an operator
    # who re-signs their enrolments as they were cannot make the policy name another.
    "a GPU nobody has (Z9000, CUDA 99.9)": (
        edit_payload("run.genesis", name_a_gpu_nobody_has),
        10,
        "gpu None measured by cluster 0, 'Z9000' in the policy",
    ),
    "eval_loss lowered and also listed as non-finite": (
        edit_payload("outer_step", lower_the_eval_loss_and_call_it_non_finite, step=STEP),
        9,
        "'eval_loss' is recorded both as",
    ),
}


@pytest.mark.parametrize("case", list(CAUGHT))
def test_rewrites_verify_catches_even_from_an_operator_with_every_key(
    case: str, fresh_run: Settings
) -> None:
    edit, check, message = CAUGHT[case]
    Forger(fresh_run, run_id(fresh_run)).rewrite(edit)

    report = verify(fresh_run)
    text = report.render()
    assert not report.ok, f"{case} went unnoticed:\n{text}"
    failures = [f.message for f in report.results[check].failures]
    assert any(message in m for m in failures), (
        f"{case}: check {check} does not say {message!r}:\n{text}"
    )
    others = {n for n, r in report.results.items() if not r.passed}
    assert others == {check}, (
        f"{case}: the forgery is consistent elsewhere, yet checks {sorted(others)} failed:\n{text}"
    )


def test_quotes_are_judged_at_the_time_their_entry_was_recorded(fresh_run: Settings) -> None:
    later = datetime.now(UTC) + timedelta(days=3 * 365)
    ticks = iter(range(10_000))
    Forger(fresh_run, run_id(fresh_run)).rewrite(
        lambda p: p, clock=lambda: later + timedelta(seconds=next(ticks))
    )

    report = verify(fresh_run)
    assert not report.results[5].passed, report.render()
    assert all(
        "endorsement" in f.message or "expired" in f.message for f in report.results[5].failures
    ), report.render()


def test_a_consistent_metric_rewrite_passes_verify_and_fails_reproduce(fresh_run: Settings) -> None:
    """The honest limit: a rewrite of a measurement, re-signed with every key, is consistent;
    only re-executing the step (or a witness that saw the first history) exposes it."""
    from veritrain.audit.reproduce import reproduce_step

    Forger(fresh_run, run_id(fresh_run)).rewrite(
        edit_payload("outer_step", lower_the_eval_loss, step=STEP)
    )

    assert verify(fresh_run).ok
    with DirectSource(fresh_run) as source:
        comparison = reproduce_step(source, None, STEP)
    assert not comparison.ok
    assert any(m.startswith("metric eval_loss") for m in comparison.mismatched), comparison.render()


@pytest.mark.parametrize(
    "edit", [lower_the_eval_loss_and_call_it_non_finite, call_the_eval_loss_non_finite]
)
def test_a_metric_listed_as_non_finite_must_be_non_finite_when_reproduced(
    fresh_run: Settings, edit: Callable[[dict[str, Any]], None]
) -> None:
    from veritrain.audit.reproduce import reproduce_step

    Forger(fresh_run, run_id(fresh_run)).rewrite(edit_payload("outer_step", edit, step=STEP))

    with DirectSource(fresh_run) as source:
        comparison = reproduce_step(source, None, STEP)
    assert not comparison.ok
    assert any(
        m.startswith("metric eval_loss: recorded as non-finite, re-executed ")
        for m in comparison.mismatched
    ), comparison.render()


def test_a_log_rewritten_under_another_origin_is_caught_only_by_a_returning_verifier(
    fresh_run: Settings, tmp_path: Path
) -> None:
    seen = tmp_path / "seen"
    assert verify(fresh_run, seen).ok  # this verifier has seen the honest run
    Forger(fresh_run, run_id(fresh_run)).rewrite(
        edit_payload("outer_step", lower_the_eval_loss, step=STEP),
        key_dir=tmp_path / "new-keys",
        origin="elsewhere.example",
    )

    assert verify(fresh_run).ok, (
        "a first-time verifier cannot tell (witnesses can: docs/auditing.md)"
    )
    returning = verify(fresh_run, seen)
    assert not returning.ok
    assert any("origin changed" in f.message for f in returning.results[1].failures), (
        returning.render()
    )


def test_a_rollback_that_drops_the_final_entry_is_caught_by_a_returning_verifier(
    fresh_run: Settings, tmp_path: Path
) -> None:
    seen = tmp_path / "seen"
    assert verify(fresh_run, seen).ok

    def drop_the_end(payloads: Payloads) -> Payloads:
        return payloads[:-2]  # the last outer step and run.final

    Forger(fresh_run, run_id(fresh_run)).rewrite(drop_the_end)

    assert verify(fresh_run).ok, "a first-time verifier sees a consistent, unfinished run"
    returning = verify(fresh_run, seen)
    messages = " ".join(f.message for f in returning.results[1].failures)
    assert not returning.ok
    assert "shrank" in messages and "rolled back" in messages, returning.render()


def test_the_clusters_signed_hardware_class_cannot_be_rewritten_without_their_keys(
    fresh_run: Settings,
) -> None:
    """An operator without the clusters' keys names a class nobody has in the policy and in
    every cluster's enrolment: the clusters' proofs of possession no longer verify."""

    def claim_z9000_everywhere(genesis: dict[str, Any]) -> None:
        name_a_gpu_nobody_has(genesis)
        for keys in genesis["keys"]["clusters"]:
            keys["hardware"] = {**keys["hardware"], **Z9000}

    Forger(fresh_run, run_id(fresh_run)).rewrite(
        edit_payload("run.genesis", claim_z9000_everywhere), reattest=False
    )

    report = verify(fresh_run)
    failures = [f.message for f in report.results[10].failures]
    assert any(
        "keys.clusters[0]" in m and "proof of possession does not verify" in m for m in failures
    ), report.render()


def _forget_the_enrolled_hardware(genesis: dict[str, Any]) -> None:
    """The genesis as a version before enrolment v2 wrote it (re-enrolled without a class)."""
    for keys in genesis["keys"]["clusters"]:
        del keys["hardware"]


def test_a_run_recorded_before_enrolments_named_a_class_still_verifies_and_says_so(
    fresh_run: Settings,
) -> None:
    Forger(fresh_run, run_id(fresh_run)).rewrite(
        edit_payload("run.genesis", _forget_the_enrolled_hardware)
    )

    report = verify(fresh_run)
    assert report.ok, report.render()
    assert any("not recorded by this run's version" in n for n in report.results[10].notes)
    assert report.warnings == []  # trained on this machine: a re-execution here is inside


def test_verify_and_reproduce_warn_when_no_re_execution_here_can_be_in_the_class(
    fresh_run: Settings,
) -> None:
    """An old run (no signed class) that names a GPU nobody has verifies -- nothing holds it to
    more -- but verify and reproduce both say loudly that this machine is outside its class."""
    from veritrain.audit.reproduce import reproduce_step

    def old_run_on_z9000(genesis: dict[str, Any]) -> None:
        _forget_the_enrolled_hardware(genesis)
        name_a_gpu_nobody_has(genesis)

    Forger(fresh_run, run_id(fresh_run)).rewrite(edit_payload("run.genesis", old_run_on_z9000))

    report = verify(fresh_run)
    assert report.ok, report.render()
    (warning,) = report.to_json()["warnings"]
    assert "outside the run's hardware class" in warning and "gpu 'Z9000' there" in warning
    assert "nothing shows that anyone has it" in warning
    assert f"WARNING: {warning}" in report.render()

    with DirectSource(fresh_run) as source:
        comparison = reproduce_step(source, None, 0, cluster=0)
    assert comparison.mode == "tolerance"
    assert comparison.to_json()["warnings"] == [warning]
    assert f"WARNING: {warning}" in comparison.render()
