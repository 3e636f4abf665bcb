"""`veritrain note verify`: check a C2SP signed note, checkpoint or tlog-proof receipt."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Annotated

import typer

app = typer.Typer(
    help="Verify C2SP signed notes, signed tree heads and receipts.", no_args_is_help=True
)


@app.callback()
def _group() -> None:
    """Verify C2SP signed notes, signed tree heads (checkpoints) and tlog-proof receipts."""


@app.command("verify")
def verify(
    file: Annotated[Path, typer.Argument(help="The note, checkpoint or receipt; '-' reads stdin.")],
    vkey: Annotated[
        list[str],
        typer.Option("--vkey", help="C2SP verifier key (name+keyid+base64); repeat for several."),
    ],
    entry: Annotated[
        Path | None,
        typer.Option(help="For a receipt: the logged entry body, to check its inclusion proof."),
    ] = None,
) -> None:
    """Exit 0 and print the verified text if a given key signed FILE; otherwise exit non-zero
    with one line saying what failed."""
    from ledger.errors import VerificationError
    from ledger.signed_text import verify_signed_text

    raw = sys.stdin.buffer.read() if str(file) == "-" else _read(file)
    try:
        data = raw.decode("utf-8")
    except UnicodeDecodeError:
        raise VerificationError(f"{file}: expected UTF-8 text, got undecodable bytes") from None
    result = verify_signed_text(data, vkey, entry_body=None if entry is None else _read(entry))
    typer.echo(result.text, nl=False)
    typer.echo(result.summary, err=True)


def _read(path: Path) -> bytes:
    try:
        return path.read_bytes()
    except OSError as exc:
        raise typer.BadParameter(f"cannot read {path}: {exc.strerror}") from None
