"""Judging what a re-run cluster sent: the payload whose digest it signed, against the payload
its re-execution sends (docs/auditing.md, "Reproduce").

The per-inner-step commitments are the cluster's claims about its training; the payload is what
the run applied. A cluster can sign the commitments of an honest shadow run and send something
else, so the payload is judged on its own, in every mode:

* ``bitwise``: its digest equals the re-executed payload's;
* ``tolerance``: the recorded object (read from the store, verified against the signed digest)
  and the re-executed payload are both decoded to the pseudo-gradient D they carry, with the
  round's shared bases from the state before the step (trainer/outer/replay.py), and every
  tensor must satisfy ‖D' − D‖ / ‖D‖ <= the policy's parameter distance -- the payload's error
  against its own size, the measure of veritrain/audit/distance.py (across precisions a stage's
  tensors at once, within the cross-precision bound).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import torch

from records import OuterStep
from storage.errors import StorageError
from trainer.api import Reexecution
from trainer.checkpoint_layout import CheckpointFiles, outer_file, saved_payload
from trainer.config import TrainConfig
from trainer.outer.algorithm import payload_digest
from trainer.outer.errors import OuterStateError, PayloadError
from trainer.outer.replay import RecordedRound, decoded_payloads
from trainer.recorder import AppliedRound
from veritrain.audit.comparison import Comparison
from veritrain.audit.distance import global_distance, largest, tensor_distances
from veritrain.audit.modes import ModeChoice
from veritrain.errors import ReproduceError, VeritrainError
from veritrain.sources import RunSource, read_verified

PAYLOAD_LIMIT = 1 << 40
"""A payload is read whole: what one cluster sent for one stage shard."""

Key = tuple[int, int]
"""(cluster, stage)."""


def compare_contribution_digests(
    comparison: Comparison, recorded: OuterStep, result: Reexecution, cluster: int | None
) -> set[Key]:
    """Under bitwise: every re-run (cluster, stage)'s payload digest equals the signed one.
    Returns the (cluster, stage)s that differ."""
    expected = _signed_payloads(recorded, cluster)
    actual = result.contribution_digests
    disputed = set()
    for key in sorted(expected):
        label = f"contribution of cluster {key[0]} stage {key[1]}: {expected[key][:16]}…"
        if actual.get(key) == expected[key]:
            comparison.matched.append(label)
        else:
            comparison.mismatched.append(f"{label} re-executed as {str(actual.get(key))[:16]}…")
            disputed.add(key)
    return disputed


def compare_payloads(
    comparison: Comparison,
    source: RunSource,
    config: TrainConfig,
    recorded: OuterStep,
    result: Reexecution,
    before: CheckpointFiles | None,
    choice: ModeChoice,
    cluster: int | None,
    previous: OuterStep | None = None,
    fetched: Mapping[str, bytes] | None = None,
) -> set[Key]:
    """Under tolerance: every re-run (cluster, stage)'s recorded payload -- the object whose
    digest its cluster signed, read from the store and verified against that digest --
    against the payload the re-execution sent, both decoded to the pseudo-gradient they carry
    (trainer/outer/replay.py), tensor by tensor: ‖D' − D‖ / ‖D‖ <= bound, the payload's error
    against its own size (across precisions a stage's tensors at once). The commitments are
    the cluster's claims about its inner steps; this judges what it actually sent. Returns
    the (cluster, stage)s that differ. ``previous``: the step before, whose round the short
    overlap applies during this one -- the bases this step's payloads are encoded on follow
    from that exchange; ``fetched``: payloads of that round the caller already read from the
    store, by digest (verified)."""
    expected = _signed_payloads(recorded, cluster)
    disputed: set[Key] = set()
    missing = sorted(k for k in expected if k not in result.payloads)
    for key in missing:
        comparison.mismatched.append(
            f"contribution of cluster {key[0]} stage {key[1]}: the re-execution sent no payload"
        )
        disputed.add(key)
    keys = [k for k in sorted(expected) if k not in missing]
    if not keys:
        return disputed
    states = _outer_states(before, config) if before is not None else None
    try:
        in_flight = round_in_flight(source, config, recorded, previous, before, fetched or {})
        signed = decoded_payloads(
            config,
            states,
            recorded.step,
            {k: read_verified(source, expected[k], PAYLOAD_LIMIT) for k in keys},
            in_flight,
        )
        again = decoded_payloads(
            config, states, recorded.step, {k: result.payloads[k] for k in keys}, in_flight
        )
    except (PayloadError, OuterStateError, StorageError, VeritrainError) as exc:
        comparison.mismatched.append(f"contributions: the recorded payloads do not decode: {exc}")
        return disputed | set(keys)
    bound = choice.bound
    for key in keys:
        label = f"contribution of cluster {key[0]} stage {key[1]} ({expected[key][:16]}…)"
        if choice.granularity == "stage":
            distance = global_distance(signed[key], again[key], None)
            line = f"{label}: its tensors at once at relative distance {distance:.3g}"
            if distance <= bound:
                comparison.matched.append(f"{line} <= {bound} of the recorded payload")
            else:
                comparison.mismatched.append(f"{line} > {bound} of the recorded payload")
                disputed.add(key)
            continue
        distances, problems = tensor_distances(signed[key], again[key], None)
        problems += [
            f"{d.name} at relative distance {d.value:.3g} > {bound}"
            for d in distances
            if d.value > bound
        ]
        if problems:
            shown = "; ".join(problems[:3]) + (
                f"; and {len(problems) - 3} more" if len(problems) > 3 else ""
            )
            comparison.mismatched.append(f"{label} differs from the recorded payload: {shown}")
            disputed.add(key)
        else:
            worst = largest(distances)
            comparison.matched.append(
                f"{label}: {len(distances)} tensors within a relative distance of {bound} of the "
                f"recorded payload (largest {worst.value if worst else 0.0:.3g})"
            )
    return disputed


def in_flight_problems(
    signed: Mapping[Key, str], round_: int, applied: Sequence[AppliedRound]
) -> list[str]:
    """Under the one-step delay a step applies the previous round late, from the payloads the
    checkpoint before it holds (each cluster's outer state). A state is not re-executed, so
    those payloads must be, digest for digest, the contributions the previous step's clusters
    signed (``signed``: (cluster, stage) -> digest of round ``round_``); otherwise the state
    was edited after the step -- in any mode, since payload bytes do not drift. One sentence per
    difference; empty when the re-execution applied exactly the signed payloads, or applied no
    round ``round_`` (a blocking run)."""
    problems = []
    for exchange in applied:
        if exchange.round != round_:
            continue
        used = {(c.cluster, c.stage): c.digest for c in exchange.contribution_digests}
        for key in sorted(set(signed) | set(used)):
            if used.get(key) != signed.get(key):
                problems.append(
                    f"round {round_} applied late: cluster {key[0]} stage {key[1]}'s payload in "
                    f"the state before is {str(used.get(key))[:16]}…, the contribution it signed "
                    f"{str(signed.get(key))[:16]}… (the outer state was edited after the step)"
                )
    return problems


def compare_in_flight(comparison: Comparison, previous: OuterStep, result: Reexecution) -> None:
    """:func:`in_flight_problems` for a whole-step re-execution, into ``comparison``."""
    problems = in_flight_problems(
        previous.signed_contributions(), previous.step, result.record.applied
    )
    comparison.mismatched.extend(problems)
    if not problems and any(a.round == previous.step for a in result.record.applied):
        comparison.matched.append(
            f"round {previous.step} applied late from the state before: the payloads its "
            "clusters signed"
        )


def round_in_flight(
    source: RunSource,
    config: TrainConfig,
    recorded: OuterStep,
    previous: OuterStep | None,
    before: CheckpointFiles | None,
    fetched: Mapping[str, bytes],
) -> RecordedRound | None:
    """The previous step's round when this step applied it before contributing (the short
    overlap, ``OuterConfig.apply_delay``), as its record says: the payloads its clusters
    signed -- from the state before where a cluster's saved pending payload hashes to the
    digest, else from ``fetched`` or the store (verified) -- and the verdicts it was applied
    with.
    None for every other schedule: there the state before already holds the round's bases."""
    if previous is None or before is None or config.outer.delay_in_use is None:
        return None
    applied = next((a for a in recorded.applied if a.round == previous.step), None)
    if applied is None:
        return None  # a warm-up round: applied in its own step
    digests = applied.combined_digests()
    clusters = list(previous.quorum.clusters)
    payloads = []
    for stage in range(config.stages):
        row = []
        for c in clusters:
            digest = digests.get((c, stage))
            if digest is None:
                raise ReproduceError(
                    f"step {recorded.step} applied round {applied.round} without cluster {c}'s "
                    f"stage {stage} payload, which its quorum contributed"
                )
            row.append(_payload(source, before, fetched, c, stage, applied.round, digest))
        payloads.append(row)
    return RecordedRound.of(previous, applied, payloads)


def _payload(
    source: RunSource,
    before: CheckpointFiles,
    fetched: Mapping[str, bytes],
    cluster: int,
    stage: int,
    round_: int,
    digest: str,
) -> torch.Tensor:
    """Cluster ``cluster``'s stage ``stage`` payload of ``round_`` whose digest is ``digest``."""
    held = saved_payload(before, cluster=cluster, stage=stage, round_=round_)
    if held is not None and payload_digest(held) == digest:
        return held
    data = fetched[digest] if digest in fetched else read_verified(source, digest, PAYLOAD_LIMIT)
    return torch.frombuffer(bytearray(data), dtype=torch.uint8)


def _signed_payloads(recorded: OuterStep, cluster: int | None) -> dict[Key, str]:
    return {
        key: digest
        for key, digest in recorded.signed_contributions().items()
        if cluster is None or key[0] == cluster
    }


def _outer_states(before: CheckpointFiles, config: TrainConfig) -> list[Mapping[str, torch.Tensor]]:
    """Every stage's outer state after the previous step, from whichever cluster's file the
    state before holds (the round's bases are shared by every cluster)."""
    states = []
    for stage in range(config.stages):
        names = [outer_file(c, stage) for c in range(config.clusters)]
        held = next((n for n in names if n in before.tensors), None)
        if held is None:
            raise ReproduceError(f"the state before holds no outer state of stage {stage}")
        states.append(before.tensors[held])
    return states
