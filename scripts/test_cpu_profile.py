#!/usr/bin/env python3
"""Where the CPU of a test run goes: per test file, with every process a test starts counted.

`make test` is bound by the CPU on 2 cores, and pytest's ``--durations`` only gives wall time,
which under xdist is mostly waiting for the other workers. This runs pytest with a small plugin
that logs when each test starts and ends on which worker, while the wrapper reads every
process's CPU time from /proc twice a second. A process's CPU is charged to the test its
pytest worker ran at that moment -- also when the process is a grandchild (a `veritrain train`
subprocess, its forkserver and the stage processes forked from it), which ``getrusage`` would
only see when the forkserver exits. What no worker started (PostgreSQL, SeaweedFS, pytest's
collection) is listed apart.

    scripts/test_cpu_profile.py [--out DIR] [--top N] -- [pytest arguments]

e.g. ``scripts/test_cpu_profile.py -- -n 4 --dist loadfile`` with the services running
(``. .ci-state/env``). Processes shorter than the sampling period are charged to their parent
only when it reaps them; the totals are a slight underestimate.
"""

from __future__ import annotations

import argparse
import bisect
import collections
import json
import os
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

TICKS = os.sysconf("SC_CLK_TCK")
PERIOD_S = 0.5
LOG_ENV = "TEST_CPU_PROFILE_DIR"


# -- the pytest plugin (loaded in each worker with -p test_cpu_profile) -------------------------


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_protocol(item: pytest.Item, nextitem: pytest.Item | None) -> Iterator[None]:
    started = time.time()
    yield
    folder = os.environ.get(LOG_ENV)
    if folder:
        worker = os.environ.get("PYTEST_XDIST_WORKER", "main")
        line = {"test": item.nodeid, "pid": os.getpid(), "t0": started, "t1": time.time()}
        with open(Path(folder) / f"tests-{worker}.jsonl", "a") as log:
            log.write(json.dumps(line) + "\n")


# -- sampling /proc -----------------------------------------------------------------------------


class Process:
    def __init__(self, parent: int, name: str, start: int) -> None:
        self.parent, self.name, self.start = parent, name, start
        self.ticks = 0


def _read_stat(pid: str) -> tuple[int, str, int, int] | None:
    """(parent pid, command name, CPU ticks, start time) of one process, None once it is gone."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    close = stat.rfind(")")
    fields = stat[close + 2 :].split()
    return (
        int(fields[1]),
        stat[stat.find("(") + 1 : close],
        int(fields[11]) + int(fields[12]),
        int(fields[19]),
    )


def _command(pid: int) -> str:
    try:
        raw = Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return ""
    return raw.replace(b"\0", b" ").decode(errors="replace")[:120]


def sample(run: subprocess.Popen[bytes]) -> list[tuple[float, int, float, Process]]:
    """(time, pid, CPU seconds since the last look, process) until ``run`` ends."""
    known: dict[int, Process] = {}
    charges: list[tuple[float, int, float, Process]] = []
    first = True
    while True:
        now = time.time()
        for entry in os.listdir("/proc"):
            if not entry.isdigit():
                continue
            stat = _read_stat(entry)
            if stat is None:
                continue
            parent, name, ticks, start = stat
            pid = int(entry)
            process = known.get(pid)
            if process is None or process.start != start:  # new, or a reused pid
                process = Process(parent, f"{name}: {_command(pid)}", start)
                # What ran before the profile started is not the tests'.
                process.ticks = ticks if first else 0
                known[pid] = process
            if ticks > process.ticks:
                charges.append((now, pid, (ticks - process.ticks) / TICKS, process))
                process.ticks = ticks
        first = False
        if run.poll() is not None:
            return charges
        time.sleep(PERIOD_S)


# -- charging the CPU to tests ------------------------------------------------------------------


def charge(
    folder: Path, charges: list[tuple[float, int, float, Process]]
) -> tuple[dict[str, float], dict[str, float]]:
    """(CPU seconds per test file, CPU seconds of what no test started, by command)."""
    runs: dict[int, list[dict[str, Any]]] = collections.defaultdict(list)
    for log in folder.glob("tests-*.jsonl"):
        for line in log.read_text().splitlines():
            entry = json.loads(line)
            runs[entry["pid"]].append(entry)
    for entries in runs.values():
        entries.sort(key=lambda e: e["t0"])
    starts = {pid: [e["t0"] for e in entries] for pid, entries in runs.items()}
    parents = {pid: process.parent for _, pid, _, process in charges}
    per_file: dict[str, float] = collections.defaultdict(float)
    elsewhere: dict[str, float] = collections.defaultdict(float)
    for when, pid, seconds, process in charges:
        worker, hops = pid, 0
        while worker not in runs and worker in parents and hops < 64:
            worker, hops = parents[worker], hops + 1
        if worker not in runs:
            elsewhere[process.name[:90]] += seconds
            continue
        i = bisect.bisect_right(starts[worker], when) - 1
        if i < 0:
            elsewhere["pytest workers before their first test (collection)"] += seconds
            continue
        per_file[runs[worker][i]["test"].split("::")[0]] += seconds
    return per_file, elsewhere


def _largest(seconds: dict[str, float], n: int) -> list[tuple[str, float]]:
    return sorted(seconds.items(), key=lambda item: -item[1])[:n]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, help="keep the logs here (default: a temporary folder)")
    parser.add_argument("--top", type=int, default=40, help="test files to list (default 40)")
    parser.add_argument("pytest_args", nargs="*", help="after --: what pytest is given")
    args = parser.parse_args()
    folder = args.out or Path(tempfile.mkdtemp(prefix="test-cpu-"))
    folder.mkdir(parents=True, exist_ok=True)
    here = str(Path(__file__).resolve().parent)
    env = {
        **os.environ,
        LOG_ENV: str(folder),
        "PYTHONPATH": os.pathsep.join(p for p in (here, os.environ.get("PYTHONPATH")) if p),
    }
    started = time.monotonic()
    run = subprocess.Popen(
        [sys.executable, "-m", "pytest", "-p", "test_cpu_profile", *args.pytest_args], env=env
    )
    charges = sample(run)
    wall = time.monotonic() - started
    per_file, elsewhere = charge(folder, charges)
    tests, other = sum(per_file.values()), sum(elsewhere.values())
    print(
        f"\nCPU: {tests:.0f} s charged to tests, {other:.0f} s elsewhere, in {wall:.0f} s of wall "
        f"time on {os.cpu_count()} cores ({(tests + other) / wall:.2f} cores busy on average)"
    )
    print(f"\n{'CPU s':>7} {'cum. s':>7}  test file")
    total = 0.0
    for name, seconds in _largest(per_file, args.top):
        total += seconds
        print(f"{seconds:7.0f} {total:7.0f}  {name}")
    print(f"\n{'CPU s':>7}  not started by a test")
    for name, seconds in _largest(elsewhere, 12):
        print(f"{seconds:7.0f}  {name}")
    print(f"\nlogs: {folder}")
    return run.returncode or 0


if __name__ == "__main__":
    sys.exit(main())
