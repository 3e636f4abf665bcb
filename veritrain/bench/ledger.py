"""``veritrain bench ledger``: how fast the log appends, verifies and proves.

1. **Appends per second**, each one a whole ``Ledger.append``: the entry, its tree nodes, the
   newly signed C2SP tree head and the metric rows, in one committed transaction -- on SQLite
   (WAL, ``synchronous=FULL``: every append is on disk when it returns) and on PostgreSQL
   (``VERITRAIN_BENCH_POSTGRES_URL``, else the test server's ``VERITRAIN_TEST_POSTGRES_URL``;
   a scratch database is created there and dropped afterwards, so the URL needs CREATEDB).
2. **Verifying a 10,000-entry run** the way ``veritrain verify`` does at log level
   (veritrain/audit/verify/log_checks.py, checks 1-3: signed tree head, hash chain and root,
   every entry's inclusion proof) plus check 9 (the metrics table against the signed
   entries), each phase timed so the report says what dominates. Objects are not re-hashed.
3. **Inclusion-proof latency** through the HTTP API: ``veritrain serve`` in its own process
   and 32 concurrent clients asking ``/api/v1/runs/{run}/log/proof/inclusion`` for random
   entries (``size`` given, as a client checking a receipt does); p50/p99 over all requests.

Targets (issue #7): >= 200 appends/s on SQLite, verification < 10 s, p99 < 50 ms.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import random
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from ledger.db import create_engine, upgrade
from ledger.keyring import InMemoryLogKeys
from ledger.service import Ledger
from veritrain.audit.verify.log_checks import check_chain, check_inclusion, check_tree_head
from veritrain.audit.verify.object_checks import check_metrics
from veritrain.audit.verify.report import Report
from veritrain.bench.http_load import Connection, Response
from veritrain.bench.scratch import scratch_dir
from veritrain.bench.server import served
from veritrain.bench.stats import percentile, rate, verdict
from veritrain.bench.synthetic_run import SyntheticRun, build_synthetic_run
from veritrain.errors import BenchError
from veritrain.settings import Settings
from veritrain.sources import DirectSource
from veritrain.sources.recorded_run import RecordedRun

APPENDS_TARGET = 200.0
VERIFY_TARGET_S = 10.0
PROOF_P99_TARGET_MS = 50.0
ORIGIN = "bench.veritrain.local"


@dataclass(frozen=True, kw_only=True)
class LedgerBenchConfig:
    verify_entries: int = 10_000
    """Entries of the run that is verified (genesis and data manifest included)."""
    postgres_appends: int = 1_000
    """Outer-step appends timed on PostgreSQL."""
    clients: int = 32
    """Concurrent HTTP clients asking for inclusion proofs."""
    requests_per_client: int = 50
    server_workers: int = 1
    """Processes of the ``veritrain serve`` under test (``--workers``)."""
    postgres_url: str | None = None
    """A PostgreSQL server URL (a scratch database is created on it); None: skipped."""
    workdir: Path | None = None
    """Where the SQLite ledger lives; None: a temporary folder."""

    def __post_init__(self) -> None:
        if self.verify_entries < 3:
            raise BenchError(f"expected at least 3 entries to verify, got {self.verify_entries}")
        if self.clients < 1 or self.requests_per_client < 1:
            raise BenchError(
                "expected >= 1 client and request, got "
                f"{self.clients} and {self.requests_per_client}"
            )
        if self.server_workers < 1:
            raise BenchError(f"expected >= 1 server worker, got {self.server_workers}")


@dataclass(frozen=True, kw_only=True)
class AppendThroughput:
    backend: str
    appends: int
    seconds: float

    @property
    def per_second(self) -> float:
        return rate(self.appends, self.seconds)

    def to_dict(self) -> dict[str, Any]:
        return {**asdict(self), "per_second": self.per_second}


@dataclass(frozen=True, kw_only=True)
class VerifyTiming:
    entries: int
    phases: dict[str, float]
    """Seconds per phase: fetch, 1 tree head, 2 chain, 3 inclusion, 9 metrics."""
    passed: bool

    @property
    def seconds(self) -> float:
        return sum(self.phases.values())

    @property
    def dominant(self) -> str:
        return max(self.phases, key=lambda name: self.phases[name])

    def to_dict(self) -> dict[str, Any]:
        return {**asdict(self), "seconds": self.seconds, "dominant": self.dominant}


@dataclass(frozen=True, kw_only=True)
class ProofLatency:
    clients: int
    latencies_ms: list[float] = field(repr=False)
    errors: int
    seconds: float
    alone_ms: list[float] = field(repr=False)
    """Latencies of one client asking alone first: the server's own time per proof, without
    queueing behind the other clients."""

    @property
    def p50_ms(self) -> float:
        return percentile(self.latencies_ms, 50)

    @property
    def p99_ms(self) -> float:
        return percentile(self.latencies_ms, 99)

    def to_dict(self) -> dict[str, Any]:
        return {
            "clients": self.clients,
            "requests": len(self.latencies_ms),
            "errors": self.errors,
            "p50_ms": self.p50_ms,
            "p99_ms": self.p99_ms,
            "max_ms": max(self.latencies_ms),
            "requests_per_second": rate(len(self.latencies_ms), self.seconds),
            "one_client_p50_ms": percentile(self.alone_ms, 50),
        }


@dataclass(frozen=True, kw_only=True)
class LedgerBenchResult:
    sqlite: AppendThroughput
    postgres: AppendThroughput | None
    postgres_note: str
    verify: VerifyTiming
    proofs: ProofLatency

    def to_dict(self) -> dict[str, Any]:
        return {
            "appends": {
                "sqlite": self.sqlite.to_dict(),
                "postgres": self.postgres.to_dict() if self.postgres else self.postgres_note,
            },
            "verify": self.verify.to_dict(),
            "inclusion_proof": self.proofs.to_dict(),
            "targets": {
                "sqlite_appends_per_second": {
                    "target": APPENDS_TARGET,
                    "met": self.sqlite.per_second >= APPENDS_TARGET,
                },
                "verify_seconds": {
                    "target": VERIFY_TARGET_S,
                    "met": self.verify.seconds < VERIFY_TARGET_S,
                },
                "proof_p99_ms": {
                    "target": PROOF_P99_TARGET_MS,
                    "met": self.proofs.p99_ms < PROOF_P99_TARGET_MS,
                },
            },
        }

    def lines(self) -> list[str]:
        v, p = self.verify, self.proofs
        postgres = (
            f"{self.postgres.per_second:,.0f} appends/s "
            f"({self.postgres.appends:,} in {self.postgres.seconds:.1f} s)"
            if self.postgres
            else self.postgres_note
        )
        phases = ", ".join(f"{name} {seconds:.2f} s" for name, seconds in v.phases.items())
        return [
            "appends (entry + signed tree head + metrics, committed)",
            f"  SQLite      {self.sqlite.per_second:,.0f} appends/s "
            f"({self.sqlite.appends:,} in {self.sqlite.seconds:.1f} s)"
            f"   target >= {APPENDS_TARGET:.0f}: "
            f"{verdict(self.sqlite.per_second >= APPENDS_TARGET)}",
            f"  PostgreSQL  {postgres}",
            f"verify {v.entries:,} entries (checks 1-3 + 9){'' if v.passed else ' -- FAILED'}",
            f"  {v.seconds:.2f} s: {phases}; dominated by {v.dominant}"
            f"   target < {VERIFY_TARGET_S:.0f} s: {verdict(v.seconds < VERIFY_TARGET_S)}",
            f"inclusion proofs over HTTP, {p.clients} concurrent "
            f"clients, {len(p.latencies_ms):,} requests"
            f"{f', {p.errors} errors' if p.errors else ''}",
            f"  p50 {p.p50_ms:.1f} ms, p99 {p.p99_ms:.1f} ms, "
            f"{rate(len(p.latencies_ms), p.seconds):,.0f} requests/s"
            f" (one client alone: p50 {percentile(p.alone_ms, 50):.1f} ms)"
            f"   target p99 < {PROOF_P99_TARGET_MS:.0f} "
            f"ms: {verdict(p.p99_ms < PROOF_P99_TARGET_MS)}",
        ]


def postgres_url_from_environment() -> str | None:
    return (
        os.environ.get("VERITRAIN_BENCH_POSTGRES_URL")
        or os.environ.get("VERITRAIN_TEST_POSTGRES_URL")
        or None
    )


def run_ledger_bench(
    config: LedgerBenchConfig, *, say: Callable[[str], None] = lambda _: None
) -> LedgerBenchResult:
    with scratch_dir(config.workdir, prefix="veritrain-bench-ledger-") as workdir:
        url = f"sqlite:///{workdir / 'ledger.db'}"
        upgrade(url)
        say(f"appending {config.verify_entries:,} entries to a SQLite ledger")
        run = _build(url, config.verify_entries - 2)
        sqlite = AppendThroughput(
            backend="sqlite", appends=run.outer_steps, seconds=run.append_seconds
        )
        postgres, note = None, "skipped: no PostgreSQL (set VERITRAIN_BENCH_POSTGRES_URL)"
        if config.postgres_url:
            say(f"appending {config.postgres_appends:,} entries to a PostgreSQL ledger")
            postgres = _postgres_appends(config.postgres_url, config.postgres_appends)
            note = ""
        say(f"verifying the {run.entries:,}-entry run (checks 1-3 and 9)")
        store_url = f"file://{workdir / 'objects'}"
        verify = time_log_verification(url, store_url, run)
        say(
            "inclusion proofs through `veritrain serve --workers "
            f"{config.server_workers}` with {config.clients} clients"
        )
        env = {
            "VERITRAIN_DATABASE_URL": url,
            "VERITRAIN_STORE_URL": store_url,
            "VERITRAIN_DATA_DIR": str(workdir),
            "VERITRAIN_ORIGIN": ORIGIN,
        }
        with served(env, log=workdir / "serve.log", workers=config.server_workers) as base:
            proofs = asyncio.run(
                _proof_latency(
                    base,
                    run,
                    clients=config.clients,
                    requests_per_client=config.requests_per_client,
                )
            )
    return LedgerBenchResult(
        sqlite=sqlite, postgres=postgres, postgres_note=note, verify=verify, proofs=proofs
    )


def time_log_verification(database_url: str, store_url: str, run: SyntheticRun) -> VerifyTiming:
    """Checks 1-3 and 9 of ``veritrain verify`` on ``run``, timed phase by phase."""
    source = DirectSource(Settings(database_url=database_url, store_url=store_url, origin=ORIGIN))
    report = Report(run_id=run.run_id, source=source.description)
    phases: dict[str, float] = {}
    clock = time.perf_counter()

    def lap(name: str) -> None:
        nonlocal clock
        now = time.perf_counter()
        phases[name] = now - clock
        clock = now

    try:
        view = RecordedRun.from_bodies(run.run_id, source.entry_bodies(run.run_id))
        note = source.tree_head(run.run_id)
        lap("fetch and parse")
        head = check_tree_head(
            report, view, note, pinned_vkey=run.log_vkey, seen_heads=None, source=source
        )
        lap("1 tree head")
        check_chain(report, view, note, head)
        lap("2 chain and root")
        check_inclusion(report, view, source, head)
        lap("3 inclusion proofs")
        check_metrics(report, view, source)
        lap("9 metrics")
    finally:
        source.close()
    checked = [report.results[n] for n in (1, 2, 3, 9)]
    return VerifyTiming(
        entries=len(view.entries), phases=phases, passed=all(r.passed for r in checked)
    )


def _build(url: str, outer_steps: int) -> SyntheticRun:
    engine = create_engine(url)
    try:
        ledger = Ledger(engine, origin=ORIGIN, log_keys=InMemoryLogKeys())
        return build_synthetic_run(ledger, f"bench-{uuid.uuid4().hex[:8]}", outer_steps=outer_steps)
    finally:
        engine.dispose()


def _postgres_appends(server_url: str, appends: int) -> AppendThroughput:
    with _scratch_postgres(server_url) as url:
        upgrade(url)
        run = _build(url, appends)
    return AppendThroughput(
        backend="postgresql", appends=run.outer_steps, seconds=run.append_seconds
    )


@contextlib.contextmanager
def _scratch_postgres(server_url: str) -> Iterator[str]:
    import sqlalchemy as sa

    from ledger.db import database_url

    name = f"vt_bench_{uuid.uuid4().hex[:10]}"
    admin = sa.create_engine(database_url(server_url), isolation_level="AUTOCOMMIT")
    try:
        with admin.connect() as conn:
            conn.execute(sa.text(f'CREATE DATABASE "{name}"'))
        yield database_url(server_url).set(database=name).render_as_string(hide_password=False)
    except sa.exc.SQLAlchemyError as exc:
        raise BenchError(
            "expected a PostgreSQL server that lets the "
            f"bench create a scratch database, got: {exc}"
        ) from exc
    finally:
        with contextlib.suppress(sa.exc.SQLAlchemyError), admin.connect() as conn:
            conn.execute(sa.text(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))
        admin.dispose()


async def _proof_latency(
    base: str, run: SyntheticRun, *, clients: int, requests_per_client: int
) -> ProofLatency:
    path = f"/api/v1/runs/{run.run_id}/log/proof/inclusion"
    errors = 0

    async def client(seed: int, sink: list[float]) -> None:
        nonlocal errors
        pick = random.Random(seed)
        async with Connection(base) as http:
            await http.get(path, {"index": 0, "size": run.entries})  # connect before timing
            for _ in range(requests_per_client):
                index = pick.randrange(run.entries)
                started = time.perf_counter()
                response = await http.get(path, {"index": index, "size": run.entries})
                sink.append((time.perf_counter() - started) * 1000)
                if not _is_proof_of(response, index, run.entries):
                    errors += 1

    alone: list[float] = []
    await client(-1, alone)  # one client alone first: the server's time without queueing
    latencies: list[float] = []
    started = time.perf_counter()
    await asyncio.gather(*(client(seed, latencies) for seed in range(clients)))
    return ProofLatency(
        clients=clients,
        latencies_ms=latencies,
        errors=errors,
        seconds=time.perf_counter() - started,
        alone_ms=alone,
    )


def _is_proof_of(response: Response, index: int, size: int) -> bool:
    """A 200 whose body is the inclusion proof of ``index`` in the tree of ``size`` entries
    (the hashes themselves are checked by the verify phase, not per request)."""
    if response.status != 200:
        return False
    try:
        body = json.loads(response.body)
    except ValueError:
        return False
    return isinstance(body, dict) and body.get("index") == index and body.get("size") == size
