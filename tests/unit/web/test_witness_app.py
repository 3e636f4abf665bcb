"""The witness's HTTP interface, status by status as C2SP tlog-witness fixes them, and
malformed requests of every kind answered 4xx -- never 500."""

from __future__ import annotations

import base64
import hashlib
import random
from collections.abc import Iterator
from pathlib import Path

import pytest
from fastapi.testclient import TestClient
from unit.ledger.witness_helpers import SmallLog, add_checkpoint_body, small_log

from attestation.keys import COSIGNATURE_V1_ALGORITHM, SigningKey
from ledger.cosignature import cosignatures_in
from ledger.db import upgrade
from ledger.merkle import EMPTY_ROOT
from ledger.note import open_note
from ledger.tlog_checkpoint import Checkpoint, parse_checkpoint, sign_checkpoint
from ledger.witness import TrustedLogs
from web.witness_app import WitnessSettings, create_witness_app


@pytest.fixture
def log(tmp_path: Path) -> SmallLog:
    url = f"sqlite:///{tmp_path / 'log.db'}"
    upgrade(url)
    return small_log(url, entries=6)


@pytest.fixture
def witness_key() -> SigningKey:
    return SigningKey.generate("witness.test/w1", signature_type=COSIGNATURE_V1_ALGORITHM)


@pytest.fixture
def client(tmp_path: Path, log: SmallLog, witness_key: SigningKey) -> Iterator[TestClient]:
    url = f"sqlite:///{tmp_path / 'witness.db'}"
    upgrade(url)
    settings = WitnessSettings(key=witness_key, database_url=url, logs=TrustedLogs([log.vkey]))
    with TestClient(create_witness_app(settings), raise_server_exceptions=False) as test_client:
        yield test_client


def post(client: TestClient, body: bytes) -> object:
    return client.post("/add-checkpoint", content=body)


def resign(note: str, key: SigningKey, **changes: object) -> str:
    """The checkpoint of ``note`` with ``changes`` (size, root_hash), signed by ``key``."""
    text, _ = open_note(note)
    checkpoint = parse_checkpoint(text)
    fields = {
        "origin": checkpoint.origin,
        "size": checkpoint.size,
        "root_hash": checkpoint.root_hash,
        **changes,
    }
    return sign_checkpoint(Checkpoint(**fields), key)  # type: ignore[arg-type]


def test_200_returns_timestamped_cosignature_lines_that_verify(
    client: TestClient, log: SmallLog, witness_key: SigningKey
) -> None:
    response = client.post("/add-checkpoint", content=add_checkpoint_body(0, [], log.note()))

    assert response.status_code == 200
    assert response.headers["content-type"].startswith("text/plain")
    lines = response.text
    assert lines.startswith("— witness.test/w1 ") and lines.endswith("\n")
    [found] = cosignatures_in(log.note() + lines, [witness_key.public])
    assert found.cosignature.timestamp > 1_700_000_000  # the witness's clock, never 0


def test_404_for_an_origin_the_witness_does_not_know(client: TestClient, tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'other.db'}"
    upgrade(url)
    other = small_log(url, run_id="someone-else", entries=2)

    response = client.post("/add-checkpoint", content=add_checkpoint_body(0, [], other.note()))

    assert response.status_code == 404
    assert "someone-else" in response.text


def test_403_when_no_trusted_signature_verifies(client: TestClient, log: SmallLog) -> None:
    # Signed under the log's name by another key (a rewritten log's new key): ignored, so
    # no trusted signature is present.
    impostor = SigningKey.generate(log.origin)
    response = client.post(
        "/add-checkpoint", content=add_checkpoint_body(0, [], resign(log.note(), impostor))
    )
    assert response.status_code == 403
    assert "no signature from a known key" in response.text

    # The trusted key's name and id, but a signature that does not verify.
    note = log.note()
    text, [signature] = open_note(note)
    blob = bytearray(signature.key_id + signature.signature)
    blob[-1] ^= 1
    broken = f"{text}\n— {signature.name} {base64.b64encode(bytes(blob)).decode()}\n"
    response = client.post("/add-checkpoint", content=add_checkpoint_body(0, [], broken))
    assert response.status_code == 403
    assert "does not verify" in response.text


def test_400_when_the_old_size_is_past_the_checkpoint(client: TestClient, log: SmallLog) -> None:
    response = client.post("/add-checkpoint", content=add_checkpoint_body(7, [], log.note()))
    assert response.status_code == 400
    assert "expected old size <= checkpoint size 6, got 7" in response.text


def test_409_says_the_cosigned_size_as_text_x_tlog_size(client: TestClient, log: SmallLog) -> None:
    assert (
        client.post("/add-checkpoint", content=add_checkpoint_body(0, [], log.note(4))).status_code
        == 200
    )

    stale = client.post("/add-checkpoint", content=add_checkpoint_body(0, [], log.note()))
    assert stale.status_code == 409
    assert stale.headers["content-type"] == "text/x.tlog.size"
    assert stale.text == "4\n"
    # A client that believes the witness is further along is told the same.
    ahead = client.post(
        "/add-checkpoint", content=add_checkpoint_body(5, log.proof(5, 6), log.note())
    )
    assert (ahead.status_code, ahead.text) == (409, "4\n")
    # With the size it was told, the client succeeds.
    assert (
        client.post(
            "/add-checkpoint", content=add_checkpoint_body(4, log.proof(4, 6), log.note())
        ).status_code
        == 200
    )


def test_422_for_a_proof_that_does_not_verify(client: TestClient, log: SmallLog) -> None:
    assert (
        client.post("/add-checkpoint", content=add_checkpoint_body(0, [], log.note(3))).status_code
        == 200
    )
    proof = log.proof(3, 6)
    proof[0] = hashlib.sha256(b"tampered").digest()

    response = client.post("/add-checkpoint", content=add_checkpoint_body(3, proof, log.note()))

    assert response.status_code == 422
    assert "not consistent" in response.text
    # Nothing moved: the valid proof still applies from size 3.
    assert (
        client.post(
            "/add-checkpoint", content=add_checkpoint_body(3, log.proof(3, 6), log.note())
        ).status_code
        == 200
    )


def test_422_for_the_same_size_with_another_root(client: TestClient, log: SmallLog) -> None:
    # tlog-witness (since C2SP #280): "If the old size matches the checkpoint size, the
    # witness MUST check that the root hashes are also identical. If they don't match, the
    # witness MUST respond with a 422 Unprocessable Entity".
    assert (
        client.post("/add-checkpoint", content=add_checkpoint_body(0, [], log.note())).status_code
        == 200
    )
    fork = resign(log.note(), log.keys(log.origin), root_hash=hashlib.sha256(b"fork").digest())

    response = client.post("/add-checkpoint", content=add_checkpoint_body(6, [], fork))

    assert response.status_code == 422
    assert "equal roots" in response.text
    # The same head again is cosigned again (a fresh timestamp on the same tree).
    assert (
        client.post("/add-checkpoint", content=add_checkpoint_body(6, [], log.note())).status_code
        == 200
    )


def test_422_for_a_proof_from_size_0_and_for_a_size_0_tree_with_another_root(
    client: TestClient, log: SmallLog
) -> None:
    proof = log.proof(3, 6)
    response = client.post("/add-checkpoint", content=add_checkpoint_body(0, proof, log.note()))
    assert response.status_code == 422
    assert "no consistency proof from old size 0" in response.text

    key = log.keys(log.origin)
    not_empty = sign_checkpoint(Checkpoint(origin=log.origin, size=0, root_hash=b"\x01" * 32), key)
    assert (
        client.post("/add-checkpoint", content=add_checkpoint_body(0, [], not_empty)).status_code
        == 422
    )
    empty = sign_checkpoint(Checkpoint(origin=log.origin, size=0, root_hash=EMPTY_ROOT), key)
    assert (
        client.post("/add-checkpoint", content=add_checkpoint_body(0, [], empty)).status_code == 200
    )


MALFORMED = {
    "empty": b"",
    "no blank line": b"old 0\n",
    "leading zero": b"old 00\n\nx\n",
    "negative": b"old -1\n\nx\n",
    "not old": b"new 0\n\nx\n",
    "huge old": b"old " + b"9" * 5000 + b"\n\nx\n",
    "above 2^63": b"old 9223372036854775808\n\nx\n",
    "proof not base64": b"old 1\n!!!!\n\nx\n",
    "proof not 32 bytes": b"old 1\n" + base64.b64encode(b"short") + b"\n\nx\n",
    "64 proof lines": b"old 1\n" + (base64.b64encode(b"\x00" * 32) + b"\n") * 64 + b"\n",
    "not UTF-8": b"old 0\n\n\xff\xfe\n",
    "no checkpoint": b"old 0\n\n",
    "checkpoint without signatures": b"old 0\n\norigin\n1\n"
    + base64.b64encode(b"\x00" * 32)
    + b"\n",
    "control character": b"old 0\n\norigin\x01\n1\nAA==\n\n\xe2\x80\x94 k AAAAAAAA\n",
}


@pytest.mark.parametrize("body", MALFORMED.values(), ids=MALFORMED.keys())
def test_malformed_bodies_are_400(client: TestClient, body: bytes) -> None:
    assert client.post("/add-checkpoint", content=body).status_code == 400


def test_a_checkpoint_with_an_absurd_size_is_400(client: TestClient, log: SmallLog) -> None:
    text, signatures = open_note(log.note())
    lines = text.split("\n")
    for size in ("9" * 30, "18446744073709551615"):
        forged = (
            "\n".join([lines[0], size, *lines[2:]]) + "\n" + "".join(s.line() for s in signatures)
        )
        assert (
            client.post("/add-checkpoint", content=add_checkpoint_body(0, [], forged)).status_code
            == 400
        )


def test_mangled_requests_are_never_a_server_error(client: TestClient, log: SmallLog) -> None:
    valid = add_checkpoint_body(3, log.proof(3, 6), log.note())
    rng = random.Random(7)
    for _ in range(150):
        body = bytearray(valid)
        for _ in range(rng.randint(1, 4)):
            operation = rng.choice(("flip", "cut", "insert"))
            at = rng.randrange(len(body))
            if operation == "flip":
                body[at] ^= 1 << rng.randrange(8)
            elif operation == "cut":
                del body[at : at + rng.randint(1, 12)]
            else:
                body[at:at] = rng.choice([b"\n", b" ", b"\x00", b"\xe2\x80\x94 ", b"0", b"="])
        response = client.post("/add-checkpoint", content=bytes(body))
        assert response.status_code in (200, 400, 403, 404, 409, 422), (
            response.status_code,
            bytes(body),
        )


def test_a_body_over_the_limit_is_413(client: TestClient) -> None:
    assert client.post("/add-checkpoint", content=b"old 0\n" + b"A" * 300_000).status_code == 413


def test_only_post_is_allowed_on_add_checkpoint(client: TestClient) -> None:
    assert client.get("/add-checkpoint").status_code == 405


def test_healthz_names_the_witness_key(client: TestClient, witness_key: SigningKey) -> None:
    assert client.get("/healthz").json() == {"status": "ok", "witness": witness_key.public.vkey}


def test_the_monitoring_view_serves_the_latest_cosigned_checkpoint(
    client: TestClient, log: SmallLog, witness_key: SigningKey
) -> None:
    path = f"/{hashlib.sha256(log.origin.encode()).hexdigest()}/checkpoint"
    assert client.get(path).status_code == 404
    client.post("/add-checkpoint", content=add_checkpoint_body(0, [], log.note()))

    response = client.get(path)

    assert response.status_code == 200
    assert len(cosignatures_in(response.text, [witness_key.public])) == 1
    assert response.text.startswith(open_note(log.note())[0])
    assert client.get("/NOT-A-HASH/checkpoint").status_code == 404
