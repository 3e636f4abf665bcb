"""``veritrain demo``: the whole promise in one command, on the embedded defaults.

1. build the default corpus (Python standard-library sources, byte-level);
2. train the ``tiny`` preset with DiLoCoX, 2 clusters x 2 pipeline stages, recording every outer
   step in the SQLite ledger and the local object folder (signed, attested);
3. verify the run (``veritrain verify``) and re-execute one step bitwise (``veritrain reproduce``);
4. serve the audit page, unless ``--no-serve``.

Everything lands under the settings' data folder, so ``veritrain verify`` and
``veritrain serve`` run afterwards in the same directory need no flags.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from datetime import UTC, datetime

from rich.console import Console

from trainer.config import with_overrides
from trainer.presets import run_preset
from veritrain.audit.reproduce import Comparison, reproduce_step
from veritrain.audit.verify import Report, verify_run
from veritrain.audit.verify.seen_heads import SeenHeads
from veritrain.record.training import train_recorded
from veritrain.settings import Settings
from veritrain.sources import DirectSource

DEMO_PRESET = "tiny"
DEMO_METHOD = "dilocox"
"""The demo shows the full algorithm: one-step-delay overlap and low-rank quantised compression
(the ``tiny`` preset's int2 factors, trainer/presets.py)."""


@dataclass(frozen=True)
class DemoResult:
    run_id: str
    report: Report
    reproduction: Comparison

    @property
    def ok(self) -> bool:
        return self.report.ok and self.reproduction.ok


def run_demo(
    settings: Settings,
    *,
    console: Console | None = None,
    reproduce_step_number: int = 2,
    outer_steps: int | None = None,
    inner_steps: int | None = None,
) -> DemoResult:
    """``outer_steps`` / ``inner_steps`` (T and H): the preset's (6 x 20) where not given; a
    shorter run shows the same steps in less time."""
    console = console or Console()
    started = time.monotonic()
    run_id = "demo-" + datetime.now(UTC).strftime("%Y%m%d-%H%M%S")
    config = with_overrides(  # None keeps the preset's
        run_preset(DEMO_PRESET),
        run_id=run_id,
        method=DEMO_METHOD,
        outer_steps=outer_steps,
        inner_steps=inner_steps,
    )
    console.rule(f"[bold]veritrain demo[/] — run {run_id}")
    console.print(
        f"ledger {settings.database_url}\nobjects {settings.store_url}\n"
        f"model '{DEMO_PRESET}' ({config.model.parameter_count():,} "
        f"parameters), {config.clusters} clusters x "
        f"{config.stages} pipeline stages, {config.outer_steps} outer "
        f"steps of H={config.inner_steps}, method {config.method}"
    )

    cluster_keys = settings.data_dir / "cluster-keys"
    console.print(
        "keys: the coordinator's (log, statement) in "
        f"{settings.keys_path}; each cluster's own, as on its own host, in "
        + ", ".join(f"{cluster_keys / f'cluster-{j}'}" for j in range(config.clusters))
    )
    console.rule(
        "1-2. build the corpus and train (every outer step is recorded, signed and attested)"
    )
    train_recorded(settings, config, cluster_keys=cluster_keys)

    console.rule("3. verify the run from its ledger and objects")
    with console.status("verifying…"), DirectSource(settings) as source:
        report = verify_run(source, run_id, seen_heads=SeenHeads(settings.data_dir / "witness"))
    console.print(report.render())

    step = min(reproduce_step_number, config.outer_steps - 1)
    console.rule(f"4. re-execute outer step {step} and compare it bit for bit")
    with console.status(f"re-executing outer step {step}…"), DirectSource(settings) as source:
        reproduction = reproduce_step(source, run_id, step)
    console.print(reproduction.render())
    result = DemoResult(run_id=run_id, report=report, reproduction=reproduction)
    verdict = "[green]verified and reproduced[/]" if result.ok else "[red]FAILED[/]"
    console.rule(f"run {run_id}: {verdict} in {time.monotonic() - started:.0f} s")
    console.print(
        "Check it yourself in this directory:\n"
        f"  veritrain verify {run_id}\n"
        f"  veritrain reproduce {run_id} --step {step}\n"
        f"  veritrain serve            # the audit page"
    )
    return result
