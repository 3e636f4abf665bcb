"""``check_quorum``: K distinct given witnesses must have cosigned a checkpoint of the log
that contains the tree the verifier checked."""

from __future__ import annotations

import base64
import shutil
from pathlib import Path

import pytest
from unit.ledger.witness_helpers import SmallLog, small_log

from attestation.keys import COSIGNATURE_V1_ALGORITHM, SigningKey
from ledger.cosignature import cosign
from ledger.db import upgrade
from ledger.note import open_note
from veritrain.audit.verify.witness_quorum import check_quorum


@pytest.fixture(scope="module")
def template(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("quorum") / "template.db"
    upgrade(f"sqlite:///{path}")
    return path


@pytest.fixture
def log(template: Path, tmp_path: Path) -> SmallLog:
    shutil.copyfile(template, tmp_path / "log.db")
    return small_log(f"sqlite:///{tmp_path / 'log.db'}", entries=6)


W1 = SigningKey.generate("witness.test/w1", signature_type=COSIGNATURE_V1_ALGORITHM)
W2 = SigningKey.generate("witness.test/w2", signature_type=COSIGNATURE_V1_ALGORITHM)
W3 = SigningKey.generate("witness.test/w3", signature_type=COSIGNATURE_V1_ALGORITHM)
WITNESSES = [W1.public.vkey, W2.public.vkey, W3.public.vkey]


def cosigned(note: str, *keys: SigningKey) -> str:
    text, _ = open_note(note)
    return note + "".join(cosign(text, key, 1_800_000_000 + i).line() for i, key in enumerate(keys))


def check(log: SmallLog, note: str, quorum: int, size: int = 6, witnesses: list[str] = WITNESSES):
    root = log.ledger.tree_head_at(log.run_id, size).root_hash
    return check_quorum(note, log.vkey, witnesses, quorum, size, root, log.proof)


def test_two_of_three_witnesses_on_the_verified_head_pass(log: SmallLog) -> None:
    result = check(log, cosigned(log.note(), W1, W2), quorum=2)

    assert result.ok, result.detail
    assert result.cosigners == ("witness.test/w1", "witness.test/w2")
    assert result.checkpoint_size == 6
    assert (
        result.detail
        == "2 of 3 witnesses cosigned size 6 (quorum 2): witness.test/w1, witness.test/w2"
    )


def test_a_larger_cosigned_checkpoint_consistent_with_the_verified_tree_passes(
    log: SmallLog,
) -> None:
    log.grow(4)
    assert check(log, cosigned(log.note(), W1, W3), quorum=2, size=4).ok


def test_too_few_cosigners_fail_and_say_who_cosigned(log: SmallLog) -> None:
    result = check(log, cosigned(log.note(), W2), quorum=2)

    assert not result.ok
    assert result.cosigners == ("witness.test/w2",)
    assert (
        result.detail == "expected cosignatures from 2 of the 3 given "
        "witnesses on size 6, got 1 (witness.test/w2)"
    )
    # Cosignatures from witnesses the verifier did not name do not count.
    other = SigningKey.generate("witness.test/other", signature_type=COSIGNATURE_V1_ALGORITHM)
    assert check(log, cosigned(log.note(), other, W2), quorum=2).cosigners == ("witness.test/w2",)


def test_one_key_under_two_names_is_one_witness(log: SmallLog) -> None:
    alias = SigningKey(
        name="witness.test/alias", seed=W1.seed, signature_type=COSIGNATURE_V1_ALGORITHM
    )
    note = cosigned(log.note(), W1, alias)

    result = check(log, note, quorum=2, witnesses=[W1.public.vkey, alias.public.vkey])

    assert not result.ok and len(result.cosigners) == 1


def test_a_checkpoint_smaller_than_the_verified_tree_fails(log: SmallLog) -> None:
    result = check(log, cosigned(log.note(4), W1, W2), quorum=2, size=6)
    assert not result.ok
    assert result.detail == "the cosigned checkpoint has size 4, smaller than the verified 6"


def test_a_rewritten_log_fails(log: SmallLog, template: Path, tmp_path: Path) -> None:
    # The operator rewrites the run: same run id, another history, a new log key. The
    # witnesses cosigned only the original history.
    shutil.copyfile(template, tmp_path / "rewritten.db")
    rewritten = small_log(f"sqlite:///{tmp_path / 'rewritten.db'}", entries=6)
    assert rewritten.origin == log.origin and rewritten.vkey != log.vkey
    honest_cosigned = cosigned(log.note(), W1, W2)
    root = rewritten.ledger.latest_tree_head(rewritten.run_id).root_hash

    # 1. What the rewritten server serves: its own head, which no witness cosigned.
    served = check_quorum(rewritten.note(), rewritten.vkey, WITNESSES, 2, 6, root, rewritten.proof)
    assert not served.ok and served.cosigners == ()
    # 2. The witnessed head, checked against the rewritten log's key: not the same log.
    other_key = check_quorum(
        honest_cosigned, rewritten.vkey, WITNESSES, 2, 6, root, rewritten.proof
    )
    assert not other_key.ok and "not signed by the log key" in other_key.detail
    # 3. The rewrite signed with the original key (the verifier pins that key): the tree it
    # verified is not the tree the witnesses cosigned.
    same_key = check_quorum(honest_cosigned, log.vkey, WITNESSES, 2, 6, root, log.proof)
    assert not same_key.ok and "does not extend the verified tree" in same_key.detail


def test_a_larger_cosigned_tree_from_another_history_fails(
    log: SmallLog, template: Path, tmp_path: Path
) -> None:
    # The verifier checked a 4-entry tree; the witnesses cosigned a 6-entry tree whose first
    # 4 entries are not those: the consistency proof cannot lead to both roots.
    shutil.copyfile(template, tmp_path / "other.db")
    other = small_log(f"sqlite:///{tmp_path / 'other.db'}", entries=4)
    verified_root = other.ledger.latest_tree_head(other.run_id).root_hash

    result = check_quorum(
        cosigned(log.note(), W1, W2), log.vkey, WITNESSES, 2, 4, verified_root, log.proof
    )

    assert not result.ok and "does not extend the verified tree" in result.detail
    assert result.cosigners == ("witness.test/w1", "witness.test/w2")


def test_a_corrupt_cosignature_by_a_given_witness_fails_the_note(log: SmallLog) -> None:
    note = cosigned(log.note(), W1, W2)
    *rest, last, _ = note.split("\n")
    name, blob = last.rsplit(" ", 1)
    raw = bytearray(base64.b64decode(blob))
    raw[-1] ^= 1
    broken = "\n".join([*rest, f"{name} {base64.b64encode(bytes(raw)).decode()}", ""])

    result = check(log, broken, quorum=1)

    assert not result.ok
    assert result.failures and result.failures[0].startswith("witness.test/w2: ")
    assert result.cosigners == ("witness.test/w1",)


def test_nonsense_arguments_raise(log: SmallLog) -> None:
    with pytest.raises(ValueError, match="quorum: expected at least 1, got 0"):
        check(log, log.note(), quorum=0)
    with pytest.raises(ValueError, match="bad witness key"):
        check(log, log.note(), quorum=1, witnesses=[log.vkey])
