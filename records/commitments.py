"""Per-inner-step commitments: what one cluster's pipeline stage commits to while it trains an
outer step, so that a disputed step can be narrowed to one inner step (docs/auditing.md).

Each (cluster, stage) stores one object per outer step (canonical JSON) and signs its digest
inside its contribution statement (attestation/contribution.py, ``commitments_digest``); the
``outer_step`` entry names it as ``contributions[].stages[].commitments``::

    {"schema": "veritrain/inner-commitments/v1", "run_id": ..., "step": t, "cluster": j,
     "stage": s, "fingerprint": {"method": "count-sketch-splitmix64/v1", "dims": 32},
     "start": {"digest": <hex>, "tensors": {<parameter name>: [32 numbers], ...}},
     "inner_steps": [{"inner_step": i, "digest": <hex>, "fingerprint": [32 numbers]}, ... H],
     "contributed": {"digest": <hex>, "tensors": {<parameter name>: [32 numbers], ...}}}

* ``start``: the parameters the outer step's inner steps started from (restored from the
  recorded state, so a re-execution anywhere reproduces them exactly): their digest and one
  fingerprint per tensor;
* ``inner_steps[k]``: the stage's parameters after global inner step ``i`` (the k-th of the
  outer step): their ``digest`` (compared under bitwise) and their ``fingerprint``, a fixed
  random projection to a few dozen numbers (compared under tolerance);
* ``contributed``: the parameters the cluster computed its contribution from (its
  pseudo-gradient is measured against them), in the same form as ``start``, so a contribution
  is judged tensor by tensor.

The digest and the fingerprint are defined in trainer/runtime/commitments.py, precisely
enough to re-implement. A fingerprint value that is not finite (a diverged run) is ``null``.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from records.fields import Fields, as_number
from records.versions import INNER_COMMITMENTS

SCHEMA = INNER_COMMITMENTS.current
FINGERPRINT_METHOD = "count-sketch-splitmix64/v1"
FINGERPRINT_DIMS = 32
"""Numbers per fingerprint: the relative error of a norm measured through a k-dimensional random
projection is about sqrt(2/k) (25 % at k = 32; Johnson-Lindenstrauss), small against the
tenfold margin between legitimate and forged re-executions that ``veritrain bench audit``
measures, while 32 numbers per inner step keep the object small."""

Fingerprint = tuple[float | None, ...]
"""A fingerprint's numbers; None stands for a value that was not finite."""


def fingerprint_payload(values: Sequence[float | None]) -> list[float | None]:
    return [v if v is not None and math.isfinite(v) else None for v in values]


@dataclass(frozen=True, kw_only=True)
class InnerStepCommitment:
    inner_step: int
    """The global inner step i (the data rule's counter) after which the parameters were taken."""
    digest: str
    fingerprint: Fingerprint

    def to_payload(self) -> dict[str, Any]:
        return {
            "inner_step": self.inner_step,
            "digest": self.digest,
            "fingerprint": fingerprint_payload(self.fingerprint),
        }

    @classmethod
    def read(cls, f: Fields) -> InnerStepCommitment:
        value = cls(
            inner_step=f.integer("inner_step", minimum=0),
            digest=f.digest("digest"),
            fingerprint=_fingerprint(f, "fingerprint"),
        )
        f.exactly()
        return value


@dataclass(frozen=True, kw_only=True)
class ParameterCommitment:
    """A stage's parameters at one moment, tensor by tensor (``start`` and ``contributed``)."""

    digest: str
    tensors: Mapping[str, Fingerprint]
    """Parameter name -> its fingerprint (canonical JSON orders the names)."""

    def to_payload(self) -> dict[str, Any]:
        return {
            "digest": self.digest,
            "tensors": {name: fingerprint_payload(v) for name, v in self.tensors.items()},
        }

    @classmethod
    def read(cls, f: Fields) -> ParameterCommitment:
        tensors = f.obj("tensors")
        value = cls(
            digest=f.digest("digest"),
            tensors={name: _fingerprint(tensors, name) for name in tensors.data},
        )
        f.exactly()
        return value


@dataclass(frozen=True, kw_only=True)
class InnerCommitments:
    """One (cluster, stage)'s commitments for one outer step."""

    run_id: str
    step: int
    cluster: int
    stage: int
    start: ParameterCommitment
    inner_steps: tuple[InnerStepCommitment, ...]
    """One per inner step of the outer step, in order."""
    contributed: ParameterCommitment
    method: str = FINGERPRINT_METHOD
    dims: int = FINGERPRINT_DIMS
    schema: str = field(default=SCHEMA)

    @property
    def first_inner_step(self) -> int:
        return self.inner_steps[0].inner_step

    def to_payload(self) -> dict[str, Any]:
        return {
            "schema": self.schema,
            "run_id": self.run_id,
            "step": self.step,
            "cluster": self.cluster,
            "stage": self.stage,
            "fingerprint": {"method": self.method, "dims": self.dims},
            "start": self.start.to_payload(),
            "inner_steps": [c.to_payload() for c in self.inner_steps],
            "contributed": self.contributed.to_payload(),
        }

    @classmethod
    def from_payload(cls, payload: Any, *, where: str = "inner commitments") -> InnerCommitments:
        f = Fields(payload, where=where)
        version = INNER_COMMITMENTS.version_of(f)
        projection = f.obj("fingerprint")
        method = projection.string("method", choices=(FINGERPRINT_METHOD,))
        dims = projection.integer("dims", minimum=1)
        projection.exactly()
        value = cls(
            run_id=f.string("run_id", nonempty=True),
            step=f.integer("step", minimum=0),
            cluster=f.integer("cluster", minimum=0),
            stage=f.integer("stage", minimum=0),
            start=ParameterCommitment.read(f.obj("start")),
            inner_steps=f.items("inner_steps", InnerStepCommitment.read),
            contributed=ParameterCommitment.read(f.obj("contributed")),
            method=method,
            dims=dims,
            schema=INNER_COMMITMENTS.schema(version),
        )
        f.exactly()
        if not value.inner_steps:
            raise f.fail("inner_steps", "one commitment per inner step (at least one)", [])
        first = value.first_inner_step
        for k, commitment in enumerate(value.inner_steps):
            if commitment.inner_step != first + k:
                raise f.fail(
                    f"inner_steps[{k}].inner_step",
                    f"{first + k} (consecutive)",
                    commitment.inner_step,
                )
            if len(commitment.fingerprint) != dims:
                raise f.fail(
                    f"inner_steps[{k}].fingerprint", f"{dims} numbers", len(commitment.fingerprint)
                )
        for where, parameters in (("start", value.start), ("contributed", value.contributed)):
            for name, values in parameters.tensors.items():
                if len(values) != dims:
                    raise f.fail(f"{where}.tensors.{name}", f"{dims} numbers", len(values))
        if sorted(value.start.tensors) != sorted(value.contributed.tensors):
            raise f.fail(
                "contributed.tensors",
                f"the tensors of start, {list(value.start.tensors)}",
                list(value.contributed.tensors),
            )
        return value


def _fingerprint(f: Fields, name: str) -> Fingerprint:
    values: list[float | None] = []
    for i, item in enumerate(f.array(name)):
        values.append(None if item is None else as_number(item, f, f"{name}[{i}]"))
    return tuple(values)
