"""The ``veritrain`` console entry point (DESIGN.md §7).

Command modules stay thin: they parse arguments and call one function. Heavy imports
(torch, the web app) happen inside the command functions so ``veritrain runs`` starts fast.
Errors from the packages become one clear line on stderr and a non-zero exit.
"""

from __future__ import annotations

import sys

import typer

from veritrain.cli import (
    bench,
    cluster_keys,
    db,
    demo,
    lighthouse,
    note,
    plan,
    reproduce,
    runs,
    serve,
    train,
    verify,
    witness,
)

app = typer.Typer(
    name="veritrain",
    help="Verifiable decentralized training: train, record, serve and audit DiLoCoX runs.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)
app.add_typer(db.app, name="db")
app.add_typer(note.app, name="note")
app.add_typer(bench.app, name="bench")
app.add_typer(witness.app, name="witness")
app.command("demo")(demo.demo)
app.command("train")(train.train)
app.command("lighthouse")(lighthouse.lighthouse)
app.command("serve")(serve.serve)
app.command("runs")(runs.runs)
app.command("verify")(verify.verify)
app.command("cluster-keys")(cluster_keys.cluster_keys)
app.command("reproduce")(reproduce.reproduce)
app.command("plan")(plan.plan)


def _known_errors() -> tuple[type[BaseException], ...]:
    from attestation.errors import AttestationError
    from ledger.errors import LedgerError
    from records.errors import RecordError
    from storage.errors import StorageError
    from trainer.errors import TrainerError
    from veritrain.errors import VeritrainError

    return (AttestationError, LedgerError, RecordError, StorageError, TrainerError, VeritrainError)


def main() -> None:
    try:
        app()
    except _known_errors() as exc:
        print(f"veritrain: error: {exc}", file=sys.stderr)
        sys.exit(2)
    except KeyboardInterrupt:
        print("veritrain: interrupted", file=sys.stderr)
        sys.exit(130)
