"""Shared fixtures: the real servers the integration tests run against.

``make test`` starts PostgreSQL and SeaweedFS (scripts/services.sh) and exports where they
are. When ``CI=true`` or ``VERITRAIN_REQUIRE_SERVICES=1`` a missing server is a test
*failure*, never a skip, so CI cannot go green without running the integration tests.

``make test`` runs the tests in parallel (pytest-xdist, ``-n 4 --dist loadfile``): every test
gets its own database and bucket (uuid names), a server in a thread binds a port the OS picks
and one in another process a port from ``veritrain.bench.server.free_port`` (below the
ephemeral range, so no test's outgoing connection takes it first), network namespaces are
named after the process that makes them, and the workers take the costliest files first
(:func:`_costliest_first`). A test that must not share
the machine with other tests (it asserts timing or a machine-wide state) is marked
``@pytest.mark.serial``: xdist workers leave it out, and ``make test`` runs those tests
afterwards on their own with ``--only-serial``.

Every test process, and every process a test starts (they inherit the environment), computes on
one CPU thread (``OMP_NUM_THREADS=1``, set below before anything imports torch), as the
trainer's own processes do (trainer/runtime/determinism.py). PyTorch otherwise gives each
process a thread per core, and four workers that each start several processes on two cores
spend most of their CPU time waiting on each other: four test files (test_outer_dilocox,
test_hf_compat, test_trainer_model, e2e/test_verify_api) took 152 CPU-seconds with two threads
and 67 with one, on a busy 2-core machine.
A thread count set by hand (``OMP_NUM_THREADS=2 pytest ...``) is kept.
"""

from __future__ import annotations

import os
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

os.environ.setdefault("OMP_NUM_THREADS", "1")  # before torch is imported: see the docstring

import pytest
from real_servers import S3Server


def _services_required() -> bool:
    return (
        os.environ.get("CI", "").lower() == "true"
        or os.environ.get("VERITRAIN_REQUIRE_SERVICES") == "1"
    )


def _missing(what: str, variable: str) -> None:
    message = f"{what} is not available: {variable} is unset (run the tests with `make test`)"
    if _services_required():
        pytest.fail(message)
    pytest.skip(message)


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption(
        "--only-serial",
        action="store_true",
        help="run only the tests marked serial (the second phase of `make test`)",
    )


def _is_xdist(config: pytest.Config) -> bool:
    """Whether this process runs tests beside others (an xdist worker or its controller)."""
    return hasattr(config, "workerinput") or bool(getattr(config.option, "numprocesses", 0))


def pytest_configure(config: pytest.Config) -> None:
    if config.getoption("--only-serial") and _is_xdist(config):
        raise pytest.UsageError("--only-serial runs tests one at a time: leave out -n")
    if _is_xdist(config):
        # xdist hands out files with the most tests first by default; here a file's cost is
        # its processes, not its test count: keep the order of pytest_collection_modifyitems.
        config.option.loadscopereorder = False


def pytest_report_header(config: pytest.Config) -> list[str]:
    postgres = os.environ.get("VERITRAIN_TEST_POSTGRES_URL")
    s3 = os.environ.get("VERITRAIN_TEST_S3_ENDPOINT")
    redacted = postgres.split("@")[-1] if postgres else "not configured"
    lines = [
        f"veritrain: PostgreSQL {redacted}; SeaweedFS S3 {s3 or 'not configured'}; "
        f"servers {'required' if _services_required() else 'optional (tests skip without them)'}"
    ]
    if _is_xdist(config):
        lines.append(
            "veritrain: tests marked serial are left out of parallel runs; "
            "run them on their own with `pytest --only-serial` (make test does)"
        )
    return lines


def pytest_terminal_summary(terminalreporter: Any, exitstatus: int, config: pytest.Config) -> None:
    """One line saying how many tests ran against the real servers, by marker."""
    counts: dict[str, int] = {}
    for outcome in ("passed", "failed", "error", "skipped"):
        for report in terminalreporter.stats.get(outcome, []):
            if getattr(report, "when", "call") != "call" and outcome != "error":
                continue
            for marker in ("integration", "e2e"):
                if marker in getattr(report, "keywords", {}):
                    counts[f"{marker} {outcome}"] = counts.get(f"{marker} {outcome}", 0) + 1
    if counts:
        summary = ", ".join(f"{n} {k}" for k, n in sorted(counts.items()))
        terminalreporter.write_line(
            f"veritrain: {summary} (real PostgreSQL, SeaweedFS, processes, browser)"
        )


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    # Tests are marked by the folder they live in, so `-m "not integration"` gives the fast suite.
    for item in items:
        parts = Path(str(item.fspath)).parts
        if "integration" in parts:
            item.add_marker(pytest.mark.integration)
        if "e2e" in parts:
            item.add_marker(pytest.mark.e2e)
    if _is_xdist(config):
        items.sort(key=_costliest_first(items))
    # Serial tests run alone: never in a parallel run, and only they with --only-serial.
    only_serial = config.getoption("--only-serial")
    if only_serial or _is_xdist(config):
        keep: list[pytest.Item] = []
        left_out: list[pytest.Item] = []
        for item in items:
            serial = item.get_closest_marker("serial") is not None
            (keep if serial == only_serial else left_out).append(item)
        if left_out:
            config.hook.pytest_deselected(items=left_out)
            items[:] = keep


def _costliest_first(items: list[pytest.Item]) -> Callable[[pytest.Item], int]:
    """The order parallel workers take files in: the longest first, so that no worker is left
    alone at the end with a long file while the others stand idle (longest processing time
    first). Files with a ``slow`` test, then integration, then e2e, then the unit tests, which
    are many and short and fill the gaps; within each, collection order (a stable sort, so a
    file's tests stay together)."""
    slow_files = {item.path for item in items if item.get_closest_marker("slow") is not None}

    def rank(item: pytest.Item) -> int:
        if item.path in slow_files:
            return 0
        parts = item.path.parts
        return 1 if "integration" in parts else 2 if "e2e" in parts else 3

    return rank


@pytest.fixture(scope="session")
def testvectors() -> Path:
    """The test vectors kept in the repository (tests/assets/testvectors: transparency-dev
    merkle proofs, kat.json; PROVENANCE.md there says where each comes from), so a clone
    placed anywhere runs every test."""
    vectors = Path(__file__).resolve().parent / "assets" / "testvectors"
    if not (vectors / "kat.json").is_file():
        pytest.fail(f"test vectors not found at {vectors} (they are part of the repository)")
    return vectors


@pytest.fixture
def sqlite_url(tmp_path: Path) -> str:
    return f"sqlite:///{tmp_path / 'ledger.db'}"


@pytest.fixture
def postgres_url() -> Iterator[str]:
    """A fresh, empty PostgreSQL database for one test, dropped afterwards."""
    admin_url = os.environ.get("VERITRAIN_TEST_POSTGRES_URL")
    if not admin_url:
        _missing("PostgreSQL", "VERITRAIN_TEST_POSTGRES_URL")
    assert admin_url is not None
    import sqlalchemy as sa

    name = f"vt_{uuid.uuid4().hex[:12]}"
    admin = sa.create_engine(admin_url, isolation_level="AUTOCOMMIT")
    with admin.connect() as conn:
        conn.execute(sa.text(f'CREATE DATABASE "{name}"'))
    url = sa.make_url(admin_url).set(database=name).render_as_string(hide_password=False)
    try:
        yield url
    finally:
        with admin.connect() as conn:
            conn.execute(sa.text(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))
        admin.dispose()


@pytest.fixture(scope="session")
def s3_server() -> S3Server:
    endpoint = os.environ.get("VERITRAIN_TEST_S3_ENDPOINT")
    if not endpoint:
        _missing("SeaweedFS (S3)", "VERITRAIN_TEST_S3_ENDPOINT")
    assert endpoint is not None
    return S3Server(
        endpoint=endpoint,
        access_key=os.environ.get("VERITRAIN_TEST_S3_ACCESS_KEY", ""),
        secret_key=os.environ.get("VERITRAIN_TEST_S3_SECRET_KEY", ""),
    )


@pytest.fixture
def s3_store_url(s3_server: S3Server, monkeypatch: pytest.MonkeyPatch) -> Iterator[str]:
    """``s3://<fresh bucket>/<prefix>`` on the real SeaweedFS, with the AWS_* variables set
    the way a production deployment sets them (boto3 honours AWS_ENDPOINT_URL).

    The bucket is emptied and deleted afterwards: SeaweedFS backs every bucket with its own
    volumes, and a small test server refuses all writes after about a hundred buckets."""
    bucket = f"veritrain-{uuid.uuid4().hex[:12]}"
    client = s3_server.client()
    client.create_bucket(Bucket=bucket)
    monkeypatch.setenv("AWS_ENDPOINT_URL", s3_server.endpoint)
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", s3_server.access_key)
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", s3_server.secret_key)
    monkeypatch.setenv("AWS_DEFAULT_REGION", s3_server.region)
    try:
        yield f"s3://{bucket}/objects"
    finally:
        _dispose_bucket(client, bucket)


def _dispose_bucket(client, bucket: str) -> None:  # type: ignore[no-untyped-def]
    for upload in client.list_multipart_uploads(Bucket=bucket).get("Uploads", []):
        client.abort_multipart_upload(Bucket=bucket, Key=upload["Key"], UploadId=upload["UploadId"])
    for page in client.get_paginator("list_objects_v2").paginate(Bucket=bucket):
        keys = [{"Key": item["Key"]} for item in page.get("Contents", [])]
        if keys:
            client.delete_objects(Bucket=bucket, Delete={"Objects": keys})
    client.delete_bucket(Bucket=bucket)
