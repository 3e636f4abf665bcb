"""A recorded checkpoint as a Hugging Face model repository, end to end through the served API
(issue 14): ``snapshot_download`` fetches a revision into a folder that transformers loads with
no extra code, computing our logits; its greedy ``generate`` reproduces the generations the
step recorded; and the OpenSSF ``model_signing`` tool verifies the folder against the key the
genesis enrols."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest
import torch
import transformers
from e2e.recorded_runs import RUN_ID
from huggingface_hub import snapshot_download

from records import Genesis
from records.generations import Generations
from trainer.generate import model_from_state
from trainer.hf_repo import load_pretrained
from veritrain.settings import Settings
from veritrain.sources import DirectSource, read_verified
from web.settings import WebSettings

STEP = 2


@pytest.fixture(autouse=True)
def online_hub_client(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    import huggingface_hub.constants as hub

    monkeypatch.setattr(hub, "HF_HUB_OFFLINE", False)
    monkeypatch.setattr(hub, "HF_HUB_DISABLE_XET", True)
    monkeypatch.setenv("HF_HUB_DISABLE_TELEMETRY", "1")
    monkeypatch.setenv("HF_HOME", str(tmp_path / "hf-home"))


@pytest.fixture
def snapshot(
    recorded_run: Settings, serve_app: Callable[[WebSettings], str], tmp_path: Path
) -> Path:
    url = serve_app(recorded_run)
    folder = snapshot_download(
        repo_id=RUN_ID, revision=f"step-{STEP:06d}", endpoint=url, local_dir=tmp_path / "model"
    )
    return Path(folder)


def _recorded(settings: Settings) -> tuple[Genesis, Generations, str]:
    with DirectSource(settings) as source:
        bodies = source.entry_bodies(RUN_ID)
        genesis = Genesis.from_payload(json.loads(bodies[0])["payload"])
        step = json.loads(bodies[2 + STEP])["payload"]
        said = Generations.from_payload(
            json.loads(read_verified(source, step["generations"]["object"]))
        )
    return genesis, said, step["checkpoint"]["manifest_root"]


def test_transformers_loads_a_downloaded_checkpoint_and_computes_our_logits(snapshot: Path) -> None:
    names = {p.name for p in snapshot.iterdir() if p.is_file()}
    assert {
        "config.json",
        "generation_config.json",
        "model.safetensors.index.json",
        "tokenizer.json",
        "model.sig",
    } <= names

    theirs = transformers.AutoModelForCausalLM.from_pretrained(
        snapshot, torch_dtype=torch.float32
    ).eval()
    tokenizer = transformers.AutoTokenizer.from_pretrained(snapshot)
    config, state = load_pretrained(snapshot)
    ours = model_from_state(config, state)
    batch = torch.tensor([tokenizer.encode("def main():\n    return 0\n")])
    with torch.no_grad():
        difference = (theirs(batch).logits - ours(batch)).abs().max().item()
    assert difference <= 1e-5


def test_greedy_generate_in_transformers_reproduces_the_recorded_generations(
    recorded_run: Settings, snapshot: Path
) -> None:
    _, said, _ = _recorded(recorded_run)
    model = transformers.AutoModelForCausalLM.from_pretrained(
        snapshot, torch_dtype=torch.float32
    ).eval()
    tokenizer = transformers.AutoTokenizer.from_pretrained(snapshot)
    eos = transformers.GenerationConfig.from_pretrained(snapshot).eos_token_id
    for generation in said.generations:
        prompt = tokenizer.encode(generation.prompt)
        with torch.no_grad():
            out = model.generate(
                torch.tensor([prompt]),
                do_sample=False,
                max_new_tokens=said.max_new_tokens,
                eos_token_id=eos,
                pad_token_id=eos,
            )
        assert tuple(out[0, len(prompt) :].tolist()) == generation.token_ids, generation.prompt


def _continuation(row: list[int], prompt_length: int, recorded: tuple[int, ...], pad: int) -> bool:
    """True when a left-padded batch row continues its prompt with exactly the recorded
    tokens, then only padding (a row that ended early is padded to the batch's length)."""
    new = row[prompt_length:]
    return tuple(new[: len(recorded)]) == recorded and set(new[len(recorded) :]) <= {pad}


def test_padded_batch_generate_and_pipeline_reproduce_the_recorded_generations(
    recorded_run: Settings, snapshot: Path
) -> None:
    # Prompts of different lengths, left-padded in one batch: the padding token is a token the
    # model has a row for (the end-of-text id config.json names), not a 257th one.
    _, said, _ = _recorded(recorded_run)
    model = transformers.AutoModelForCausalLM.from_pretrained(
        snapshot, torch_dtype=torch.float32
    ).eval()
    tokenizer = transformers.AutoTokenizer.from_pretrained(snapshot, padding_side="left")
    assert len(tokenizer) == model.config.vocab_size
    assert tokenizer.pad_token_id == model.config.pad_token_id == model.config.eos_token_id
    prompts = [g.prompt for g in said.generations]
    assert len({len(tokenizer.encode(p)) for p in prompts}) > 1, "the batch needs padding"

    batch = tokenizer(prompts, return_tensors="pt", padding=True)
    with torch.no_grad():
        out = model.generate(**batch, do_sample=False, max_new_tokens=said.max_new_tokens)
    width = batch["input_ids"].shape[1]
    for generation, row in zip(said.generations, out.tolist(), strict=True):
        assert _continuation(row, width, generation.token_ids, tokenizer.pad_token_id), (
            generation.prompt
        )

    generator = transformers.pipeline(
        "text-generation", model=model, tokenizer=tokenizer, batch_size=4
    )
    answers = generator(
        prompts, do_sample=False, max_new_tokens=said.max_new_tokens, return_full_text=False
    )
    for generation, answer in zip(said.generations, answers, strict=True):
        assert answer[0]["generated_text"] == generation.text.rstrip("\x00"), generation.prompt


def test_model_signing_verifies_the_snapshot_against_the_genesis_key(
    recorded_run: Settings, snapshot: Path, tmp_path: Path
) -> None:
    genesis, _, _ = _recorded(recorded_run)
    public_key = tmp_path / "model-signing.pub"
    public_key.write_text(genesis.keys.model_signing)
    tool = shutil.which("model_signing", path=str(Path(sys.executable).parent))
    assert tool is not None

    # huggingface_hub keeps its download bookkeeping in <local_dir>/.cache: not part of the model.
    command = [
        tool,
        "verify",
        "key",
        "--public_key",
        str(public_key),
        "--signature",
        str(snapshot / "model.sig"),
        "--ignore-paths",
        str(snapshot / ".cache"),
        str(snapshot),
    ]
    verified = subprocess.run(command, capture_output=True, text=True, timeout=300)
    assert verified.returncode == 0, verified.stdout + verified.stderr
    assert "Verification succeeded" in verified.stdout + verified.stderr

    (snapshot / "config.json").write_text(
        (snapshot / "config.json").read_text().replace('"float32"', '"float16"')
    )
    tampered = subprocess.run(command, capture_output=True, text=True, timeout=300)
    assert tampered.returncode != 0
