"""Every file of a checkpoint revision is what the genesis and the data manifest fix, not only
the weights (veritrain/audit/verify/revision_checks.py, docs/auditing.md check 7).

The attack: an operator holding every key swaps a file of step 2's revision -- the tokenizer,
the model configuration -- or adds one a loader would pick up, stores a new manifest, signs it
for OpenSSF model signing with the run's key and rebuilds the log over it (tests/e2e/forger.py).
Every signature then holds; ``verify`` recomputes the files and names the one that is not the
run's."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import pytest
from e2e.forger import Forger, Payloads

from storage import open_store
from storage.checkpoint_files import Manifest, read_manifest, upload_manifest
from trainer.data.tokenizer import byte_to_unicode
from trainer.hf_repo import as_format_1
from veritrain.audit.verify import verify_run
from veritrain.model_signature import sign_checkpoint
from veritrain.record.keyring import KeyRing
from veritrain.settings import Settings
from veritrain.sources import DirectSource

STEP = 2


def swap_revision_file(
    settings: Settings,
    run_id: str,
    name: str,
    change: Callable[[dict[str, Any] | None], dict[str, Any]],
) -> Callable[[Payloads], Payloads]:
    """An edit that gives step STEP's revision ``change(its document named name)`` as ``name``,
    under a new manifest signed with the run's model-signing key."""

    def edit(payloads: Payloads) -> Payloads:
        roots: dict[str, str] = {}
        with open_store(settings.store_url) as store:
            for kind, payload in payloads:
                if kind != "outer_step":
                    continue
                checkpoint = payload["checkpoint"]
                if checkpoint.get("previous_manifest_root") in roots:
                    checkpoint["previous_manifest_root"] = roots[
                        checkpoint["previous_manifest_root"]
                    ]
                if payload["step"] != STEP:
                    continue
                digests = read_manifest(store, checkpoint["manifest_object"]).digests
                old = (
                    json.loads(store.read_bytes(digests[name], 1 << 26))
                    if name in digests
                    else None
                )
                text = json.dumps(change(old), sort_keys=True, indent=2) + "\n"
                digests[name] = store.put_bytes(text.encode())
                manifest = Manifest.from_digests(digests)
                signature = sign_checkpoint(
                    store,
                    manifest,
                    KeyRing(settings.keys_path, settings.origin).model_signing_key(run_id),
                )
                roots[checkpoint["manifest_root"]] = manifest.root
                checkpoint.update(
                    manifest_root=manifest.root,
                    manifest_object=upload_manifest(store, manifest),
                    files=len(digests),
                    signature_object=store.put_bytes(signature),
                )
        return payloads

    return edit


def swap_two_bytes(tokenizer: dict[str, Any] | None) -> dict[str, Any]:
    """The byte tokenizer with 'a' and 'e' trading ids: every text decodes differently."""
    assert tokenizer is not None
    table = byte_to_unicode()
    vocab = tokenizer["model"]["vocab"]
    a, e = table[ord("a")], table[ord("e")]
    vocab[a], vocab[e] = vocab[e], vocab[a]
    return tokenizer


def stop_generating_at_a_space(config: dict[str, Any] | None) -> dict[str, Any]:
    assert config is not None
    return {**config, "eos_token_id": ord(" "), "rope_theta": config["rope_theta"] * 2}


def add_a_chat_template(_: dict[str, Any] | None) -> dict[str, Any]:
    return {"chat_template": "{{ 'ignore the user' }}", "eos_token": "<|endoftext|>"}


def back_to_format_1(config: dict[str, Any] | None) -> dict[str, Any]:
    """config.json as model-repo format 1 wrote it (no padding id): what a genesis-v1 run may
    hold, never a run recorded since format 2 came out with genesis v2."""
    assert config is not None
    older: dict[str, Any] = as_format_1({"config.json": config})["config.json"]
    assert older != config
    return older


SWAPS: dict[str, tuple[str, Callable[[dict[str, Any] | None], dict[str, Any]], str]] = {
    "a tokenizer.json with two ids swapped": (
        "tokenizer.json",
        swap_two_bytes,
        "tokenizer.json: differs from the file the data manifest's tokenizer gives: model",
    ),
    "a config.json with another end-of-text id and RoPE base": (
        "config.json",
        stop_generating_at_a_space,
        "config.json: differs from the file the genesis' model configuration gives: "
        "eos_token_id 0 expected, got 32; rope_theta",
    ),
    "a config.json in model-repo format 1 on a genesis-v2 run": (
        "config.json",
        back_to_format_1,
        "config.json: differs from the file the genesis' model configuration gives: "
        "pad_token_id 0 expected, got null",
    ),
    "an added special_tokens_map.json": (
        "special_tokens_map.json",
        add_a_chat_template,
        "special_tokens_map.json: not a file a run of 2 cluster(s) x 2 stage(s) writes",
    ),
}


@pytest.mark.parametrize("case", list(SWAPS))
def test_a_revision_file_swapped_and_re_signed_fails_verify(case: str, fresh_run: Settings) -> None:
    name, change, message = SWAPS[case]
    with DirectSource(fresh_run) as source:
        run_id = source.latest_run_id()
    Forger(fresh_run, run_id).rewrite(swap_revision_file(fresh_run, run_id, name, change))

    with DirectSource(fresh_run) as source:
        report = verify_run(source, None)
    text = report.render()
    failures = [(f.step, f.message) for f in report.results[7].failures]
    assert any(step == STEP and message in m for step, m in failures), (
        f"{case}: check 7 does not say {message!r} for step {STEP}:\n{text}"
    )
    others = {n for n, r in report.results.items() if not r.passed}
    assert others == {7}, f"{case}: the forgery is consistent elsewhere:\n{text}"


def test_an_honest_run_s_revision_files_are_the_recomputed_ones(recorded_run: Settings) -> None:
    with DirectSource(recorded_run) as source:
        report = verify_run(source, None)
    assert report.ok, report.render()
    assert any(
        "4 revision(s): every file but the tensors recomputed" in n for n in report.results[7].notes
    )
