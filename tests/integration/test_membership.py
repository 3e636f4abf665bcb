"""Clusters come and go (issue #13): three clusters on three "hosts" -- each its own network
namespace behind a veth pair, as the comm bench builds them (veritrain/bench/netns.py), or
loopback where namespaces cannot be made -- meet at a lighthouse (`veritrain lighthouse`) and
train one recorded DiLoCoX run with `veritrain train --cluster J --lighthouse URL`.

Cluster 2 is SIGKILLed (its whole process group) mid-run: the other two go on and the ledger
records that it left. It is started again: it catches up from the ledger and contributes
again. The finished run verifies (recomputing every step's verdicts), and the steps where
membership changed re-execute bit for bit. Measured
and printed: the time from the kill to the next committed outer step, steps lost, steps
recorded twice.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from e2e.recorded_runs import config_file, with_light_extras
from sqlalchemy.exc import OperationalError
from unit.veritrain_in_process import run_veritrain

from ledger.db import create_engine
from ledger.errors import RunNotFoundError, SchemaMissingError
from ledger.service import Ledger
from records import OuterStep
from trainer.config import with_overrides
from trainer.presets import run_preset
from veritrain.audit.reproduce import reproduce_step
from veritrain.bench.netns import emulated_link, netns_unavailable
from veritrain.settings import load_settings
from veritrain.sources import DirectSource

RUN = "comes-and-goes"
STEPS = 16
INNER_STEPS = 10
"""Enough rounds that a cluster restarted right after it was killed (starting Python, torch and
its processes takes a while on 2 cores) rejoins several steps before the run ends (step 9 of
16, alone on 2 cores), and short ones: the inner steps are most of this test's CPU (12 rounds
of H = 40 took 222 CPU-s, 16 of H = 10 take ~160)."""
HEARTBEAT_TIMEOUT = 3.0
"""Far above the heartbeat periods (torchft's 100 ms, the run channel's 250 ms), so that clusters
starved of CPU by the tests beside this one still beat in time; the dead one is dropped after
it."""
TIMEOUT = 600.0
"""A guard against hanging, not a speed check."""

pytestmark = pytest.mark.slow
"""Not serial: it runs beside the other tests (on 2 cores with three heavy test files beside it,
12 rounds of H = 40 then, the restarted cluster rejoined at step 8 of 12; alone at step 6).
Alone, its processes leave part of the 2 cores idle."""


@dataclass(frozen=True)
class Hosts:
    """Where each cluster runs: a command prefix (a namespace, or nothing) and the lighthouse."""

    prefixes: tuple[tuple[str, ...], ...]
    lighthouse_host: str
    port: int

    @property
    def url(self) -> str:
        return f"http://{self.lighthouse_host}:{self.port}"


@contextlib.contextmanager
def hosts() -> Iterator[Hosts]:
    if netns_unavailable() is None:
        with emulated_link(3, rate_mbit=1000.0) as link:
            prefixes = tuple(("ip", "netns", "exec", c.namespace) for c in link.clusters)
            yield Hosts(prefixes=prefixes, lighthouse_host=link.clusters[0].address, port=29510)
    else:  # loopback: every cluster on this host, the lighthouse on a free pair of ports
        from veritrain.bench.server import free_port

        yield Hosts(prefixes=((), (), ()), lighthouse_host="127.0.0.1", port=free_port())


def _run_config(folder: Path) -> Path:
    """The coordinator's run: tiny DiLoCoX, 3 clusters, ``STEPS`` x ``INNER_STEPS``, with the
    e2e runs' light extras (the test compares membership and bits, not loss levels; verify
    --deep recomputes the scores all the same)."""
    config = with_overrides(
        run_preset("tiny"),
        method="dilocox",
        clusters=3,
        outer_steps=STEPS,
        inner_steps=INNER_STEPS,
        run_id=RUN,
    )
    return config_file(with_light_extras(config), folder)


def _veritrain() -> str:
    path = shutil.which("veritrain", path=str(Path(sys.executable).parent))
    assert path is not None
    return path


def _steps(database: str) -> list[OuterStep]:
    """The recorded outer steps (none while the coordinator is still creating its ledger)."""
    if not Path(database.removeprefix("sqlite:///")).is_file():
        return []
    engine = create_engine(database)
    try:
        entries = Ledger(engine).entries(RUN, 0, 1000)
    except (SchemaMissingError, RunNotFoundError, OperationalError):
        return []
    finally:
        engine.dispose()
    return [OuterStep.from_payload(e.payload) for e in entries if e.kind == "outer_step"]


def _recorded_at(database: str) -> dict[int, float]:
    engine = create_engine(database)
    try:
        return {
            e.step: e.recorded_at.timestamp()
            for e in Ledger(engine).entries(RUN, 0, 1000)
            if e.kind == "outer_step"
        }
    finally:
        engine.dispose()


def _wait(
    condition: object, what: str, processes: list[subprocess.Popen[bytes]], logs: Path
) -> None:
    deadline = time.monotonic() + TIMEOUT
    while not condition():  # type: ignore[operator]
        for process in processes:
            assert process.poll() in (None, 0), (
                f"a process failed while waiting for {what}:\n{_tails(logs)}"
            )
        assert time.monotonic() < deadline, f"gave up waiting for {what}:\n{_tails(logs)}"
        time.sleep(0.1)


def _tails(logs: Path) -> str:
    return "\n".join(
        f"== {p.name}\n" + "\n".join(p.read_text(errors="replace").splitlines()[-12:])
        for p in sorted(logs.glob("*.log"))
    )


def test_a_cluster_killed_mid_run_leaves_rejoins_and_the_run_verifies_and_reproduces(
    tmp_path: Path,
) -> None:
    veritrain = _veritrain()
    data = tmp_path / "data"
    database = f"sqlite:///{data / 'ledger.db'}"
    logs = tmp_path / "logs"
    logs.mkdir()
    env = {**os.environ, "VERITRAIN_DATA_DIR": str(data), "COLUMNS": "200"}
    started: list[subprocess.Popen[bytes]] = []

    def start(name: str, prefix: tuple[str, ...], *args: str) -> subprocess.Popen[bytes]:
        with (logs / f"{name}.log").open("wb") as out:
            process = subprocess.Popen(
                [*prefix, veritrain, *args],
                env=env,
                stdout=out,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
        started.append(process)
        return process

    with hosts() as where:
        try:
            start(
                "lighthouse",
                where.prefixes[0],
                "lighthouse",
                "--port",
                str(where.port),
                "--heartbeat-timeout",
                str(HEARTBEAT_TIMEOUT),
                "--join-timeout",
                "20",
            )

            def cluster(j: int, name: str) -> subprocess.Popen[bytes]:
                extra = ["--config", str(_run_config(tmp_path))] if j == 0 else []
                return start(
                    name,
                    where.prefixes[j],
                    "train",
                    "--cluster",
                    str(j),
                    "--lighthouse",
                    where.url,
                    "--run-id",
                    RUN,
                    "--key-dir",
                    str(tmp_path / f"keys-{j}"),
                    *extra,
                )

            coordinator = cluster(0, "cluster-0")
            cluster(1, "cluster-1")
            doomed = cluster(2, "cluster-2")
            everyone = [coordinator, doomed]
            _wait(lambda: len(_steps(database)) >= 2, "two recorded steps", everyone, logs)

            # 1. SIGKILL every process of cluster 2 (its launcher and its stage processes), and
            # 2. start it again at once: the others go on without it, and it catches up from the
            #    ledger and contributes again once it is up.
            os.killpg(doomed.pid, signal.SIGKILL)
            killed_at = time.time()
            doomed.wait()
            started.remove(doomed)
            again = cluster(2, "cluster-2-again")
            _wait(
                lambda: any(2 in s.quorum.left for s in _steps(database)),
                "a step without cluster 2",
                [coordinator, again],
                logs,
            )
            _wait(
                lambda: any(2 in s.quorum.joined for s in _steps(database)),
                "cluster 2 to rejoin",
                [coordinator, again],
                logs,
            )
            for process in (coordinator, again):
                process.wait(timeout=TIMEOUT)
                assert process.returncode == 0, _tails(logs)
        finally:
            for process in started:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(process.pid, signal.SIGTERM)
                process.wait(timeout=30)

    steps = _steps(database)
    recorded = [s.step for s in steps]
    lost = sorted(set(range(STEPS)) - set(recorded))
    duplicated = len(recorded) - len(set(recorded))
    assert recorded == list(range(STEPS)), f"lost {lost}, duplicated {duplicated}"
    left = next(s for s in steps if 2 in s.quorum.left)
    joined = next(s for s in steps if 2 in s.quorum.joined)
    assert left.quorum.clusters == (0, 1) and [r.cluster for r in left.data_ranges] == [0, 1]
    assert joined.step > left.step and joined.quorum.clusters == (0, 1, 2)
    assert all(
        s.quorum.clusters == (0, 1, 2) for s in steps if s.step < left.step or s.step >= joined.step
    )
    assert {c.cluster for c in steps[-1].contributions} == {0, 1, 2}  # it contributes again
    for s in steps:  # every applied round judges exactly the clusters of its quorum
        for applied in s.applied:
            assert [v.cluster for v in applied.verdicts] == list(
                steps[applied.round].quorum.clusters
            )
    times = _recorded_at(database)
    after_kill = min(t for t in times.values() if t > killed_at)
    waited = left.metrics["quorum_seconds"]
    print(
        f"\nmembership: cluster 2 killed; next step committed {after_kill - killed_at:.2f} s later "
        f"(steps take {left.metrics['wall_seconds']:.1f} s; "
        f"the quorum without it formed after {waited:.2f} s of "
        f"waiting, heartbeat timeout {HEARTBEAT_TIMEOUT:g} "
        f"s); left at step {left.step}, rejoined at step "
        f"{joined.step}; steps lost {len(lost)}, duplicated {duplicated}"
    )
    assert waited < HEARTBEAT_TIMEOUT + 10, (
        "the survivors waited for the dead cluster far beyond the heartbeat timeout"
    )
    assert after_kill - killed_at < 60, "the survivors took too long to go on without cluster 2"

    # --deep: check 12 recomputes the verdicts of every step, the rounds of two clusters too
    # (the CLI's entry point, in this process: tests/unit/veritrain_in_process.py).
    cli_env = {"VERITRAIN_DATA_DIR": str(data), "COLUMNS": "200"}
    verified = run_veritrain(["verify", RUN, "--no-witness", "--deep"], cwd=tmp_path, env=cli_env)
    assert verified.returncode == 0, verified.stdout + verified.stderr
    # Re-execute the steps where membership changed -- the first without cluster 2, the one it
    # rejoined in (through the CLI, as an auditor would) -- and the last. Every other step is a
    # plain three-cluster round like those tests/e2e re-executes; leaving them out keeps this
    # test inside the CI budget.
    done = run_veritrain(["reproduce", RUN, "--step", str(joined.step)], cwd=tmp_path, env=cli_env)
    assert done.returncode == 0 and done.stdout.rstrip().endswith("MATCH"), (
        f"step {joined.step}:\n{done.stdout}{done.stderr}"
    )
    with DirectSource(load_settings(data_dir=data)) as source:
        for step in (left.step, STEPS - 1):
            comparison = reproduce_step(source, RUN, step)
            assert comparison.ok, comparison.render()
