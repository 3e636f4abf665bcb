"""Commands that do no tensor work start without importing torch (~3 s of CPU apiece, most of a
short command's time): listing the runs, a cluster's operator reading its key folder, checking a
signed note, making a witness key."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

COMMANDS = [
    ["runs"],
    ["db", "current"],
    ["cluster-keys", "r1", "--key-dir", "cluster-keys/cluster-1"],
    ["note", "verify", "--vkey", "nonsense", "missing.note"],
    ["witness", "keygen", "w1", "--out", "w1.key"],
]

# Each command in turn, in one fresh interpreter; the first after which torch is loaded is
# written to the file named by argv[2].
PROGRAM = """
import json, sys
from pathlib import Path
from veritrain.cli.main import main

commands, report = json.loads(sys.argv[1]), Path(sys.argv[2])
for argv in commands:
    sys.argv = ["veritrain", *argv]
    try:
        main()
    except SystemExit:
        pass
    if "torch" in sys.modules:
        report.write_text(" ".join(argv))
        break
"""


def test_commands_without_tensor_work_do_not_import_torch(tmp_path: Path) -> None:
    report = tmp_path / "imported-torch"
    env = {k: v for k, v in os.environ.items() if not k.startswith("VERITRAIN_")}
    env["VERITRAIN_DATA_DIR"] = str(tmp_path / "data")
    started = subprocess.run(
        [sys.executable, "-c", PROGRAM, json.dumps(COMMANDS), str(report)],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )

    assert started.returncode == 0, started.stderr
    assert not report.exists(), f"`veritrain {report.read_text()}` imported torch"
