"""`veritrain witness`: run a C2SP tlog-witness, or push a run's tree head to witnesses.

veritrain witness keygen NAME --out FILE     create a witness key; print its vkey (type 0x04)
veritrain witness serve --key FILE --db URL --log VKEY ... [--logs-file FILE]
veritrain witness push [RUN_ID]              submit the newest head to VERITRAIN_WITNESSES
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

app = typer.Typer(
    help="Run a C2SP tlog-witness, or push a run's signed tree head to witnesses.",
    no_args_is_help=True,
)


@app.callback()
def _group() -> None:
    """Run a C2SP tlog-witness (keygen, serve), or push a run's tree head to witnesses."""


@app.command("keygen")
def keygen(
    name: Annotated[
        str, typer.Argument(help="The witness's key name, e.g. witness.example.org/w1.")
    ],
    out: Annotated[
        Path,
        typer.Option("--out", help="Private key file to create (mode 0600; never overwritten)."),
    ],
) -> None:
    """Create a witness key (Ed25519, C2SP cosignature/v1) and print only its verifier key."""
    from attestation.keys import COSIGNATURE_V1_ALGORITHM, SigningKey

    key = SigningKey.generate(name, signature_type=COSIGNATURE_V1_ALGORITHM)
    try:
        key.save(out)
    except FileExistsError:
        raise typer.BadParameter(
            f"{out} already exists; keys are never replaced", param_hint="--out"
        ) from None
    typer.echo(key.public.vkey)


@app.command("serve")
def serve(
    key: Annotated[
        Path, typer.Option("--key", help="The witness's private key file (from `witness keygen`).")
    ],
    db: Annotated[
        str,
        typer.Option(
            "--db", help="Database URL of the witness's state (sqlite:///... or postgresql://...)."
        ),
    ],
    log: Annotated[
        list[str] | None,
        typer.Option(
            "--log",
            help="A log's C2SP verifier key; its origin is the key's name. Repeat for several.",
        ),
    ] = None,
    logs_file: Annotated[
        Path | None,
        typer.Option(
            "--logs-file",
            help="More log keys, one per line ('#' comments); re-read when it changes.",
        ),
    ] = None,
    host: Annotated[str, typer.Option(help="Interface to listen on.")] = "127.0.0.1",
    port: Annotated[int, typer.Option(min=1, max=65535, help="TCP port.")] = 7380,
) -> None:
    """Serve POST /add-checkpoint (C2SP tlog-witness) for the given logs, keeping what was
    cosigned in --db (its schema is created or upgraded at start)."""
    from sqlalchemy.exc import ArgumentError, OperationalError

    from attestation.keys import COSIGNATURE_V1_ALGORITHM, SigningKey
    from ledger.db import display_url, upgrade
    from ledger.witness import TrustedLogs
    from web.server import base_url
    from web.witness_app import WitnessSettings, serve_witness

    try:
        signing_key = SigningKey.load(key, signature_type=COSIGNATURE_V1_ALGORITHM)
    except OSError as exc:
        raise typer.BadParameter(f"cannot read {key}: {exc.strerror}", param_hint="--key") from None
    logs = TrustedLogs(log or (), logs_file=logs_file)
    if db.split(":", 1)[0] not in ("sqlite", "postgresql", "postgresql+psycopg", "postgres"):
        raise typer.BadParameter(
            f"expected a sqlite:/// or postgresql:// URL, got {db!r}", param_hint="--db"
        )
    try:
        upgrade(db)
    except (ArgumentError, OperationalError) as exc:
        message = str(exc.orig) if isinstance(exc, OperationalError) else str(exc)
        raise typer.BadParameter(
            f"cannot open {display_url(db) if '://' in db else db!r}: {message}", param_hint="--db"
        ) from None
    typer.echo(
        f"veritrain: witness {signing_key.name} at {base_url(host, port)}/add-checkpoint for "
        f"{len(logs.origins())} logs, state in {display_url(db)} (Ctrl+C to stop)",
        err=True,
    )
    serve_witness(
        WitnessSettings(key=signing_key, database_url=db, logs=logs), host=host, port=port
    )


@app.command("push")
def push(
    run_id: Annotated[
        str | None, typer.Argument(help="The run (default: the most recent one).")
    ] = None,
) -> None:
    """Submit the run's newest signed tree head to every witness in VERITRAIN_WITNESSES and
    store the cosignatures that verify. Exit 1 unless every witness cosigned it."""
    from ledger.db import create_engine, display_url, sqlite_file_missing
    from ledger.errors import RunNotFoundError, SchemaMissingError
    from ledger.service import Ledger
    from veritrain.errors import SettingsError
    from veritrain.settings import load_settings
    from veritrain.witnesses.push import push_latest

    settings = load_settings()
    if not settings.witnesses:
        raise SettingsError("VERITRAIN_WITNESSES: expected at least one VKEY@URL, got none")
    if sqlite_file_missing(settings.database_url):
        raise SchemaMissingError(f"no ledger database at {display_url(settings.database_url)}")
    engine = create_engine(settings.database_url)
    try:
        ledger = Ledger(engine)
        if run_id is None:
            runs = ledger.list_runs()
            if not runs:
                raise RunNotFoundError("the ledger has no runs yet")
            run_id = runs[0].run_id
        result = push_latest(ledger, run_id, settings.witnesses)
    finally:
        engine.dispose()
    for outcome in result.outcomes:
        typer.echo(f"{outcome.witness}  {outcome.status:<11}  {outcome.detail}")
    typer.echo(
        f"run {run_id}: size {result.size} cosigned by {len(result.cosigners)} of "
        f"{len(result.outcomes)} witnesses",
        err=True,
    )
    raise typer.Exit(code=0 if result.ok else 1)
