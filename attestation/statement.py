"""in-toto Statement v1 carrying SLSA provenance v1 for one outer training step.

The statement says "checkpoint/step-T (identified by its manifest root) was built by this
builder from the previous checkpoint, these data shards and this code, under these
hyperparameters, and produced these metrics" (DESIGN.md §5). Field names follow
in-toto attestation spec v1 (statement.md, resource_descriptor.md) and SLSA provenance v1:

  _type          https://in-toto.io/Statement/v1
  subject        [{name: checkpoint/step-000012, digest: {sha256: <manifest root>}}]
  predicateType  https://slsa.dev/provenance/v1
  predicate.buildDefinition  buildType, externalParameters (hyperparameters),
                             internalParameters (optional), resolvedDependencies
  predicate.runDetails       builder.id, metadata.invocationId (<run id>/step-000012),
                             byproducts ([metrics digest])

resolvedDependencies are ResourceDescriptors named by kind: ``checkpoint/step-...`` (the
previous checkpoint), ``data/<shard>`` (each shard consumed) and ``code`` (digest set
``{gitCommit, sha256}``; gitCommit is a registered in-toto digest algorithm).

Statements are serialised as RFC 8785 canonical JSON and signed in a DSSE envelope with
payloadType ``application/vnd.in-toto+json``. The statement digest bound into quotes is the
SHA-256 of those payload bytes.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from attestation._schema import as_object, check_sha256_hex, read_list, read_str
from attestation.canonical import CanonicalizationError, canonical_json, parse_canonical_json
from attestation.errors import ParseError

STATEMENT_TYPE = "https://in-toto.io/Statement/v1"
SLSA_PROVENANCE_TYPE = "https://slsa.dev/provenance/v1"
IN_TOTO_PAYLOAD_TYPE = "application/vnd.in-toto+json"
"""DSSE payloadType for in-toto statements (in-toto attestation spec v1, envelope layer)."""

OUTER_STEP_BUILD_TYPE = "https://veritrain.dev/build-types/outer-step/v1"
"""SLSA buildType: how to read externalParameters and resolvedDependencies of an outer step
(documented in docs/attestation.md)."""

DEFAULT_BUILDER_ID = "https://veritrain.dev/builders/diloco-x/v1"

_CHECKPOINT_NAME = re.compile(r"checkpoint/step-(\d{6,})")
_GIT_COMMIT_HEX = re.compile(r"[0-9a-f]{40}|[0-9a-f]{64}")  # SHA-1 or SHA-256 object format
_CODE = "code"
_DATA_PREFIX = "data/"
_METRICS = "metrics"


def checkpoint_name(step: int) -> str:
    """Subject name of the checkpoint after outer step ``step`` (matches HF revision names)."""
    if step < 0:
        raise ValueError(f"step: expected >= 0, got {step}")
    return f"checkpoint/step-{step:06d}"


@dataclass(frozen=True, kw_only=True)
class CodeDigest:
    """What code ran: the git commit (when built from a checkout) and a SHA-256 over the
    source tree (always; it also covers uncommitted changes)."""

    source_sha256: str
    git_commit: str | None = None

    def __post_init__(self) -> None:
        check_sha256_hex(self.source_sha256, "source_sha256")
        if self.git_commit is not None and _GIT_COMMIT_HEX.fullmatch(self.git_commit) is None:
            raise ValueError(
                f"git_commit: expected 40 or 64 lower-case hex digits, got {self.git_commit!r}"
            )


@dataclass(frozen=True, kw_only=True)
class DataShard:
    """One data shard consumed during the step, by name and content digest."""

    name: str
    sha256: str

    def __post_init__(self) -> None:
        if not self.name:
            raise ValueError("name: expected a non-empty shard name, got ''")
        check_sha256_hex(self.sha256, "sha256")


@dataclass(frozen=True, kw_only=True)
class OuterStepProvenance:
    """The typed content of an outer-step statement; :func:`build_statement` writes it and
    :func:`parse_statement` reads it back unchanged."""

    run_id: str
    step: int
    manifest_root: str
    """Hex SHA-256 manifest root of the checkpoint this step produced (the subject)."""
    hyperparameters: Mapping[str, Any]
    """JSON-serialisable step hyperparameters (SLSA externalParameters)."""
    previous_manifest_root: str | None
    """Manifest root of checkpoint step-1; None only for a step with no parent checkpoint."""
    data_shards: tuple[DataShard, ...]
    code: CodeDigest
    metrics_digest: str
    """Hex SHA-256 of the step's canonical metrics object (a SLSA byproduct)."""
    builder_id: str = DEFAULT_BUILDER_ID
    internal_parameters: Mapping[str, Any] | None = None
    """Optional SLSA internalParameters (e.g. topology), JSON-serialisable."""

    def __post_init__(self) -> None:
        object.__setattr__(self, "data_shards", tuple(self.data_shards))
        if not self.run_id:
            raise ValueError("run_id: expected a non-empty run id, got ''")
        checkpoint_name(self.step)
        check_sha256_hex(self.manifest_root, "manifest_root")
        check_sha256_hex(self.metrics_digest, "metrics_digest")
        if self.previous_manifest_root is not None:
            if self.step == 0:
                raise ValueError("previous_manifest_root: step 0 has no previous checkpoint")
            check_sha256_hex(self.previous_manifest_root, "previous_manifest_root")
        if not self.builder_id:
            raise ValueError("builder_id: expected a URI, got ''")
        names = [s.name for s in self.data_shards]
        if len(set(names)) != len(names):
            raise ValueError(f"data_shards: expected distinct shard names, got {names}")


def build_statement(provenance: OuterStepProvenance) -> dict[str, Any]:
    """The in-toto Statement v1 (SLSA provenance v1 predicate) for one outer step."""
    p = provenance
    dependencies: list[dict[str, Any]] = []
    if p.previous_manifest_root is not None:
        dependencies.append(
            {"name": checkpoint_name(p.step - 1), "digest": {"sha256": p.previous_manifest_root}}
        )
    dependencies.extend(
        {"name": _DATA_PREFIX + s.name, "digest": {"sha256": s.sha256}} for s in p.data_shards
    )
    code_digest = {"sha256": p.code.source_sha256}
    if p.code.git_commit is not None:
        code_digest["gitCommit"] = p.code.git_commit
    dependencies.append({"name": _CODE, "digest": code_digest})

    build_definition: dict[str, Any] = {
        "buildType": OUTER_STEP_BUILD_TYPE,
        "externalParameters": dict(p.hyperparameters),
        "resolvedDependencies": dependencies,
    }
    if p.internal_parameters is not None:
        build_definition["internalParameters"] = dict(p.internal_parameters)
    return {
        "_type": STATEMENT_TYPE,
        "subject": [{"name": checkpoint_name(p.step), "digest": {"sha256": p.manifest_root}}],
        "predicateType": SLSA_PROVENANCE_TYPE,
        "predicate": {
            "buildDefinition": build_definition,
            "runDetails": {
                "builder": {"id": p.builder_id},
                "metadata": {"invocationId": _invocation_id(p.run_id, p.step)},
                "byproducts": [{"name": _METRICS, "digest": {"sha256": p.metrics_digest}}],
            },
        },
    }


def encode_statement(provenance: OuterStepProvenance) -> bytes:
    """Canonical JSON bytes of the statement: the DSSE payload and what its digest covers."""
    return canonical_json(build_statement(provenance))


def parse_statement(payload: bytes) -> OuterStepProvenance:
    """Check the shape of an outer-step statement and return its typed content.

    ``payload`` should be the bytes a DSSE verification returned. It must be canonical JSON
    (one byte string per statement, so its digest is unambiguous). Unknown fields are ignored,
    as in-toto statement.md requires of consumers.
    """
    try:
        statement = as_object(parse_canonical_json(payload), what="statement")
    except CanonicalizationError as exc:
        raise ParseError(f"statement: {exc}") from None
    _expect(statement, "_type", STATEMENT_TYPE, what="statement")
    _expect(statement, "predicateType", SLSA_PROVENANCE_TYPE, what="statement")
    subjects = read_list(statement, "subject", what="statement") if "subject" in statement else []
    if len(subjects) != 1:
        raise ParseError(f"statement.subject: expected exactly one checkpoint, got {len(subjects)}")
    step, manifest_root = _read_checkpoint(subjects[0], what="statement.subject[0]")

    predicate = _object_field(statement, "predicate", what="statement")
    build = _object_field(predicate, "buildDefinition", what="predicate")
    _expect(build, "buildType", OUTER_STEP_BUILD_TYPE, what="predicate.buildDefinition")
    hyperparameters = _object_field(build, "externalParameters", what="predicate.buildDefinition")
    # in-toto statement.md: an unset field and a null one mean the same.
    internal = (
        _object_field(build, "internalParameters", what="predicate.buildDefinition")
        if build.get("internalParameters") is not None
        else None
    )
    previous, shards, code = _read_dependencies(build, step=step)

    run = _object_field(predicate, "runDetails", what="predicate")
    builder_id = _str_field(_object_field(run, "builder", what="runDetails"), "id", "builder")
    invocation = _str_field(
        _object_field(run, "metadata", what="runDetails"), "invocationId", "metadata"
    )
    run_id = _read_run_id(invocation, step=step)
    metrics_digest = _read_metrics(run)
    try:
        return OuterStepProvenance(
            run_id=run_id,
            step=step,
            manifest_root=manifest_root,
            hyperparameters=hyperparameters,
            previous_manifest_root=previous,
            data_shards=shards,
            code=code,
            metrics_digest=metrics_digest,
            builder_id=builder_id,
            internal_parameters=internal,
        )
    except ValueError as exc:
        raise ParseError(f"statement: {exc}") from None


def _read_dependencies(
    build: Mapping[str, Any], *, step: int
) -> tuple[str | None, tuple[DataShard, ...], CodeDigest]:
    what = "predicate.buildDefinition.resolvedDependencies"
    if "resolvedDependencies" not in build:
        raise ParseError(f"{what}: missing")
    previous: str | None = None
    shards: list[DataShard] = []
    code: CodeDigest | None = None
    for i, item in enumerate(
        read_list(build, "resolvedDependencies", what="predicate.buildDefinition")
    ):
        where = f"{what}[{i}]"
        descriptor = as_object(item, what=where)
        name = _str_field(descriptor, "name", where)
        digest = _digest_set(descriptor, what=where)
        if name == _CODE:
            if code is not None:
                raise ParseError(f"{where}: expected one code dependency, got a second")
            code = _code_digest(digest, what=where)
        elif name.startswith(_DATA_PREFIX):
            shards.append(
                DataShard(name=name[len(_DATA_PREFIX) :], sha256=_sha256_of(digest, where))
            )
        elif _CHECKPOINT_NAME.fullmatch(name):
            expected = checkpoint_name(step - 1) if step > 0 else None
            if name != expected or previous is not None:
                raise ParseError(
                    f"{where}: expected the previous checkpoint {expected}, got {name}"
                )
            previous = _sha256_of(digest, where)
        else:
            raise ParseError(
                f"{where}: expected a checkpoint, data/ or code dependency, got {name!r}"
            )
    if code is None:
        raise ParseError(f"{what}: expected a 'code' dependency, got none")
    return previous, tuple(shards), code


def _read_checkpoint(item: Any, *, what: str) -> tuple[int, str]:
    descriptor = as_object(item, what=what)
    name = _str_field(descriptor, "name", what)
    match = _CHECKPOINT_NAME.fullmatch(name)
    if match is None:
        raise ParseError(f"{what}.name: expected checkpoint/step-NNNNNN, got {name!r}")
    return int(match.group(1)), _sha256_of(_digest_set(descriptor, what=what), what)


def _read_run_id(invocation: str, *, step: int) -> str:
    run_id, _, suffix = invocation.rpartition("/")
    if not run_id or suffix != f"step-{step:06d}":
        raise ParseError(
            "runDetails.metadata.invocationId: expected "
            f"<run id>/step-{step:06d}, got {invocation!r}"
        )
    return run_id


def _read_metrics(run: Mapping[str, Any]) -> str:
    what = "runDetails.byproducts"
    byproducts = read_list(run, "byproducts", what="runDetails") if "byproducts" in run else []
    metrics = [
        as_object(b, what=what)
        for b in byproducts
        if isinstance(b, dict) and b.get("name") == _METRICS
    ]
    if len(metrics) != 1:
        raise ParseError(f"{what}: expected one 'metrics' byproduct, got {len(metrics)}")
    return _sha256_of(_digest_set(metrics[0], what=what), what)


def _invocation_id(run_id: str, step: int) -> str:
    return f"{run_id}/step-{step:06d}"


def _digest_set(descriptor: Mapping[str, Any], *, what: str) -> dict[str, Any]:
    return _object_field(descriptor, "digest", what=what)


def _sha256_of(digest: Mapping[str, Any], what: str) -> str:
    if "sha256" not in digest:
        raise ParseError(f"{what}.digest: expected a sha256 entry, got {sorted(digest)}")
    value = _str_field(digest, "sha256", f"{what}.digest")
    try:
        check_sha256_hex(value, f"{what}.digest.sha256")
    except ValueError as exc:
        raise ParseError(str(exc)) from None
    return value


def _code_digest(digest: Mapping[str, Any], *, what: str) -> CodeDigest:
    source = _sha256_of(digest, what)
    commit = _str_field(digest, "gitCommit", f"{what}.digest") if "gitCommit" in digest else None
    try:
        return CodeDigest(source_sha256=source, git_commit=commit)
    except ValueError as exc:
        raise ParseError(f"{what}.digest: {exc}") from None


def _object_field(obj: Mapping[str, Any], key: str, *, what: str) -> dict[str, Any]:
    if key not in obj:
        raise ParseError(f"{what}: missing field {key}")
    return as_object(obj[key], what=f"{what}.{key}")


def _str_field(obj: Mapping[str, Any], key: str, what: str) -> str:
    if key not in obj:
        raise ParseError(f"{what}: missing field {key}")
    return read_str(obj, key, what=what)


def _expect(obj: Mapping[str, Any], key: str, expected: str, *, what: str) -> None:
    got = obj.get(key)
    if got != expected:
        raise ParseError(f"{what}.{key}: expected {expected!r}, got {got!r}")
